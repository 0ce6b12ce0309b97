"""kvflash.Store: a store opened from Python, its sequences, K/V, attention
and optimizer state.  Methods are named like the C calls without the kvf_
prefix; tensors come back as the caller's kind (torch or numpy).  One class
of thin methods, one per C call, is a little over the house's 700 lines:
kept whole so that it reads beside api/kvflash.h."""

import ctypes
import os

import numpy as np

from . import _arrays as A
from . import _lib
from ._check import check, set_field, _u64
from ._reuse import ReuseCalls, _evict_policy
from ._lib import lib
from .errors import (Closed, InvalidArgument, OutOfRange, ECLOSED, EINVAL,
                     ENOENT, ERANGE)

_MEDIA = {"file": _lib.MEDIA_FILE, "memory": _lib.MEDIA_MEMORY,
          "flash": _lib.MEDIA_FLASH}
_OPT_KINDS = {"adam": _lib.OPT_ADAM, "adamw": _lib.OPT_ADAMW,
              "sgd": _lib.OPT_SGD, "adagrad": _lib.OPT_ADAGRAD}
_OPTION_NAMES = [f for f, _ in _lib.Options._fields_
                 if f not in ("struct_size", "model", "device_paths",
                              "n_device_paths")] + ["device_paths"]


# tokens a read may ask for before its range is checked here, against the
# sequence's length, rather than by the C call (after the output is made)
_RANGE_CHECKED_BY_C = 1 << 16


def _name(call, name):
    """An optimizer state's name as the C call takes it."""
    if not isinstance(name, str):
        raise InvalidArgument(EINVAL, "%s: name must be a str, got %s" % (
            call, type(name).__name__))
    return name.encode()


def _u32(v, call, what):
    v = _u64(v, call, what)
    if v >= 1 << 32:
        raise InvalidArgument(EINVAL, "%s: %s %d is not in [0, 2^32)" % (
            call, what, v))
    return v


def _codec(value, call):
    """A codec given by name ("none", "fp8", "int8", "int4") or number."""
    if isinstance(value, str):
        if value not in _lib.CODECS:
            raise InvalidArgument(EINVAL, "%s: codec %r is not one of %s" % (
                call, value, ", ".join(_lib.CODECS)))
        return _lib.CODECS[value]
    return _u32(value, call, "codec")


class Store(ReuseCalls):
    """A kvflash store in directory `path`, created for a model shape or
    reopened (give no shape to take the stored one).

    Store(path, *, n_layers, n_q_heads, n_kv_heads, head_dim, dtype,
          **options)

    dtype: torch.float16/bfloat16/float32, numpy.float16/float32, or
    "f16"/"bf16"/"f32"; required with a shape (no dtype is assumed).
    Appends take any of the three and convert to it.  options: the fields of kvf_options (media =
    "file" | "memory" | "flash", page_size, n_threads, kt_pages,
    segment_size, capacity_bytes, n_stripes, queue_depth, device_paths,
    direct_io, read_only, flash_channels, flash_cell, flash_spare, trim,
    verify_reads, dram_budget, evict_policy = "none" | "lru" | "lfu" |
    "endurance", evict_high, evict_low, admit_tokens, profile, codec =
    "none" | "fp8" | "int8" | "int4": compressed KV, chosen at creation,
    docs/compression.md), with the C defaults; and tensor = "torch" | "numpy",
    the kind that read() and read_x() give back (default: that of dtype).
    A context manager: leaving the block closes the store (kvf_close
    syncs first).
    """

    def __init__(self, path, *, n_layers=0, n_q_heads=0, n_kv_heads=0,
                 head_dim=0, dtype=None, tensor=None, **options):
        self._st = None
        if dtype is None and (n_layers or n_q_heads or n_kv_heads or
                              head_dim):
            raise InvalidArgument(EINVAL, "Store: a model shape needs its "
                                  "dtype (torch.float16, torch.bfloat16, "
                                  "torch.float32 or 'f16', 'bf16', 'f32'); "
                                  "none is assumed.  To reopen a store as "
                                  "stored, give no shape")
        model = _lib.Model()
        for name, value in (("n_layers", n_layers), ("n_q_heads", n_q_heads),
                            ("n_kv_heads", n_kv_heads),
                            ("head_dim", head_dim)):
            set_field(model, name, value, "Store")
        kind = None
        if dtype is not None:
            model.dtype, kind = A.parse_dtype(dtype)
        opts = _lib.new(_lib.Options, ctypes.byref(model))
        self._keep = []
        for name, value in options.items():
            if name not in _OPTION_NAMES:
                raise InvalidArgument(EINVAL, "Store: unknown option %r "
                                      "(options: %s)" % (
                                          name, ", ".join(_OPTION_NAMES)))
            if name == "media" and isinstance(value, str):
                if value not in _MEDIA:
                    raise InvalidArgument(EINVAL, "Store: media %r is not one "
                                          "of %s" % (value, sorted(_MEDIA)))
                value = _MEDIA[value]
            if name == "evict_policy":
                value = _evict_policy(value, "Store")
            if name == "codec":
                value = _codec(value, "Store")
            if name == "device_paths":
                if isinstance(value, (str, bytes, os.PathLike)) or \
                        not isinstance(value, (list, tuple)):
                    raise InvalidArgument(EINVAL, "Store: device_paths must "
                                          "be a list of paths, one a stripe, "
                                          "got %s" % type(value).__name__)
                arr = (ctypes.c_char_p * len(value))(
                    *[os.fsencode(p) for p in value])
                self._keep.append(arr)
                opts.device_paths = ctypes.cast(
                    arr, ctypes.POINTER(ctypes.c_char_p))
                opts.n_device_paths = len(value)
                continue
            set_field(opts, name, value, "Store")
        if tensor not in (None, "torch", "numpy"):
            raise InvalidArgument(EINVAL, "Store: tensor %r is not 'torch' or "
                                  "'numpy'" % (tensor,))
        handle = ctypes.c_void_p()
        if not isinstance(path, (str, bytes, os.PathLike)):
            raise InvalidArgument(EINVAL, "Store: path must be a str or "
                                  "path, got %s" % type(path).__name__)
        bpath = os.fsencode(os.fspath(path))
        if dtype is None and not (n_layers or n_q_heads or n_kv_heads or
                                  head_dim):
            if not options:
                opts_p = None  # reopen: everything as stored
            else:
                self._as_stored(bpath, opts, options)
                opts_p = ctypes.byref(opts)
        else:
            opts_p = ctypes.byref(opts)
        check(lib.kvf_open(bpath, opts_p, ctypes.byref(handle)))
        self._st = handle
        self.path = os.fspath(path)
        info = self.info()
        m = info["model"]
        self.n_layers = m["n_layers"]
        self.n_q_heads = m["n_q_heads"]
        self.n_kv_heads = m["n_kv_heads"]
        self.head_dim = m["head_dim"]
        self.dtype_code = m["dtype"]
        self.dtype = A.DTYPE_NAMES[self.dtype_code]
        self.group_tokens = info["group_tokens"]
        self.group_pages = info["group_pages"]
        self.codec = {v: k for k, v in _lib.CODECS.items()}.get(
            info["codec"], str(info["codec"]))
        self.kind = tensor or kind or (
            "torch" if A._torch() is not None else "numpy")
        self._row = self.head_dim * A.ELT_BYTES[self.dtype_code]

    @staticmethod
    def _as_stored(bpath, opts, given):
        """Reopen with options but no shape: the fields that shape the
        store, unless given, are taken from the store itself (a read-only
        peek), since kvf_open checks them against the stored ones."""
        peek = _lib.new(_lib.Options, None)
        peek.read_only = 1
        h = ctypes.c_void_p()
        rc = lib.kvf_open(bpath, ctypes.byref(peek), ctypes.byref(h))
        if rc == ENOENT:
            # options without a shape open only a store: "holds no store"
            # is the answer (kvf_open would name a missing shape instead)
            check(rc)
        if rc != 0:
            return  # busy, or the peek lacks the caller's options
            # (device_paths): kvf_open with them says what is wrong
        info = _lib.new(_lib.StoreInfo)
        rc = lib.kvf_store_info_get(h, ctypes.byref(info))
        lib.kvf_close(h)
        check(rc)
        for f in ("page_size", "segment_size", "capacity_bytes", "n_stripes",
                  "kt_pages", "media", "codec"):
            if f not in given:
                setattr(opts, f, getattr(info, f))

    # ---- lifecycle ------------------------------------------------------

    def _h(self, call):
        if self._st is None:
            raise Closed(ECLOSED, "%s: the store is closed" % call)
        return self._st

    def close(self):
        """Sync and release the store (kvf_close); a second close is a
        no-op."""
        st, self._st = self._st, None
        if st is not None:
            check(lib.kvf_close(st))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        if getattr(self, "_st", None) is not None:
            try:
                self.close()
            except Exception:
                pass

    @property
    def closed(self):
        return self._st is None

    def sync(self):
        """Make everything appended so far durable (kvf_sync)."""
        check(lib.kvf_sync(self._h("sync")))

    def stats(self):
        """kvf_stats_get as a dict."""
        s = _lib.new(_lib.Stats)
        check(lib.kvf_stats_get(self._h("stats"), ctypes.byref(s)))
        return {f: getattr(s, f) for f, _ in _lib.STATS_FIELDS}

    def info(self):
        """kvf_store_info_get as a dict (model as a nested dict)."""
        s = _lib.new(_lib.StoreInfo)
        check(lib.kvf_store_info_get(self._h("info"), ctypes.byref(s)))
        out = {f: getattr(s, f) for f, _ in _lib.StoreInfo._fields_
               if f not in ("struct_size", "model")}
        out["model"] = {f: getattr(s.model, f) for f, _ in
                        _lib.Model._fields_}
        return out

    # ---- sequences --------------------------------------------------------

    def seq_create(self, seq):
        check(lib.kvf_seq_create(self._h("seq_create"),
                                 _u64(seq, "seq_create", "seq")))

    def seq_fork(self, parent, child, n_tokens):
        check(lib.kvf_seq_fork(self._h("seq_fork"),
                               _u64(parent, "seq_fork", "parent"),
                               _u64(child, "seq_fork", "child"),
                               _u64(n_tokens, "seq_fork", "n_tokens")))

    def seq_free(self, seq):
        check(lib.kvf_seq_free(self._h("seq_free"),
                               _u64(seq, "seq_free", "seq")))

    def seq_reset(self, seq):
        """Start sequence seq empty whatever the store holds under its id
        (a sequence a crashed run left is freed first: kvf_seq_reset)."""
        check(lib.kvf_seq_reset(self._h("seq_reset"),
                                _u64(seq, "seq_reset", "seq")))

    def truncate(self, seq, n):
        """Keep the first n tokens of every layer of a sequence (K, V, X,
        token ids) and drop the rest (kvf_seq_truncate)."""
        check(lib.kvf_seq_truncate(self._h("truncate"),
                                   _u64(seq, "truncate", "seq"),
                                   _u64(n, "truncate", "n")))

    def seq_len(self, seq, layer=0):
        n = ctypes.c_uint64()
        check(lib.kvf_seq_len(self._h("seq_len"), _u64(seq, "seq_len", "seq"),
                              _u32(layer, "seq_len", "layer"),
                              ctypes.byref(n)))
        return n.value

    def seq_x_len(self, seq, layer=0):
        n = ctypes.c_uint64()
        check(lib.kvf_seq_x_len(self._h("seq_x_len"),
                                _u64(seq, "seq_x_len", "seq"),
                                _u32(layer, "seq_x_len", "layer"),
                                ctypes.byref(n)))
        return n.value

    def seq_list(self):
        st = self._h("seq_list")
        while True:
            n = ctypes.c_size_t()
            check(lib.kvf_seq_list(st, None, 0, ctypes.byref(n)))
            cap = n.value
            ids = (ctypes.c_uint64 * max(cap, 1))()
            check(lib.kvf_seq_list(st, ids, cap, ctypes.byref(n)))
            if n.value <= cap:
                return [ids[i] for i in range(n.value)]

    def seq_info(self, seq):
        s = _lib.new(_lib.SeqInfo)
        check(lib.kvf_seq_info_get(self._h("seq_info"),
                                   _u64(seq, "seq_info", "seq"),
                                   ctypes.byref(s)))
        return {f: getattr(s, f) for f, _ in _lib.SeqInfo._fields_
                if f != "struct_size"}

    # ---- K/V and X --------------------------------------------------------

    def _view(self, call, what, x, heads):
        """A checked kvf_tensor of x ([n, heads, head_dim] rows of f16,
        bf16 or f32: the library converts them to the store's dtype) and
        the object that keeps its memory alive."""
        if A.kind_of(x) is None:
            raise InvalidArgument(EINVAL, "%s: %s must be a torch tensor or a "
                                  "numpy array, got %s" % (
                                      call, what, type(x).__name__))
        code = A.dtype_code(x)
        if code is None:   # f16, bf16 and f32 convert (kvf_append_tensor)
            raise InvalidArgument(EINVAL, "%s: %s has dtype %s, not float16, "
                                  "bfloat16 or float32" % (
                                      call, what, A.dtype_str(x)))
        shape = tuple(x.shape)
        if len(shape) == 2 and heads > 0 and \
                shape[1] == heads * self.head_dim and what == "x":
            x = x.reshape(shape[0], heads, self.head_dim)
            shape = tuple(x.shape)
        if len(shape) != 3 or shape[1] != heads or shape[2] != self.head_dim:
            raise InvalidArgument(EINVAL, "%s: %s must have shape [n_tokens, "
                                  "%d, %d], got %s" % (call, what, heads,
                                                       self.head_dim, shape))
        x = A.host(x)
        strides = A.byte_strides(x)
        t = _lib.new(_lib.Tensor)
        t.dtype = code
        t.data = A.pointer(x) if shape[0] else None
        t.n_tokens = shape[0]
        t.n_heads = heads
        t.head_dim = self.head_dim
        # a dimension of one has no meaningful stride: take the dense one
        t.token_stride = strides[0] if shape[0] > 1 else 0
        t.head_stride = strides[1] if heads > 1 else 0
        return t, x

    def append(self, seq, layer, k, v, pos=None):
        """Append k and v ([n_tokens, n_kv_heads, head_dim], float16,
        bfloat16 or float32, converted to the store's dtype with rounding to
        nearest even; any strides) to one layer of a sequence.  pos: None, or the
        position of the first new token, which must be the layer's length
        (else kvflash.OutOfRange naming both: kvf_append_tensor_at)."""
        call = "append"
        st = self._h(call)
        at = _lib.POS_ANY if pos is None else _u64(pos, call, "pos")
        if pos is not None and at == _lib.POS_ANY:
            # the library reads 2^64 - 1 as "wherever the layer ends"; as
            # a stated position no layer holds it
            n = self.seq_len(seq, layer)
            raise OutOfRange(ERANGE, "%s: layer %d of sequence %d holds %d "
                             "tokens, not the position %d the append expects"
                             % (call, layer, seq, n, at))
        tk, kx = self._view(call, "k", k, self.n_kv_heads)
        tv, vx = self._view(call, "v", v, self.n_kv_heads)
        if tk.n_tokens != tv.n_tokens:
            raise InvalidArgument(EINVAL, "%s: k has %d tokens, v has %d" % (
                call, tk.n_tokens, tv.n_tokens))
        check(lib.kvf_append_tensor_at(st, _u64(seq, call, "seq"),
                                       _u32(layer, call, "layer"), at,
                                       ctypes.byref(tk), ctypes.byref(tv)))
        del kx, vx

    def append_x(self, seq, layer, x):
        """Append X rows ([n_tokens, n_q_heads, head_dim] or [n_tokens,
        n_q_heads * head_dim]) to one layer of a sequence."""
        call = "append_x"
        st = self._h(call)
        tx, xx = self._view(call, "x", x, self.n_q_heads)
        check(lib.kvf_append_x_tensor(st, _u64(seq, call, "seq"),
                                      _u32(layer, call, "layer"),
                                      ctypes.byref(tx)))
        del xx

    def _range(self, call, seq, layer, t0, t1, x=False):
        t0 = _u64(t0, call, "t0")
        if t1 is not None:
            t1 = _u64(t1, call, "t1")
            # a range the C call checks anyway, unless its output would
            # be large: a t1 far past the end asked numpy or torch for
            # terabytes before the library could refuse it
            if t1 <= t0 or t1 - t0 <= _RANGE_CHECKED_BY_C:
                return t0, t1
        end = (self.seq_x_len if x else self.seq_len)(seq, layer)
        if t1 is None:
            return t0, end
        if t1 > end:
            raise OutOfRange(ERANGE, "%s: tokens [%d, %d) past the end of "
                             "sequence %d (layer %d has %d %stokens)" % (
                                 call, t0, t1, seq, layer, end,
                                 "X " if x else ""))
        return t0, t1

    def _out_dtype(self, dtype):
        """The kvf_dtype code a typed read returns: the store's for None."""
        return self.dtype_code if dtype is None else A.parse_dtype(dtype)[0]

    def read(self, seq, layer, kv_head, t0=0, t1=None, *, dtype=None):
        """Tokens [t0, t1) (t1 None: to the end) of one KV head: (k, v),
        each [t1 - t0, head_dim] in the store's dtype, or in dtype
        (float16, bfloat16, float32; converted as append converts:
        kvf_read_as)."""
        call = "read"
        st = self._h(call)
        t0, t1 = self._range(call, seq, layer, t0, t1)
        n = max(t1 - t0, 0)
        code = self._out_dtype(dtype)
        k = A.empty(self.kind, (n, self.head_dim), code)
        v = A.empty(self.kind, (n, self.head_dim), code)
        check(lib.kvf_read_as(st, _u64(seq, call, "seq"),
                              _u32(layer, call, "layer"),
                              _u32(kv_head, call, "kv_head"), t0, t1, code,
                              A.pointer(k), A.pointer(v)))
        return k, v

    def read_x(self, seq, layer, t0=0, t1=None, *, dtype=None):
        """X tokens [t0, t1) of one layer: [t1 - t0, n_q_heads * head_dim],
        in the store's dtype or in dtype (kvf_read_x_as)."""
        call = "read_x"
        st = self._h(call)
        t0, t1 = self._range(call, seq, layer, t0, t1, x=True)
        n = max(t1 - t0, 0)
        code = self._out_dtype(dtype)
        x = A.empty(self.kind, (n, self.n_q_heads * self.head_dim), code)
        check(lib.kvf_read_x_as(st, _u64(seq, call, "seq"),
                                _u32(layer, call, "layer"), t0, t1, code,
                                A.pointer(x)))
        return x

    def prefetch(self, seq, layer):
        """A hint: read one layer's K and V pages into the memory tier's
        free room in the background (kvf_prefetch); returns at once."""
        call = "prefetch"
        check(lib.kvf_prefetch(self._h(call), _u64(seq, call, "seq"),
                               _u32(layer, call, "layer")))

    # ---- attention ------------------------------------------------------

    def _attn_opts(self, call, lse_buf=None, sparse=0, scale=None, window=0,
                   mask=None, top_r=0, top_k=0, h2o=False, sink_tokens=0,
                   recent_tokens=0):
        o = _lib.new(_lib.AttnOpts)
        keep = []
        o.sink_tokens = _u32(sink_tokens, call, "sink_tokens")
        o.recent_tokens = _u32(recent_tokens, call, "recent_tokens")
        if scale is not None:
            o.scale = float(scale)
        o.sparse = _u32(sparse, call, "sparse")
        o.top_r = _u32(top_r, call, "top_r")
        o.top_k = _u32(top_k, call, "top_k")
        o.window = _u64(window, call, "window")
        o.h2o = 1 if h2o else 0
        if lse_buf is not None:
            o.lse = A.pointer(lse_buf)
        if mask is not None:
            if A.is_torch(mask):
                mask = mask.detach().cpu().numpy()
            m = np.ascontiguousarray(np.asarray(mask) != 0, dtype=np.uint8)
            if m.ndim != 1:
                raise InvalidArgument(EINVAL, "%s: mask must be 1-D (one "
                                      "entry per token), got shape %s" % (
                                          call, m.shape))
            keep.append(m)
            o.mask = m.ctypes.data if m.size else None
            o.mask_len = m.size
        return o, keep

    def _q(self, call, q, lead):
        shape = tuple(lead) + (self.n_q_heads, self.head_dim)
        return A.f32(call, "q", q, shape)

    def attend(self, seq, layer, q, *, lse=False, sparse=0, scale=None,
               window=0, mask=None, top_r=0, top_k=0, h2o=False,
               sink_tokens=0, recent_tokens=0):
        """Decode attention of one layer (kvf_attend).  q: [n_q_heads,
        head_dim] (any float dtype; computed in float32).  Returns out
        ([n_q_heads, head_dim] float32) or (out, lse) with lse=True."""
        call = "attend"
        st = self._h(call)
        kind = A.kind_of(q)
        qf = self._q(call, q, ())
        out = A.empty_like_kind(kind, (self.n_q_heads, self.head_dim),
                                np.float32)
        lse_buf = A.empty_like_kind(kind, (self.n_q_heads,), np.float32) \
            if lse else None
        o, keep = self._attn_opts(call, lse_buf, sparse, scale, window, mask,
                                  top_r, top_k, h2o, sink_tokens,
                                  recent_tokens)
        check(lib.kvf_attend(st, _u64(seq, call, "seq"),
                             _u32(layer, call, "layer"), A.pointer(qf),
                             A.pointer(out), ctypes.byref(o)))
        del keep
        return (out, lse_buf) if lse else out

    def _seqs(self, call, seqs):
        if not hasattr(seqs, "shape"):
            try:
                seqs = list(seqs)
            except TypeError:
                raise InvalidArgument(EINVAL, "%s: seqs must be a list of "
                                      "sequence ids, got %s" % (
                                          call, type(seqs).__name__)) from None
        return A.as_uint64(call, "seqs", seqs, len(seqs))

    def attend_batch(self, seqs, layer, q, *, lse=False, sparse=0,
                     scale=None, window=0, mask=None, top_r=0, top_k=0,
                     h2o=False):
        """kvf_attend_batch: q [len(seqs), n_q_heads, head_dim]; returns
        out of the same shape (and lse [len(seqs), n_q_heads])."""
        call = "attend_batch"
        st = self._h(call)
        ids = self._seqs(call, seqs)
        kind = A.kind_of(q)
        qf = self._q(call, q, (len(ids),))
        out = A.empty_like_kind(kind, tuple(qf.shape), np.float32)
        lse_buf = A.empty_like_kind(kind, (len(ids), self.n_q_heads),
                                    np.float32) if lse else None
        o, keep = self._attn_opts(call, lse_buf, sparse, scale, window, mask,
                                  top_r, top_k, h2o)
        check(lib.kvf_attend_batch(st, len(ids), ids.ctypes.data,
                                   _u32(layer, call, "layer"),
                                   A.pointer(qf), A.pointer(out),
                                   ctypes.byref(o)))
        del keep
        return (out, lse_buf) if lse else out

    def attend_multi(self, seq, layer, q, positions=None, *, lse=False,
                     scale=None, window=0, mask=None):
        """Attention of n query positions at once (kvf_attend_multi):
        q [n, n_q_heads, head_dim]; positions None (every query attends
        every token) or n token positions (query i attends tokens t <=
        positions[i]: causal).  Returns out [n, n_q_heads, head_dim] (and
        lse [n, n_q_heads])."""
        call = "attend_multi"
        st = self._h(call)
        if A.kind_of(q) is None or len(q.shape) != 3:
            raise InvalidArgument(EINVAL, "%s: q must be a tensor of shape "
                                  "[n, %d, %d], got %r" % (
                                      call, self.n_q_heads, self.head_dim,
                                      getattr(q, "shape", type(q).__name__)))
        n = int(q.shape[0])
        kind = A.kind_of(q)
        qf = self._q(call, q, (n,))
        pos = None
        if positions is not None:
            pos = A.as_uint64(call, "positions", positions, n)
        out = A.empty_like_kind(kind, (n, self.n_q_heads, self.head_dim),
                                np.float32)
        lse_buf = A.empty_like_kind(kind, (n, self.n_q_heads), np.float32) \
            if lse else None
        o, keep = self._attn_opts(call, lse_buf, 0, scale, window, mask)
        check(lib.kvf_attend_multi(st, _u64(seq, call, "seq"),
                                   _u32(layer, call, "layer"),
                                   _u32(n, call, "n_q"),
                                   pos.ctypes.data if pos is not None
                                   else None,
                                   A.pointer(qf), A.pointer(out),
                                   ctypes.byref(o)))
        del keep
        return (out, lse_buf) if lse else out

    def attend_start(self, seqs, layer, q, *, lse=False, sparse=0,
                     scale=None, window=0, mask=None, top_r=0, top_k=0):
        """kvf_attend_batch in the background (kvf_attend_start): returns a
        Job at once; Job.wait() gives what attend_batch would return."""
        call = "attend_start"
        st = self._h(call)
        ids = self._seqs(call, seqs)
        kind = A.kind_of(q)
        qf = self._q(call, q, (len(ids),))
        out = A.empty_like_kind(kind, tuple(qf.shape), np.float32)
        lse_buf = A.empty_like_kind(kind, (len(ids), self.n_q_heads),
                                    np.float32) if lse else None
        o, keep = self._attn_opts(call, lse_buf, sparse, scale, window, mask,
                                  top_r, top_k)
        handle = ctypes.c_void_p()
        check(lib.kvf_attend_start(st, len(ids), ids.ctypes.data,
                                   _u32(layer, call, "layer"),
                                   A.pointer(qf), A.pointer(out),
                                   ctypes.byref(o), ctypes.byref(handle)))
        return Job(self, handle, out, lse_buf, keep)

    def scores(self, seq, layer, q, *, window=0, mask=None, scale=None):
        """Softmax probabilities of the tokens attended (kvf_scores):
        [n_q_heads, tokens attended] float32."""
        call = "scores"
        st = self._h(call)
        kind = A.kind_of(q)
        qf = self._q(call, q, ())
        n = self.seq_len(seq, layer)
        if window and window < n:
            n = window
        probs = A.empty_like_kind(kind, (self.n_q_heads, n), np.float32)
        o, keep = self._attn_opts(call, None, 0, scale, window, mask)
        check(lib.kvf_scores(st, _u64(seq, call, "seq"),
                             _u32(layer, call, "layer"), A.pointer(qf),
                             ctypes.byref(o), A.pointer(probs), n))
        del keep
        return probs

    def topk(self, seq, layer, q, k, *, window=0, mask=None, scale=None):
        """The k tokens of most attention mass per KV head (kvf_topk):
        (tokens [n_kv_heads, k] int64, mass [n_kv_heads, k] float32, n
        [n_kv_heads] int64 selected per head; entries past n are -1 / 0)."""
        call = "topk"
        st = self._h(call)
        kind = A.kind_of(q)
        qf = self._q(call, q, ())
        k = _u32(k, call, "k")
        H = self.n_kv_heads
        tokens = np.zeros((H, max(k, 1)), dtype=np.uint64)
        mass = np.zeros((H, max(k, 1)), dtype=np.float32)
        n_out = np.zeros((H,), dtype=np.uint32)
        o, keep = self._attn_opts(call, None, 0, scale, window, mask)
        check(lib.kvf_topk(st, _u64(seq, call, "seq"),
                           _u32(layer, call, "layer"), A.pointer(qf),
                           ctypes.byref(o), k, tokens.ctypes.data,
                           mass.ctypes.data, n_out.ctypes.data))
        tok = tokens.astype(np.int64)
        for h in range(H):
            tok[h, n_out[h]:] = -1
        res = (tok, mass, n_out.astype(np.int64))
        if kind == "torch":
            t = A._torch()
            res = tuple(t.from_numpy(r) for r in res)
        return res

    def h2o_read(self, seq, layer, kv_head, t0=0, t1=None):
        """H2O scores of tokens [t0, t1) of one KV head (kvf_h2o_read)."""
        call = "h2o_read"
        st = self._h(call)
        t0, t1 = self._range(call, seq, layer, t0, t1)
        out = A.empty_like_kind(self.kind, (max(t1 - t0, 0),), np.float32)
        check(lib.kvf_h2o_read(st, _u64(seq, call, "seq"),
                               _u32(layer, call, "layer"),
                               _u32(kv_head, call, "kv_head"), t0, t1,
                               A.pointer(out)))
        return out

    def h2o_evict(self, seq, layer=None, keep=0.5, keep_tokens=0, sinks=None,
                  window=None):
        """Each KV head of a layer (None: every layer) drops the token
        groups its H2O scores valued least, keeping `keep` of the tokens
        (or keep_tokens), the first `sinks` and the last `window` tokens
        (None: the defaults, 0: none) (kvf_h2o_evict).  Returns the tokens
        dropped, summed over the heads.  Dropped tokens are masked for
        attention from then on; read() of one raises NotFound."""
        call = "h2o_evict"
        st = self._h(call)
        o = _lib.new(_lib.H2oEvictOpts)
        lib.kvf_h2o_evict_opts_init_sized(ctypes.byref(o), ctypes.sizeof(o))
        o.keep = float(keep)
        o.keep_tokens = _u64(keep_tokens, call, "keep_tokens")
        if sinks is not None:
            o.sinks = (_lib.TOKENS_NONE if sinks == 0
                       else _u32(sinks, call, "sinks"))
        if window is not None:
            o.window = (_lib.TOKENS_NONE if window == 0
                        else _u32(window, call, "window"))
        n = ctypes.c_uint64(0)
        check(lib.kvf_h2o_evict(st, _u64(seq, call, "seq"),
                                _lib.LAYER_ALL if layer is None
                                else _u32(layer, call, "layer"),
                                ctypes.byref(o), ctypes.byref(n)))
        return n.value

    # ---- optimizer state ------------------------------------------------

    def opt_create(self, name, n_params, kind="adam", *, init=None,
                   out_dtype="f32", **hyper):
        """Keep an optimizer's state for n_params fp32 parameters in the
        store (kvf_opt_create).  kind: "adam", "adamw", "sgd", "adagrad";
        hyper: the kvf_opt_config fields (lr, beta1, beta2, eps,
        weight_decay, momentum, dampening, nesterov, lr_decay,
        initial_accumulator_value, max_grad_norm, grad_scale), torch's
        defaults otherwise.  init: n_params initial values (zeros if
        None)."""
        call = "opt_create"
        st = self._h(call)
        if kind not in _OPT_KINDS:
            raise InvalidArgument(EINVAL, "%s: kind %r is not one of %s" % (
                call, kind, sorted(_OPT_KINDS)))
        cfg = _lib.new(_lib.OptConfig, _OPT_KINDS[kind])
        cfg.out_dtype, _ = A.parse_dtype(out_dtype)
        fields = [f for f, _ in _lib.OptConfig._fields_
                  if f not in ("struct_size", "kind", "out_dtype")]
        for key, val in hyper.items():
            if key not in fields:
                raise InvalidArgument(EINVAL, "%s: unknown hyper-parameter %r "
                                      "(known: %s)" % (call, key,
                                                       ", ".join(fields)))
            set_field(cfg, key, val, call)
        n_params = _u64(n_params, call, "n_params")
        keep = None
        if init is not None:
            keep = A.f32(call, "init", init, (n_params,))
        handle = ctypes.c_void_p()
        check(lib.kvf_opt_create(st, _name(call, name), n_params,
                                 ctypes.byref(cfg),
                                 A.pointer(keep) if keep is not None
                                 else None, ctypes.byref(handle)))
        opt = Optimizer(self, name, handle, cfg.out_dtype)
        opt.kind = kind
        return opt

    def opt_open(self, name):
        """The optimizer state called name (kvf_opt_open).  Set the
        handle's kind (and out_dtype) to step it with hyper-parameters."""
        handle = ctypes.c_void_p()
        check(lib.kvf_opt_open(self._h("opt_open"), _name("opt_open", name),
                               ctypes.byref(handle)))
        return Optimizer(self, name, handle, None)

    def opt_free(self, name):
        """Delete the optimizer state called name (kvf_opt_free)."""
        check(lib.kvf_opt_free(self._h("opt_free"), _name("opt_free", name)))

    def __repr__(self):
        state = "closed" if self._st is None else "open"
        return ("<kvflash.Store %s %s: %d layers, %d/%d heads, head_dim %d, "
                "%s>" % (self.path, state, self.n_layers, self.n_q_heads,
                         self.n_kv_heads, self.head_dim, self.dtype))


class Job:
    """An attention running in the background (Store.attend_start)."""

    def __init__(self, store, handle, out, lse, keep):
        self._store = store  # keeps the store open until the wait
        self._h = handle
        self._out = out
        self._lse = lse
        self._keep = keep

    def wait(self):
        """Wait for the result: out, or (out, lse) when started with
        lse=True.  Raises the call's kvflash.Error if it failed."""
        if self._h is None:
            raise InvalidArgument(EINVAL, "Job.wait: the job was waited for "
                                  "already")
        h, self._h = self._h, None
        check(lib.kvf_job_wait(h))
        self._keep = None
        return (self._out, self._lse) if self._lse is not None else self._out

    def __del__(self):
        if getattr(self, "_h", None) is not None:
            try:
                lib.kvf_job_wait(self._h)
            except Exception:
                pass


class Optimizer:
    """Optimizer state of one tensor kept in a store (kvf_opt)."""

    def __init__(self, store, name, handle, out_dtype):
        self._store = store
        self.name = name
        self._h = handle
        self.out_dtype = out_dtype
        self.kind = None  # "adam"...: known when created, set after open
        steps, n = ctypes.c_uint64(), ctypes.c_uint64()
        check(lib.kvf_opt_steps(handle, ctypes.byref(steps), ctypes.byref(n)))
        self.n_params = n.value

    def _handle(self, call):
        if self._h is None:
            raise Closed(ECLOSED, "%s: the optimizer handle is closed" % call)
        return self._h

    @property
    def steps(self):
        steps, n = ctypes.c_uint64(), ctypes.c_uint64()
        check(lib.kvf_opt_steps(self._handle("steps"), ctypes.byref(steps),
                                ctypes.byref(n)))
        return steps.value

    def _step_config(self, call, hyper):
        """This step's kvf_opt_config: the kind's defaults and hyper (the
        fields opt_create takes)."""
        if self.kind not in _OPT_KINDS or self.out_dtype is None:
            raise InvalidArgument(EINVAL, "%s: hyper-parameters need the "
                                  "handle's kind and out_dtype (set them "
                                  "after opt_open)" % call)
        cfg = _lib.new(_lib.OptConfig, _OPT_KINDS[self.kind])
        cfg.out_dtype = self.out_dtype
        fields = [f for f, _ in _lib.OptConfig._fields_
                  if f not in ("struct_size", "kind", "out_dtype")]
        for key, val in hyper.items():
            if key not in fields:
                raise InvalidArgument(EINVAL, "%s: unknown hyper-parameter %r "
                                      "(known: %s)" % (call, key,
                                                       ", ".join(fields)))
            set_field(cfg, key, val, call)
        return cfg

    def step(self, grad, params_out=None, indices=None, **hyper):
        """One step with grad (n_params values, dense; or, with indices, the
        values at those ascending indices: Top-K).  params_out: None, or a
        contiguous CPU tensor/array of n_params elements in the out_dtype,
        written in place (zero copy).  hyper: this step's hyper-parameters
        (lr, beta1, beta2, eps, weight_decay, momentum, dampening,
        nesterov, lr_decay, max_grad_norm, grad_scale; the rest take the
        kind's defaults: kvf_opt_step_config); none: the stored ones."""
        call = "Optimizer.step"
        h = self._handle(call)
        cfg = self._step_config(call, hyper) if hyper else None
        g = _lib.Grad()
        gx = A.host(grad)
        code = A.dtype_code(gx) if A.kind_of(gx) else None
        if code is None:
            raise InvalidArgument(EINVAL, "%s: grad must be a float16, "
                                  "bfloat16 or float32 tensor/array" % call)
        if len(gx.shape) != 1:
            gx = gx.reshape(-1)
        if A.is_torch(gx):
            gx = gx.contiguous()
        else:
            gx = np.ascontiguousarray(gx)
        g.dtype = code
        g.values = A.pointer(gx)
        g.n = int(gx.shape[0])
        idx = None
        if indices is not None:
            idx = np.ascontiguousarray(
                A.as_uint64(call, "indices", indices, g.n), dtype=np.uint32)
            g.indices = idx.ctypes.data
        out_ptr = None
        if params_out is not None:
            if A.kind_of(params_out) is None or (
                    A.is_torch(params_out) and
                    (params_out.device.type != "cpu" or
                     not params_out.is_contiguous())) or (
                    not A.is_torch(params_out) and
                    not params_out.flags["C_CONTIGUOUS"]):
                raise InvalidArgument(EINVAL, "%s: params_out must be a "
                                      "contiguous CPU tensor or array" % call)
            n = params_out.numel() if A.is_torch(params_out) \
                else params_out.size
            if n != self.n_params:
                raise InvalidArgument(EINVAL, "%s: params_out has %d "
                                      "elements, the optimizer %d" % (
                                          call, n, self.n_params))
            if self.out_dtype is not None and \
                    A.dtype_code(params_out) != self.out_dtype:
                raise InvalidArgument(EINVAL, "%s: params_out has dtype %s, "
                                      "the optimizer writes %s" % (
                                          call, A.dtype_str(params_out),
                                          A.DTYPE_NAMES[self.out_dtype]))
            out_ptr = A.pointer(params_out)
        if cfg is None:
            check(lib.kvf_opt_step(h, ctypes.byref(g), out_ptr))
        else:
            check(lib.kvf_opt_step_config(h, ctypes.byref(cfg),
                                          ctypes.byref(g), out_ptr))
        del gx, idx

    def read(self, i0=0, n=None, kind=None):
        """The current parameters [i0, i0 + n) as float32."""
        call = "Optimizer.read"
        h = self._handle(call)
        i0 = _u64(i0, call, "i0")
        if i0 > self.n_params:
            raise OutOfRange(ERANGE, "%s: i0 %d is past the %d parameters" % (
                call, i0, self.n_params))
        n = self.n_params - i0 if n is None else _u64(n, call, "n")
        if n > self.n_params - i0:
            raise OutOfRange(ERANGE, "%s: [%d, %d) is past the %d parameters"
                             % (call, i0, i0 + n, self.n_params))
        out = A.empty_like_kind(kind or self._store.kind, (n,), np.float32)
        check(lib.kvf_opt_read(h, i0, n, A.pointer(out)))
        return out

    def close(self):
        h, self._h = self._h, None
        if h is not None:
            check(lib.kvf_opt_close(h))

    def __del__(self):
        if getattr(self, "_h", None) is not None:
            try:
                self.close()
            except Exception:
                pass


def attn_merge(out_a, lse_a, out_b, lse_b):
    """Combine two partial attention results over disjoint token sets
    (kvf_attn_merge): out_* [n_heads, head_dim], lse_* [n_heads] (any
    leading shape, matching); returns (out, lse) float32 of the caller's
    kind."""
    call = "attn_merge"
    shape = tuple(out_a.shape)
    if len(shape) < 1:
        raise InvalidArgument(EINVAL, "%s: out_a must have a head_dim axis"
                              % call)
    heads = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
    oa = A.f32(call, "out_a", out_a, shape)
    ob = A.f32(call, "out_b", out_b, shape)
    la = A.f32(call, "lse_a", lse_a, shape[:-1])
    lb = A.f32(call, "lse_b", lse_b, shape[:-1])
    kind = A.kind_of(out_a)
    out = A.empty_like_kind(kind, shape, np.float32)
    lse = A.empty_like_kind(kind, shape[:-1], np.float32)
    check(lib.kvf_attn_merge(heads, shape[-1], A.pointer(oa), A.pointer(la),
                             A.pointer(ob), A.pointer(lb), A.pointer(out),
                             A.pointer(lse)))
    return out, lse


def version():
    """The library's version string (kvf_version_string)."""
    return lib.kvf_version_string().decode()

