"""Typed appends: every dtype, strided inputs (zero copy where the rows are
contiguous), X rows, and refusals that change nothing."""

import numpy as np
import pytest
import torch

import kvflash


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16,
                                   torch.float32])
def test_round_trip_every_dtype(make_store, dtype):
    st = make_store(dtype=dtype)
    st.seq_create(1)
    k = torch.randn(77, 2, 64).to(dtype)
    v = torch.randn(77, 2, 64).to(dtype)
    st.append(1, 0, k[:30], v[:30])
    st.append(1, 0, k[30:], v[30:])
    st.sync()
    for h in range(2):
        rk, rv = st.read(1, 0, h)
        assert rk.dtype == dtype and rk.shape == (77, 64)
        assert torch.equal(rk, k[:, h]) and torch.equal(rv, v[:, h])
    rk, _ = st.read(1, 0, 0, 10, 20)
    assert torch.equal(rk, k[10:20, 0])


def test_strided_slices(make_store):
    st = make_store(media="memory")
    st.seq_create(1)
    big = torch.randn(200, 3, 2, 64).half()        # [tokens, K/V/other, ...]
    k = big[::3, 0]                                # every third token
    v = big[1::3, 2]
    assert not k.is_contiguous()
    st.append(1, 1, k, v)
    # heads in reverse order: a negative head stride is copied once
    k2 = big[:5, 1].flip(1)
    st.append(1, 1, k2, k2)
    # a transposed last dimension is copied once, too
    k3 = torch.randn(4, 2, 64).half().transpose(0, 1).contiguous() \
        .transpose(0, 1)
    k3t = torch.randn(4, 64, 2).half().transpose(1, 2)
    st.append(1, 1, k3t, k3)
    n = k.shape[0]
    for h in range(2):
        rk, rv = st.read(1, 1, h)
        assert torch.equal(rk[:n], k[:, h]) and torch.equal(rv[:n], v[:, h])
        assert torch.equal(rk[n:n + 5], k2[:, h])
        assert torch.equal(rk[n + 5:], k3t[:, h]) and \
            torch.equal(rv[n + 5:], k3[:, h])


def test_broadcast_inputs_are_copied_out(make_store):
    """A stride of 0 (torch expand, numpy broadcast_to) is no dense row:
    the library took it for one and read past the data (garbage stored,
    or a crash for a large one)."""
    st = make_store(media="memory")
    st.seq_create(1)
    row = torch.randn(1, 1, 64).half()
    k = row.expand(5, 2, 64)                       # over tokens and heads
    v = torch.randn(5, 1, 64).half().expand(5, 2, 64)   # over heads
    assert k.stride()[0] == 0 and v.stride()[1] == 0
    st.append(1, 0, k, v)
    kn = np.broadcast_to(row.numpy(), (3, 2, 64))
    st.append(1, 0, kn, kn)
    for h in range(2):
        rk, rv = st.read(1, 0, h)
        assert torch.equal(rk, row[0, 0].expand(8, 64))
        assert torch.equal(rv[:5], v[:, h])


def test_numpy_f16_strided_and_bf16_bits(make_store):
    st = make_store(dtype="f16", media="memory")
    st.seq_create(1)
    a = np.random.rand(10, 4, 64).astype(np.float16)
    st.append(1, 0, a[:, ::2], a[:, 1::2])
    rk, rv = st.read(1, 0, 1)
    assert np.array_equal(rk, a[:, 2]) and np.array_equal(rv, a[:, 3])
    sb = make_store(dtype="bf16", name="b", media="memory")
    sb.seq_create(1)
    bits = torch.randn(6, 2, 64).to(torch.bfloat16)
    raw = bits.view(torch.int16).numpy().view(np.uint16)
    sb.append(1, 0, raw, raw)
    rk, _ = sb.read(1, 0, 0)
    assert rk.dtype == np.uint16 and np.array_equal(rk, raw[:, 0])


def test_x_rows(make_store):
    st = make_store(media="memory")
    st.seq_create(1)
    x = torch.randn(20, 8, 64).half()
    st.append_x(1, 0, x[:5])
    st.append_x(1, 0, x[5:].reshape(15, 8 * 64))
    assert st.seq_x_len(1, 0) == 20
    rx = st.read_x(1, 0)
    assert rx.shape == (20, 512) and torch.equal(rx, x.reshape(20, 512))
    with pytest.raises(kvflash.InvalidArgument) as e:
        st.append_x(1, 0, torch.randn(3, 4, 64).half())
    assert "x must have shape [n_tokens, 8, 64]" in e.value.message


def test_wrong_dtype_and_shape_change_nothing(make_store):
    st = make_store(media="memory")
    st.seq_create(1)
    k = torch.randn(9, 2, 64).half()
    st.append(1, 0, k, k)
    before = (st.seq_len(1, 0), st.stats()["user_bytes"])
    cases = [
        ((k.double(), k), "append: k has dtype torch.float64, not "
                          "float16, bfloat16 or float32"),
        ((k[:, :1], k[:, :1]), "k must have shape [n_tokens, 2, 64], got "
                               "(9, 1, 64)"),
        ((k[..., :32], k[..., :32]), "got (9, 2, 32)"),
        ((k.reshape(9, 128), k), "got (9, 128)"),
        ((k, k[:8]), "append: k has 9 tokens, v has 8"),
        (([1, 2], k), "k must be a torch tensor or a numpy array, got list"),
        ((k.numpy().astype(np.float64), k), "k has dtype float64"),
        ((k, k.numpy().astype(np.int32)), "v has dtype int32"),
    ]
    for (a, b), msg in cases:
        with pytest.raises(kvflash.InvalidArgument) as e:
            st.append(1, 0, a, b)
        assert e.value.status == 10
        assert msg in e.value.message, e.value.message
        assert (st.seq_len(1, 0), st.stats()["user_bytes"]) == before
    with pytest.raises(kvflash.NotFound):
        st.append(2, 0, k, k)
    with pytest.raises(kvflash.OutOfRange):
        st.append(1, 2, k, k)
    with pytest.raises(kvflash.OutOfRange) as e:
        st.read(1, 0, 0, 0, 10)
    assert "past the end" in e.value.message or "10" in e.value.message
    assert (st.seq_len(1, 0), st.stats()["user_bytes"]) == before


def test_zero_copy_for_contiguous_inputs(make_store, monkeypatch):
    """A contiguous CPU tensor goes to the library as it lies: the binding
    makes no copy of it (host() returns the very object)."""
    from kvflash import _arrays
    st = make_store(media="memory")
    st.seq_create(1)
    k = torch.randn(8, 2, 64).half()
    seen = []
    orig = _arrays.host

    def spy(x):
        y = orig(x)
        seen.append(y is x and y.data_ptr() == x.data_ptr())
        return y

    monkeypatch.setattr(_arrays, "host", spy)
    st.append(1, 0, k, k[:, :, :])
    assert seen == [True, True]


@pytest.mark.parametrize("head_dim,dtype", [(80, torch.float16),
                                            (80, torch.float32),
                                            (192, torch.float16),
                                            (48, torch.bfloat16)])
def test_any_head_size(make_store, head_dim, dtype):
    """Head sizes whose rows do not divide the page: exact round trips
    across groups (of one page or several), attention with the default
    scale 1/sqrt(head_dim) of the real head_dim."""
    st = make_store(dtype=dtype, head_dim=head_dim)
    assert st.info()["group_pages"] == st.group_pages >= 1
    st.seq_create(1)
    n = 3 * st.group_tokens + 5
    k = torch.randn(n, 2, head_dim).to(dtype)
    v = torch.randn(n, 2, head_dim).to(dtype)
    for layer in range(2):
        st.append(1, layer, k[:n // 2], v[:n // 2])
        st.sync()
        st.append(1, layer, k[n // 2:], v[n // 2:])
    for h in range(2):
        rk, rv = st.read(1, 1, h)
        assert rk.shape == (n, head_dim)
        assert torch.equal(rk, k[:, h]) and torch.equal(rv, v[:, h])
    q = torch.randn(8, head_dim)
    out = st.attend(1, 1, q)
    kf, vf = k.float(), v.float()
    for h in range(8):
        kv = h // 4  # query head h reads KV head h / (n_q / n_kv)
        s = (kf[:, kv] @ q[h]) / head_dim ** 0.5
        want = torch.softmax(s.double(), 0).float() @ vf[:, kv]
        assert torch.allclose(out[h], want, atol=2e-5, rtol=2e-5)
