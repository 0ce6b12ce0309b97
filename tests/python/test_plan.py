"""The planners from Python (kvflash.plan): the profile kept with the
store, the planners' picks and refusals, K,V recomputed from X equal to
the K,V stored, and the X-cache split merged by LSE equal to attention
over the whole context."""

import math

import numpy as np
import pytest

import kvflash
import kvflash.plan as kp


def test_profile_survives_reopen(make_store, tmp_path):
    st = make_store(dtype="f16")
    with pytest.raises(kvflash.NotFound):
        kp.profile_get(st)
    with pytest.raises(kvflash.InvalidArgument, match="caller_flops 0"):
        kp.profile_run(st, 77, 0.0, 1e9)
    p = kp.profile_run(st, 77, 1e10, 1e9, n_tokens=128)
    assert p["read_cold_bytes_per_s"] > 0 and p["store_flops"] > 0
    assert p["profile_tokens"] == 128
    path = st.path
    st.close()
    with kvflash.Store(path) as again:
        assert kp.profile_get(again) == p
        plan = kp.plan_kvpr(p, again, 1000, 1000)
        assert 0 <= plan["l"] <= 1000
        x = kp.plan_xcache(p, again, 1000, 0)
        assert x["x_tokens"] == 0 and x["alpha"] == 0
        beta, share = kp.plan_beta(p, again)
        assert beta > 0 and 0 < share < 1


def test_planner_refusals():
    m = dict(n_q_heads=8, n_kv_heads=8, head_dim=64, dtype="f16")
    p = dict(caller_flops=1e12, link_bytes_per_s=1e10,
             read_cold_bytes_per_s=1e9, read_x_bytes_per_s=1e9,
             store_flops=1e11, attend_tokens_per_s=1e6, x_latency_s=1e-4)
    assert kp.plan_kvpr(p, m, 0, 0)["l"] == 0
    for field in ("caller_flops", "link_bytes_per_s", "read_cold_bytes_per_s"):
        for bad in (0.0, -1.0, math.nan):
            q = dict(p)
            q[field] = bad
            with pytest.raises(kvflash.InvalidArgument, match=field):
                kp.plan_kvpr(q, m, 100, 100)
    with pytest.raises(kvflash.InvalidArgument, match="not a multiple"):
        kp.plan_xcache(p, dict(m, n_kv_heads=3), 100, 100)


def test_recompute_and_merge(make_store):
    st = make_store(dtype="f32", media="memory")
    n, d, c = 70, st.n_q_heads * st.head_dim, st.n_kv_heads * st.head_dim
    rng = np.random.default_rng(5)
    x = rng.standard_normal((n, st.n_q_heads, st.head_dim), np.float32)
    wk = rng.standard_normal((d, c), np.float32) / 8
    wv = rng.standard_normal((d, c), np.float32) / 8
    k = (x.reshape(n, d) @ wk).reshape(n, st.n_kv_heads, st.head_dim)
    v = (x.reshape(n, d) @ wv).reshape(n, st.n_kv_heads, st.head_dim)
    st.seq_create(1)
    st.append(1, 0, k, v)
    st.append_x(1, 0, x)
    kp.kv_weights_set(st, 0, wk, wv)          # no RoPE: K = X W_k
    kr, vr = kp.recompute_kv(st, 1, 0, 0, n)
    assert np.allclose(kr, k, rtol=1e-5, atol=1e-5)
    assert np.allclose(vr, v, rtol=1e-5, atol=1e-5)
    q = rng.standard_normal((st.n_q_heads, st.head_dim), np.float32)
    a = 30
    out_x, lse_x = kp.attend_x(st, 1, 0, 0, a, q)
    mask = np.zeros(n, np.uint8)
    mask[a:] = 1
    out_c, lse_c = st.attend(1, 0, q, lse=True, mask=mask)
    out, _ = kvflash.attn_merge(out_x, lse_x, np.asarray(out_c),
                                np.asarray(lse_c))
    dense = np.asarray(st.attend(1, 0, q))
    err = np.abs(np.asarray(out) - dense).max() / np.abs(dense).max()
    assert err < 1e-5
