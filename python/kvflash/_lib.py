"""The C library, loaded with ctypes: struct mirrors and call signatures.

Every public struct of api/kvflash.h that the binding passes is mirrored
here field by field; at load time each mirror's size is compared with the
library's own (kvf_struct_size), so a binding and a library that disagree
refuse to work instead of corrupting memory.  The library is found, in
order: the environment variable KVFLASH_LIBRARY; the path written into
_config.py by the build (build tree) or by `cmake --install`; then the
system's search path (ctypes.util.find_library).
"""

import ctypes
import ctypes.util
import os

c_size_t = ctypes.c_size_t
c_u32 = ctypes.c_uint32
c_u64 = ctypes.c_uint64
c_i32 = ctypes.c_int32
c_f32 = ctypes.c_float
c_f64 = ctypes.c_double
c_ptr = ctypes.c_void_p
c_char_p = ctypes.c_char_p

# kvf_dtype, kvf_media_kind, kvf_opt_kind, kvf_status
DTYPE_F16, DTYPE_BF16, DTYPE_F32 = 0, 1, 2
MEDIA_FILE, MEDIA_MEMORY, MEDIA_FLASH = 0, 1, 2
OPT_ADAM, OPT_ADAMW, OPT_SGD, OPT_ADAGRAD = 0, 1, 2, 3
POS_ANY = (1 << 64) - 1  # KVF_POS_ANY: append wherever the layer ends
# kvf_evict_policy, kvf_evict_reason
EVICT_POLICIES = {"none": 0, "lru": 1, "lfu": 2, "endurance": 3}
# kvf_codec
CODECS = {"none": 0, "fp8": 1, "int8": 2, "int4": 3}
EVICT_REASONS = {1: "full", 2: "watermark", 3: "call"}


class Model(ctypes.Structure):
    _fields_ = [("n_layers", c_u32), ("n_q_heads", c_u32),
                ("n_kv_heads", c_u32), ("head_dim", c_u32),
                ("dtype", c_i32)]


class Options(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("model", Model),
                ("media", c_i32), ("page_size", c_u32),
                ("n_threads", c_u32), ("kt_pages", c_u32),
                ("segment_size", c_u64), ("capacity_bytes", c_u64),
                ("n_stripes", c_u32), ("queue_depth", c_u32),
                ("device_paths", ctypes.POINTER(c_char_p)),
                ("n_device_paths", c_u32), ("direct_io", c_u32),
                ("read_only", c_u32), ("flash_channels", c_u32),
                ("flash_cell", c_u32), ("flash_spare", c_f32),
                ("trim", c_u32), ("verify_reads", c_u32),
                ("dram_budget", c_u64), ("evict_policy", c_u32),
                ("evict_high", c_f32), ("evict_low", c_f32),
                ("admit_tokens", c_u64), ("profile", c_u32),
                ("prefix_cache_bytes", c_u64),
                ("codec", c_u32)]


class AttnOpts(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("scale", c_f32),
                ("sparse", c_u32), ("top_r", c_u32), ("top_k", c_u32),
                ("lse", c_ptr), ("mask", c_ptr), ("mask_len", c_u64),
                ("window", c_u64), ("h2o", c_u32),
                ("sink_tokens", c_u32), ("recent_tokens", c_u32)]


class H2oEvictOpts(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("keep", c_f64),
                ("keep_tokens", c_u64), ("sinks", c_u32), ("window", c_u32)]


LAYER_ALL = 0xFFFFFFFF
TOKENS_NONE = 0xFFFFFFFF


STATS_FIELDS = [
    ("user_bytes", c_u64), ("host_bytes_written", c_u64),
    ("host_wa", c_f64), ("device_wa", c_f64), ("total_wa", c_f64),
    ("bytes_read", c_u64), ("index_bytes", c_u64), ("data_bytes", c_u64),
    ("padding_bytes", c_u64), ("cleaner_bytes", c_u64), ("kt_bytes", c_u64),
    ("summary_bytes", c_u64), ("metadata_bytes", c_u64),
    ("segments_total", c_u32), ("segments_free", c_u32),
    ("segments_open", c_u32), ("segments_sealed", c_u32),
    ("segments_dying", c_u32), ("segments_corrupt", c_u32),
    ("segments_written", c_u64), ("segments_cleaned", c_u64),
    ("segments_reclaimed", c_u64), ("pages_read", c_u64),
    ("live_pages", c_u64), ("n_sequences", c_u64), ("n_syncs", c_u64),
    ("sparf_pages_read", c_u64), ("sparf_pages_skipped", c_u64),
    ("opt_bytes", c_u64), ("dram_budget", c_u64), ("dram_bytes", c_u64),
    ("dram_peak", c_u64), ("cache_bytes", c_u64),
    ("cache_recent_bytes", c_u64), ("cache_hot_bytes", c_u64),
    ("cache_hits", c_u64), ("cache_misses", c_u64),
    ("cache_evictions", c_u64), ("writeback_bytes", c_u64),
    ("writeback_runs", c_u64), ("attend_calls", c_u64),
    ("attend_bytes_read", c_u64), ("evict_runs", c_u64),
    ("evict_runs_full", c_u64), ("evict_runs_watermark", c_u64),
    ("evicted_seqs", c_u64), ("evicted_bytes", c_u64),
    ("evict_copy_bytes", c_u64), ("live_share", c_f64),
    ("prefix_lookups", c_u64),
    ("prefix_hits", c_u64), ("prefix_tokens_asked", c_u64),
    ("prefix_tokens_reused", c_u64), ("prefix_bytes_saved", c_u64),
    ("prefix_chunks", c_u64), ("dram_only_bytes", c_u64),
    ("prof_append_ns", c_u64), ("prof_lock_ns", c_u64),
    ("prof_copy_ns", c_u64), ("prof_hash_ns", c_u64),
    ("prof_tier_ns", c_u64), ("prof_segment_ns", c_u64),
    ("prof_queue_ns", c_u64), ("prof_sync_ns", c_u64),
    ("prof_writer_ns", c_u64), ("cache_segments", c_u64),
    ("cache_segments_skipped", c_u64), ("prefix_cached", c_u64),
    ("prefix_cached_bytes", c_u64), ("prefix_cache_kept", c_u64),
    ("prefix_cache_dropped", c_u64), ("prefix_cache_hits", c_u64),
    ("prefetch_pages", c_u64)]


class Stats(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t)] + STATS_FIELDS


class StoreInfo(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("format_version", c_u32),
                ("library_version", c_u32), ("model", Model),
                ("page_size", c_u32), ("group_tokens", c_u32),
                ("segment_size", c_u64), ("segs_per_stripe", c_u64),
                ("n_stripes", c_u32), ("data_pages_per_segment", c_u32),
                ("capacity_bytes", c_u64), ("media", c_i32),
                ("kt_pages", c_u32), ("store_id", c_u64),
                ("read_only", c_u32), ("group_pages", c_u32),
                ("group_bytes", c_u32), ("codec", c_u32),
                ("codec_layout", c_u32)]


class SeqInfo(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("id", c_u64), ("family", c_u64),
                ("parent", c_u64), ("tokens", c_u64), ("x_tokens", c_u64),
                ("pages", c_u64), ("shared_pages", c_u64),
                ("prefix_tokens", c_u64), ("prefix_chunks", c_u64),
                ("prefix_shared_chunks", c_u64), ("prefix_hash", c_u64),
                ("cached", c_u32), ("cached_own_chunks", c_u64),
                ("cached_hits", c_u64)]


class OptConfig(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("kind", c_i32), ("lr", c_f32),
                ("beta1", c_f32), ("beta2", c_f32), ("eps", c_f32),
                ("weight_decay", c_f32), ("momentum", c_f32),
                ("dampening", c_f32), ("nesterov", c_u32),
                ("lr_decay", c_f32), ("initial_accumulator_value", c_f32),
                ("out_dtype", c_i32), ("max_grad_norm", c_f32),
                ("grad_scale", c_f32)]


class EvictEvent(ctypes.Structure):
    _fields_ = [("seq", c_u64), ("reason", c_u32), ("policy", c_u32),
                ("bytes", c_u64), ("copy_bytes", c_u64), ("uses", c_u64),
                ("idle", c_u64)]


class Grad(ctypes.Structure):
    _fields_ = [("dtype", c_i32), ("values", c_ptr), ("indices", c_ptr),
                ("n", c_u64)]


class Tensor(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("dtype", c_i32), ("data", c_ptr),
                ("n_tokens", c_u64), ("n_heads", c_u32), ("head_dim", c_u32),
                ("token_stride", c_u64), ("head_stride", c_u64),
                ("data_bytes", c_u64)]


# kvf_struct values and their mirrors
MIRRORS = [(0, Options), (1, AttnOpts), (2, Stats), (3, OptConfig),
           (4, Grad), (5, Tensor), (6, StoreInfo), (7, SeqInfo), (8, Model)]

P = ctypes.POINTER
S = c_i32  # kvf_status
SIGNATURES = {
    "kvf_version_number": (c_u32, []),
    "kvf_version_string": (c_char_p, []),
    "kvf_strerror": (c_char_p, [S]),
    "kvf_last_error": (c_char_p, []),
    "kvf_struct_size": (c_size_t, [c_i32]),
    "kvf_options_init_sized": (None, [P(Options), P(Model), c_size_t]),
    "kvf_attn_opts_init_sized": (None, [P(AttnOpts), c_size_t]),
    "kvf_opt_config_init_sized": (None, [P(OptConfig), c_i32, c_size_t]),
    "kvf_tensor_init_sized": (None, [P(Tensor), c_size_t]),
    "kvf_open": (S, [c_char_p, P(Options), P(c_ptr)]),
    "kvf_close": (S, [c_ptr]),
    "kvf_sync": (S, [c_ptr]),
    "kvf_stats_get": (S, [c_ptr, P(Stats)]),
    "kvf_store_info_get": (S, [c_ptr, P(StoreInfo)]),
    "kvf_seq_create": (S, [c_ptr, c_u64]),
    "kvf_seq_fork": (S, [c_ptr, c_u64, c_u64, c_u64]),
    "kvf_seq_free": (S, [c_ptr, c_u64]),
    "kvf_seq_reset": (S, [c_ptr, c_u64]),
    "kvf_seq_pin": (S, [c_ptr, c_u64]),
    "kvf_seq_unpin": (S, [c_ptr, c_u64]),
    "kvf_evict": (S, [c_ptr, c_u32, c_u64, ctypes.POINTER(c_u64)]),
    "kvf_evict_log": (S, [c_ptr, c_ptr, c_u32, ctypes.POINTER(c_u32),
                          ctypes.POINTER(c_u64)]),
    "kvf_seq_len": (S, [c_ptr, c_u64, c_u32, P(c_u64)]),
    "kvf_seq_x_len": (S, [c_ptr, c_u64, c_u32, P(c_u64)]),
    "kvf_seq_list": (S, [c_ptr, P(c_u64), c_size_t, P(c_size_t)]),
    "kvf_seq_info_get": (S, [c_ptr, c_u64, P(SeqInfo)]),
    "kvf_seq_create_tokens": (S, [c_ptr, c_u64, c_ptr, c_u64, P(c_u64)]),
    "kvf_seq_add_tokens": (S, [c_ptr, c_u64, c_ptr, c_u64]),
    "kvf_prefix_drop": (S, [c_ptr, c_u64, P(c_u64)]),
    "kvf_prefix_list": (S, [c_ptr, P(c_u64), c_size_t, P(c_size_t)]),
    "kvf_seq_export": (S, [c_ptr, c_u64, c_char_p]),
    "kvf_seq_import": (S, [c_ptr, c_char_p, c_u64, P(c_u64)]),
    "kvf_append_tensor": (S, [c_ptr, c_u64, c_u32, P(Tensor), P(Tensor)]),
    "kvf_append_tensor_at": (S, [c_ptr, c_u64, c_u32, c_u64, P(Tensor),
                                 P(Tensor)]),
    "kvf_seq_truncate": (S, [c_ptr, c_u64, c_u64]),
    "kvf_append_x_tensor": (S, [c_ptr, c_u64, c_u32, P(Tensor)]),
    "kvf_read": (S, [c_ptr, c_u64, c_u32, c_u32, c_u64, c_u64, c_ptr, c_ptr]),
    "kvf_read_x": (S, [c_ptr, c_u64, c_u32, c_u64, c_u64, c_ptr]),
    "kvf_prefetch": (S, [c_ptr, c_u64, c_u32]),
    "kvf_read_as": (S, [c_ptr, c_u64, c_u32, c_u32, c_u64, c_u64, c_i32,
                        c_ptr, c_ptr]),
    "kvf_read_x_as": (S, [c_ptr, c_u64, c_u32, c_u64, c_u64, c_i32, c_ptr]),
    "kvf_attend": (S, [c_ptr, c_u64, c_u32, c_ptr, c_ptr, P(AttnOpts)]),
    "kvf_attend_batch": (S, [c_ptr, c_u32, c_ptr, c_u32, c_ptr, c_ptr,
                             P(AttnOpts)]),
    "kvf_attend_multi": (S, [c_ptr, c_u64, c_u32, c_u32, c_ptr, c_ptr, c_ptr,
                             P(AttnOpts)]),
    "kvf_attend_start": (S, [c_ptr, c_u32, c_ptr, c_u32, c_ptr, c_ptr,
                             P(AttnOpts), P(c_ptr)]),
    "kvf_job_wait": (S, [c_ptr]),
    "kvf_attn_merge": (S, [c_u32, c_u32, c_ptr, c_ptr, c_ptr, c_ptr, c_ptr,
                           c_ptr]),
    "kvf_scores": (S, [c_ptr, c_u64, c_u32, c_ptr, P(AttnOpts), c_ptr, c_u64]),
    "kvf_topk": (S, [c_ptr, c_u64, c_u32, c_ptr, P(AttnOpts), c_u32, c_ptr,
                     c_ptr, c_ptr]),
    "kvf_h2o_read": (S, [c_ptr, c_u64, c_u32, c_u32, c_u64, c_u64, c_ptr]),
    "kvf_h2o_evict_opts_init_sized": (None, [P(H2oEvictOpts), c_size_t]),
    "kvf_h2o_evict": (S, [c_ptr, c_u64, c_u32, P(H2oEvictOpts), P(c_u64)]),
    "kvf_opt_create": (S, [c_ptr, c_char_p, c_u64, P(OptConfig), c_ptr,
                           P(c_ptr)]),
    "kvf_opt_open": (S, [c_ptr, c_char_p, P(c_ptr)]),
    "kvf_opt_step": (S, [c_ptr, P(Grad), c_ptr]),
    "kvf_opt_step_config": (S, [c_ptr, P(OptConfig), P(Grad), c_ptr]),
    "kvf_opt_read": (S, [c_ptr, c_u64, c_u64, c_ptr]),
    "kvf_opt_steps": (S, [c_ptr, P(c_u64), P(c_u64)]),
    "kvf_opt_close": (S, [c_ptr]),
    "kvf_opt_free": (S, [c_ptr, c_char_p]),
}


def _candidates():
    env = os.environ.get("KVFLASH_LIBRARY")
    if env:
        yield env
        return
    try:
        from . import _config
        yield _config.LIBRARY
    except ImportError:
        pass
    found = ctypes.util.find_library("kvflash")
    if found:
        yield found


def _load():
    tried = []
    for path in _candidates():
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
    raise ImportError(
        "kvflash: cannot load libkvflash.so; tried: %s. Set KVFLASH_LIBRARY "
        "to its path, or install kvflash with cmake --install"
        % ("; ".join(tried) or "nothing found"))


lib = _load()
for _name, (_res, _args) in SIGNATURES.items():
    _f = getattr(lib, _name)
    _f.restype = _res
    _f.argtypes = _args

for _which, _mirror in MIRRORS:
    _size = lib.kvf_struct_size(_which)
    if _size != ctypes.sizeof(_mirror):
        raise ImportError(
            "kvflash: the binding's %s is %d bytes, the library's is %d: the "
            "Python package and libkvflash.so are from different versions"
            % (_mirror.__name__, ctypes.sizeof(_mirror), _size))


def new(struct, *init_args):
    """A struct mirror filled by the library's _init_sized call, if any."""
    s = struct()
    if struct is Options:
        lib.kvf_options_init_sized(ctypes.byref(s), init_args[0],
                                   ctypes.sizeof(s))
    elif struct is AttnOpts:
        lib.kvf_attn_opts_init_sized(ctypes.byref(s), ctypes.sizeof(s))
    elif struct is OptConfig:
        lib.kvf_opt_config_init_sized(ctypes.byref(s), init_args[0],
                                      ctypes.sizeof(s))
    elif struct is Tensor:
        lib.kvf_tensor_init_sized(ctypes.byref(s), ctypes.sizeof(s))
    else:
        s.struct_size = ctypes.sizeof(s)
    return s
