"""The planners from Python: the profile kept with a store, KVPR's split,
HILOS's X-cache share, HillInfer's beta, and K,V recomputed from X near
the data (docs/planners.md).  Thin wrappers over the kvf_profile_*,
kvf_plan_*, kvf_kv_weights_set, kvf_recompute_kv and kvf_attend_x calls:

    import kvflash.plan as kp
    prof = kp.profile_run(st, scratch_seq=999, caller_flops=50e12,
                          link_bytes_per_s=25e9)      # kept in DIR/PROFILE
    prof = kp.profile_get(st)                        # after a reopen
    l = kp.plan_kvpr(prof, st, n_tokens, x_tokens)["l"]
    a = kp.plan_xcache(prof, st, n_tokens, x_tokens)["x_tokens"]

Profiles are plain dicts of the kvf_profile fields; a model is a Store (its
shape) or a dict with n_q_heads, n_kv_heads, head_dim and dtype.
"""

import ctypes

import numpy as np

from . import _arrays as A
from . import _lib
from ._lib import lib, c_size_t, c_u32, c_u64, c_f32, c_f64, c_ptr, c_i32
from ._check import check, set_field

PROFILE_FIELDS = ["caller_flops", "link_bytes_per_s", "read_cold_bytes_per_s",
                  "read_warm_bytes_per_s", "sparf_cold_bytes_per_s",
                  "sparf_warm_bytes_per_s", "attend_tokens_per_s",
                  "store_flops", "read_x_bytes_per_s", "x_latency_s"]


class Profile(ctypes.Structure):
    _fields_ = ([("struct_size", c_size_t)] +
                [(f, c_f64) for f in PROFILE_FIELDS] +
                [("profile_tokens", c_u64), ("measured_unix_s", c_u64)])


class KvprPlan(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("l", c_u64), ("t_step_s", c_f64),
                ("t_x_s", c_f64), ("t_recompute_s", c_f64),
                ("t_transfer_s", c_f64)]


class XcachePlan(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("alpha", c_f64),
                ("x_tokens", c_u64), ("t_step_s", c_f64),
                ("t_store_s", c_f64), ("t_caller_s", c_f64),
                ("x_smaller", c_u32)]


_SIGNATURES = {
    "kvf_profile_init_sized": (None, [c_ptr, c_size_t]),
    "kvf_profile_run": (c_i32, [c_ptr, c_u64, c_u64, c_ptr]),
    "kvf_profile_get": (c_i32, [c_ptr, c_ptr]),
    "kvf_plan_kvpr": (c_i32, [c_ptr, c_ptr, c_u64, c_u64, c_ptr]),
    "kvf_plan_xcache": (c_i32, [c_ptr, c_ptr, c_u64, c_u64, c_ptr]),
    "kvf_plan_beta": (c_i32, [c_ptr, c_ptr, c_ptr, c_ptr]),
    "kvf_kv_weights_set": (c_i32, [c_ptr, c_u32, c_ptr, c_ptr, c_f32]),
    "kvf_recompute_kv": (c_i32, [c_ptr, c_u64, c_u32, c_u64, c_u64, c_ptr,
                                 c_ptr]),
    "kvf_attend_x": (c_i32, [c_ptr, c_u64, c_u32, c_u64, c_u64, c_ptr,
                             c_ptr, c_ptr]),
}
for _name, (_res, _args) in _SIGNATURES.items():
    _f = getattr(lib, _name)
    _f.restype = _res
    _f.argtypes = _args
for _which, _mirror in ((9, Profile), (10, KvprPlan), (11, XcachePlan)):
    if lib.kvf_struct_size(_which) != ctypes.sizeof(_mirror):
        raise ImportError("kvflash.plan: the binding's %s is %d bytes, the "
                          "library's %d" % (_mirror.__name__,
                                            ctypes.sizeof(_mirror),
                                            lib.kvf_struct_size(_which)))


def _profile(d):
    p = Profile()
    lib.kvf_profile_init_sized(ctypes.byref(p), ctypes.sizeof(p))
    for f in PROFILE_FIELDS + ["profile_tokens", "measured_unix_s"]:
        if f in d:
            set_field(p, f, d[f], "kvflash.plan: profile")
    return p


def _dict(p):
    return {f: getattr(p, f) for f, _ in p._fields_ if f != "struct_size"}


def _model(m):
    if isinstance(m, dict):
        model = _lib.Model()
        model.dtype = A.parse_dtype(m.get("dtype", "f16"))[0]
        for f in ("n_q_heads", "n_kv_heads", "head_dim"):
            set_field(model, f, m[f], "kvflash.plan: model")
        return model
    return _lib.Model(m.n_layers, m.n_q_heads, m.n_kv_heads, m.head_dim,
                      m.dtype_code)


def profile_run(store, scratch_seq, caller_flops, link_bytes_per_s,
                n_tokens=0):
    """kvf_profile_run: measure the store (the caller states its FLOP/s
    and link bytes/s); the profile is kept with the store and returned."""
    p = _profile({"caller_flops": caller_flops,
                  "link_bytes_per_s": link_bytes_per_s})
    check(lib.kvf_profile_run(store._h("profile_run"), scratch_seq, n_tokens,
                              ctypes.byref(p)))
    return _dict(p)


def profile_get(store):
    """kvf_profile_get: the profile kept with the store (NotFound if none)."""
    p = _profile({})
    check(lib.kvf_profile_get(store._h("profile_get"), ctypes.byref(p)))
    return _dict(p)


def plan_kvpr(profile, model, n_tokens, x_tokens):
    """kvf_plan_kvpr: {"l", "t_step_s", "t_x_s", "t_recompute_s",
    "t_transfer_s"}."""
    p, m, out = _profile(profile), _model(model), KvprPlan()
    out.struct_size = ctypes.sizeof(out)
    check(lib.kvf_plan_kvpr(ctypes.byref(p), ctypes.byref(m), n_tokens,
                            x_tokens, ctypes.byref(out)))
    return _dict(out)


def plan_xcache(profile, model, n_tokens, x_tokens):
    """kvf_plan_xcache: {"alpha", "x_tokens", "t_step_s", "t_store_s",
    "t_caller_s", "x_smaller"}."""
    p, m, out = _profile(profile), _model(model), XcachePlan()
    out.struct_size = ctypes.sizeof(out)
    check(lib.kvf_plan_xcache(ctypes.byref(p), ctypes.byref(m), n_tokens,
                              x_tokens, ctypes.byref(out)))
    return _dict(out)


def plan_beta(profile, model):
    """kvf_plan_beta: (beta, the store's share of the evaluation)."""
    p, m = _profile(profile), _model(model)
    beta, share = c_f64(), c_f64()
    check(lib.kvf_plan_beta(ctypes.byref(p), ctypes.byref(m),
                            ctypes.byref(beta), ctypes.byref(share)))
    return beta.value, share.value


def kv_weights_set(store, layer, w_k, w_v, rope_theta=0.0):
    """kvf_kv_weights_set: w_k, w_v [n_q_heads * head_dim, n_kv_heads *
    head_dim] (any float type; float32 is passed)."""
    call = "kv_weights_set"
    shape = (store.n_q_heads * store.head_dim,
             store.n_kv_heads * store.head_dim)
    wk = A.f32(call, "w_k", w_k, shape)
    wv = A.f32(call, "w_v", w_v, shape)
    check(lib.kvf_kv_weights_set(store._h(call), layer, A.pointer(wk),
                                 A.pointer(wv), rope_theta))


def recompute_kv(store, seq, layer, t0, t1):
    """kvf_recompute_kv: (K, V) float32 [t1 - t0, n_kv_heads, head_dim]
    recomputed from the stored X near the data."""
    shape = (max(t1 - t0, 0), store.n_kv_heads, store.head_dim)
    k = np.empty(shape, np.float32)
    v = np.empty(shape, np.float32)
    check(lib.kvf_recompute_kv(store._h("recompute_kv"), seq, layer, t0, t1,
                               k.ctypes.data, v.ctypes.data))
    return k, v


def attend_x(store, seq, layer, t0, t1, q):
    """kvf_attend_x with lse: (out [n_q_heads, head_dim], lse [n_q_heads])
    over tokens [t0, t1) whose K,V the store recomputes from X."""
    call = "attend_x"
    qf = A.f32(call, "q", q, (store.n_q_heads, store.head_dim))
    out = np.empty((store.n_q_heads, store.head_dim), np.float32)
    lse = np.empty((store.n_q_heads,), np.float32)
    o = _lib.new(_lib.AttnOpts)
    o.lse = lse.ctypes.data
    check(lib.kvf_attend_x(store._h(call), seq, layer, t0, t1, A.pointer(qf),
                           out.ctypes.data, ctypes.byref(o)))
    return out, lse
