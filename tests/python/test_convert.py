"""Dtype conversion from Python: append takes float16, bfloat16 and
float32 into a store of any of them, rounding to nearest even as torch's
.to() does (NaN and infinities kept); read(..., dtype=) and
read_x(..., dtype=) give any of them back; a new store needs its dtype."""

import os

import pytest
import torch

import kvflash

DTYPES = [torch.float16, torch.bfloat16, torch.float32]


def values(n):
    """Random rows, with NaN, infinities, signed zeros, f16's overflow and
    subnormals, and ties of f32 -> f16 and f32 -> bf16 rounding."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(n, 2, 64, generator=g) * 10
    flat = x.view(-1)
    special = torch.tensor([float("nan"), float("inf"), float("-inf"), 0.0,
                            -0.0, 70000.0, -65520.0, 65519.0, 3e-8, 6e-5,
                            1.0 + 2 ** -11, 1.0 + 3 * 2 ** -11,
                            1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8])
    flat[:special.numel()] = special
    return x


def same(a, b):
    """Equal, NaN where the other has NaN."""
    a, b = a.float(), b.float()
    return torch.equal(torch.isnan(a), torch.isnan(b)) and \
        torch.equal(torch.nan_to_num(a), torch.nan_to_num(b))


@pytest.mark.parametrize("store_dtype", DTYPES)
@pytest.mark.parametrize("in_dtype", DTYPES)
def test_append_converts(make_store, store_dtype, in_dtype):
    st = make_store(dtype=store_dtype, media="memory")
    st.seq_create(1)
    src = values(40).to(in_dtype)
    st.append(1, 0, src[:17], src[:17])
    st.append(1, 0, src[17:, :, :], src[17:])
    want = src.to(store_dtype)
    for h in range(2):
        k, v = st.read(1, 0, h)
        assert k.dtype == store_dtype
        assert same(k, want[:, h]) and same(v, want[:, h])
        for out in DTYPES:
            k, _ = st.read(1, 0, h, 3, 30, dtype=out)
            assert k.dtype == out and same(k, want[3:30, h].to(out))


def test_append_x_and_read_x_convert(make_store):
    st = make_store(dtype=torch.bfloat16, media="memory")
    st.seq_create(1)
    x = torch.randn(9, 8, 64)
    st.append_x(1, 1, x)
    assert same(st.read_x(1, 1), x.to(torch.bfloat16).reshape(9, 512))
    got = st.read_x(1, 1, 2, 5, dtype="f32")
    assert got.dtype == torch.float32
    assert same(got, x[2:5].to(torch.bfloat16).float().reshape(3, 512))


def test_refusals(make_store, tmp_path):
    st = make_store(media="memory")
    st.seq_create(1)
    k = torch.randn(4, 2, 64)
    st.append(1, 0, k, k)
    with pytest.raises(kvflash.InvalidArgument, match="float64, not "
                       "float16, bfloat16 or float32"):
        st.append(1, 0, k.double(), k)
    with pytest.raises(kvflash.InvalidArgument, match="int8"):
        st.read(1, 0, 0, dtype=torch.int8)
    with pytest.raises(kvflash.OutOfRange, match="past the end"):
        st.read(1, 0, 0, 0, 5, dtype=torch.float32)
    assert st.seq_len(1, 0) == 4
    path = os.path.join(tmp_path, "nodtype")
    with pytest.raises(kvflash.InvalidArgument, match="needs its dtype"):
        kvflash.Store(path, n_layers=1, n_q_heads=2, n_kv_heads=2,
                      head_dim=64)
    assert not os.path.exists(os.path.join(path, "KVFLASH"))
