"""Rollback and positions from Python: Store.truncate and
append(..., pos=): speculative decoding's draft tokens cut off give the
attention of a run that never saw them, a position that is not the
layer's length is refused with both numbers, and a cut survives a
reopen."""

import os

import pytest
import torch

import kvflash


def test_speculative_decoding(make_store):
    spec = make_store(dtype=torch.float32, name="spec", media="memory")
    plain = make_store(dtype=torch.float32, name="plain", media="memory")
    g = torch.Generator().manual_seed(7)
    text = torch.randn(200, 2, 2, 64, generator=g)   # token, K/V, head, dim
    for st in (spec, plain):
        st.seq_create(1)
        for layer in range(2):
            st.append(1, layer, text[:20, 0], text[:20, 1], pos=0)
    n = 20
    for step in range(25):
        k = 1 + step % 5
        accept = (step * 7) % (k + 1)
        drafts = torch.randn(k, 2, 2, 64, generator=g)
        drafts[:accept] = text[n:n + accept]
        q = torch.randn(8, 64, generator=g)
        for layer in range(2):
            spec.append(1, layer, drafts[:, 0], drafts[:, 1], pos=n)
            spec.attend(1, layer, q)                # the verification
        spec.truncate(1, n + accept)
        for layer in range(2):
            spec.append(1, layer, text[n + accept:n + accept + 1, 0],
                        text[n + accept:n + accept + 1, 1], pos=n + accept)
            plain.append(1, layer, text[n:n + accept + 1, 0],
                         text[n:n + accept + 1, 1], pos=n)
        n += accept + 1
        for layer in range(2):
            assert spec.seq_len(1, layer) == n
            assert torch.equal(spec.attend(1, layer, q),
                               plain.attend(1, layer, q))


def test_position_refused(make_store):
    st = make_store()
    st.seq_create(1)
    kv = torch.zeros(3, 2, 64, dtype=torch.float16)
    st.append(1, 0, kv, kv, pos=0)
    with pytest.raises(kvflash.OutOfRange, match="holds 3 tokens, not the "
                       "position 2 the append expects"):
        st.append(1, 0, kv, kv, pos=2)
    with pytest.raises(kvflash.InvalidArgument, match="pos"):
        st.append(1, 0, kv, kv, pos=-1)
    # the library's "anywhere" (KVF_POS_ANY), given as a position: no
    # layer holds it
    with pytest.raises(kvflash.OutOfRange, match="holds 3 tokens"):
        st.append(1, 0, kv, kv, pos=2**64 - 1)
    assert st.seq_len(1, 0) == 3
    st.append(1, 0, kv, kv)                          # pos=None: anywhere
    assert st.seq_len(1, 0) == 6


def test_truncate_refusals_and_reopen(make_store, tmp_path):
    st = make_store(name="t")
    st.seq_create(1)
    k = torch.randn(50, 2, 64).half()
    for layer in range(2):
        st.append(1, layer, k, k)
    with pytest.raises(kvflash.OutOfRange, match="n_tokens 51 past the end"):
        st.truncate(1, 51)
    with pytest.raises(kvflash.NotFound):
        st.truncate(2, 0)
    with pytest.raises(kvflash.InvalidArgument):
        st.truncate(1, -3)
    st.sync()
    st.truncate(1, 17)
    st.close()
    with kvflash.Store(os.path.join(tmp_path, "t")) as again:
        assert again.seq_len(1, 0) == 17 and again.seq_len(1, 1) == 17
        rk, _ = again.read(1, 1, 1)
        assert torch.equal(rk, k[:17, 1])
    with kvflash.Store(os.path.join(tmp_path, "t"), read_only=1) as ro:
        with pytest.raises(kvflash.NotSupported, match="read-only"):
            ro.truncate(1, 3)


def test_seq_reset(make_store):
    st = make_store(media="memory")
    st.seq_create(1)
    k = torch.randn(5, 2, 64).half()
    st.append(1, 0, k, k)
    with pytest.raises(kvflash.Exists):
        st.seq_create(1)
    st.seq_reset(1)                     # what was left goes: empty again
    assert st.seq_len(1, 0) == 0
    st.seq_reset(9)                     # a free id: created
    assert sorted(st.seq_list()) == [1, 9]
    with pytest.raises(kvflash.InvalidArgument, match="reserved"):
        st.seq_reset(2 ** 64 - 1)
