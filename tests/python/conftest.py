"""Shared fixtures of the kvflash Python tests: a store per test, in the
test's temporary directory, and torch's attention as the reference."""

import os

import pytest
import torch
import torch.nn.functional as F

import kvflash

SHAPE = dict(n_layers=2, n_q_heads=8, n_kv_heads=2, head_dim=64)


@pytest.fixture
def make_store(tmp_path):
    """make_store(dtype=torch.float16, name="s", **options) -> open Store;
    every store made is closed at the end of the test."""
    made = []

    def make(dtype=torch.float16, name="s", **kw):
        opts = dict(SHAPE)
        opts.update(kw)
        opts.setdefault("n_threads", 2)
        st = kvflash.Store(os.path.join(tmp_path, name), dtype=dtype, **opts)
        made.append(st)
        return st

    yield make
    for st in made:
        st.close()


def sdpa(q, k, v, mask=None, scale=None):
    """torch's scaled_dot_product_attention (torch >= 2.0; the private
    _scaled_dot_product_attention of torch 1.13 before it).  q [B, L, E],
    k, v [B, S, E]; mask [L, S] bool, True = attend."""
    if scale is not None:
        q = q * (scale * q.shape[-1] ** 0.5)
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return F._scaled_dot_product_attention(q, k, v, mask, 0.0, False,
                                           False)[0]


def gqa_reference(q, k, v, mask=None):
    """Attention of q [L, Hq, D] over k, v [S, Hkv, D] (any float dtype,
    computed in float64) with a [L, S] keep-mask, through sdpa; returns
    [L, Hq, D] float32 and the log-sum-exp [L, Hq]."""
    hq, hk = q.shape[1], k.shape[1]
    kk = k.double().repeat_interleave(hq // hk, dim=1).transpose(0, 1)
    vv = v.double().repeat_interleave(hq // hk, dim=1).transpose(0, 1)
    qq = q.double().transpose(0, 1)
    out = sdpa(qq, kk, vv, mask)
    s = qq @ kk.transpose(1, 2) / q.shape[-1] ** 0.5
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    return out.transpose(0, 1).float(), lse.transpose(0, 1).float()
