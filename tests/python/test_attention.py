"""Attention near the data against torch's scaled_dot_product_attention:
decode (kvf_attend), batches, several query positions with a causal mask
(kvf_attend_multi: chunked prefill, speculative verification), windows,
masks, LSE, the background calls, scores and top-k."""

import numpy as np
import pytest
import torch

import kvflash
from conftest import gqa_reference


def filled(make_store, dtype=torch.float16, n=100, seqs=(1,), **kw):
    st = make_store(dtype=dtype, media="memory", **kw)
    data = {}
    for s in seqs:
        st.seq_create(s)
        k = torch.randn(n, 2, 64).to(dtype)
        v = torch.randn(n, 2, 64).to(dtype)
        st.append(s, 1, k, v)
        data[s] = (k, v)
    return st, data


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16,
                                   torch.float32])
def test_attend_matches_sdpa(make_store, dtype):
    st, data = filled(make_store, dtype, n=137)
    k, v = data[1]
    q = torch.randn(8, 64)
    out, lse = st.attend(1, 1, q, lse=True)
    ref, ref_lse = gqa_reference(q[None], k, v)
    assert out.dtype == torch.float32 and out.shape == (8, 64)
    torch.testing.assert_close(out, ref[0], atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(lse, ref_lse[0], atol=2e-5, rtol=1e-5)
    # q in half precision is widened; a numpy q gives numpy back
    out16 = st.attend(1, 1, q.half())
    torch.testing.assert_close(out16, st.attend(1, 1, q.half().float()))
    outn = st.attend(1, 1, q.numpy())
    assert isinstance(outn, np.ndarray) and np.allclose(outn, out.numpy())


def test_window_and_mask(make_store):
    st, data = filled(make_store, n=90)
    k, v = data[1]
    q = torch.randn(8, 64)
    mask = torch.rand(90) > 0.3
    out = st.attend(1, 1, q, mask=mask)
    ref, _ = gqa_reference(q[None], k, v, mask[None])
    torch.testing.assert_close(out, ref[0], atol=2e-5, rtol=1e-4)
    out = st.attend(1, 1, q, window=17)
    win = torch.zeros(90, dtype=torch.bool)
    win[-17:] = True
    ref, _ = gqa_reference(q[None], k, v, win[None])
    torch.testing.assert_close(out, ref[0], atol=2e-5, rtol=1e-4)
    with pytest.raises(kvflash.OutOfRange) as e:
        st.attend(1, 1, q, mask=mask[:50])
    assert "mask_len 50 is shorter" in e.value.message


def test_attend_batch(make_store):
    st, data = filled(make_store, n=70, seqs=(4, 9, 2))
    q = torch.randn(3, 8, 64)
    out, lse = st.attend_batch([4, 9, 2], 1, q, lse=True)
    for i, s in enumerate((4, 9, 2)):
        ref, ref_lse = gqa_reference(q[i][None], *data[s])
        torch.testing.assert_close(out[i], ref[0], atol=2e-5, rtol=1e-4)
        torch.testing.assert_close(lse[i], ref_lse[0], atol=2e-5, rtol=1e-5)
    with pytest.raises(kvflash.InvalidArgument) as e:
        st.attend_batch([4, 4], 1, q[:2])
    assert "sequence 4 is given twice" in e.value.message
    with pytest.raises(kvflash.InvalidArgument) as e:
        st.attend_batch([4, 9], 1, q)
    assert "q must have shape (2, 8, 64), got (3, 8, 64)" in e.value.message


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_multi_query_causal_prefill(make_store, dtype):
    """Chunked prefill: append a chunk's K/V, then attend its queries at
    their positions in one call; every chunk against sdpa with a causal
    mask over the whole prefix."""
    st = make_store(dtype=dtype, media="memory")
    st.seq_create(1)
    n, chunk = 100, 37
    k = torch.randn(n, 2, 64).to(dtype)
    v = torch.randn(n, 2, 64).to(dtype)
    q = torch.randn(n, 8, 64)
    for t0 in range(0, n, chunk):
        t1 = min(t0 + chunk, n)
        st.append(1, 0, k[t0:t1], v[t0:t1])
        pos = torch.arange(t0, t1)
        out, lse = st.attend_multi(1, 0, q[t0:t1], pos, lse=True)
        causal = torch.arange(t1)[None, :] <= pos[:, None]
        ref, ref_lse = gqa_reference(q[t0:t1], k[:t1], v[:t1], causal)
        torch.testing.assert_close(out, ref, atol=2e-5, rtol=1e-4)
        torch.testing.assert_close(lse, ref_lse, atol=2e-5, rtol=1e-5)


def test_multi_query_speculative_and_window(make_store):
    st, data = filled(make_store, n=64)
    k, v = data[1]
    # draft tokens at positions 60..63, unsorted and repeated, plus window
    pos = torch.tensor([63, 60, 62, 62, 61])
    q = torch.randn(5, 8, 64)
    for window in (0, 9):
        out = st.attend_multi(1, 1, q, pos, window=window)
        t = torch.arange(64)[None, :]
        keep = t <= pos[:, None]
        if window:
            keep &= t > pos[:, None] - window
        ref, _ = gqa_reference(q, k, v, keep)
        torch.testing.assert_close(out, ref, atol=2e-5, rtol=1e-4)
    # no positions: every token, as attend
    out = st.attend_multi(1, 1, q)
    torch.testing.assert_close(out[2], st.attend(1, 1, q[2]), atol=1e-6,
                               rtol=1e-6)
    with pytest.raises(kvflash.OutOfRange) as e:
        st.attend_multi(1, 1, q, torch.tensor([1, 2, 3, 4, 64]))
    assert "query 4 is at position 64, past the 64 tokens" in e.value.message
    with pytest.raises(kvflash.InvalidArgument) as e:
        st.attend_multi(1, 1, q, [1, 2])
    assert "positions must hold 5 entries" in e.value.message
    with pytest.raises(kvflash.InvalidArgument):
        st.attend_multi(1, 1, q, [1, 2, 3, 4, -1])


def test_attend_start_overlaps_and_matches(make_store):
    st, data = filled(make_store, n=300, seqs=(1, 2))
    q = torch.randn(2, 8, 64)
    want = st.attend_batch([1, 2], 1, q)
    job = st.attend_start([1, 2], 1, q, lse=True)
    q.zero_()  # the query was copied at the start
    out, lse = job.wait()
    assert torch.equal(out, want) and lse.shape == (2, 8)
    with pytest.raises(kvflash.InvalidArgument):
        job.wait()
    job = st.attend_start([5], 1, torch.randn(1, 8, 64))
    with pytest.raises(kvflash.NotFound) as e:
        job.wait()
    assert "sequence 5 does not exist" in e.value.message
    with pytest.raises(kvflash.OutOfRange):
        st.attend_start([1], 7, torch.randn(1, 8, 64))


def test_scores_and_topk(make_store):
    st, data = filled(make_store, n=40)
    k, v = data[1]
    q = torch.randn(8, 64)
    p = st.scores(1, 1, q)
    kk = k.double().repeat_interleave(4, dim=1)
    ref = torch.einsum("hd,thd->ht", q.double(), kk).div(8).softmax(-1)
    torch.testing.assert_close(p, ref.float(), atol=1e-5, rtol=1e-4)
    tokens, mass, n = st.topk(1, 1, q, 5)
    assert tokens.shape == (2, 5) and list(n) == [5, 5]
    for h in range(2):
        group = ref[h * 4:(h + 1) * 4].mean(0)
        want = set(torch.topk(group, 5).indices.tolist())
        assert set(tokens[h].tolist()) == want


def test_attn_merge_of_two_halves(make_store):
    """Attention over tokens [0, 60) merged from [0, 30) (a mask) and
    [30, 60) (the window) equals attention over all of them."""
    st, data = filled(make_store, n=60)
    q = torch.randn(8, 64)
    first = torch.zeros(60, dtype=torch.bool)
    first[:30] = True
    a, la = st.attend(1, 1, q, lse=True, mask=first)
    b, lb = st.attend(1, 1, q, lse=True, window=30)
    out, lse = kvflash.attn_merge(a, la, b, lb)
    want, want_lse = st.attend(1, 1, q, lse=True)
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse, want_lse, atol=1e-5, rtol=1e-5)
    with pytest.raises(kvflash.InvalidArgument):
        kvflash.attn_merge(a, la, b[:4], lb)


def test_sparse_attend_through_python(make_store):
    """SparF (sparse=1) on a store with K^T pages: with every token chosen
    it is dense attention; a store without K^T pages refuses it."""
    st, data = filled(make_store, dtype=torch.float32, n=64, kt_pages=1)
    q = torch.randn(8, 64)
    dense = st.attend(1, 1, q)
    sparse = st.attend(1, 1, q, sparse=1, top_r=64, top_k=64,
                       sink_tokens=4, recent_tokens=8)
    torch.testing.assert_close(sparse, dense, atol=1e-4, rtol=1e-3)
    plain, _ = filled(make_store, n=8, name="plain")
    with pytest.raises(kvflash.NotSupported) as e:
        plain.attend(1, 1, q, sparse=1)
    assert "kt_pages" in e.value.message
