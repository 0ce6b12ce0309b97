"""kvflash.mpi: one kvflash store sharded over the ranks of an MPI
communicator (the library kvflash_mpi, mpi/kvflash_mpi.h; docs/mpi.md),
from Python with mpi4py.

    from mpi4py import MPI
    import kvflash.mpi
    with kvflash.mpi.ShardedStore(MPI.COMM_WORLD, "kv", n_layers=2,
                                  n_q_heads=8, n_kv_heads=4, head_dim=64,
                                  dtype="f16") as st:
        st.seq_create(1)
        st.append(1, 0, k, v)      # the root's k, v; None on the others
        out = st.attend(1, 0, q)   # out on the root; None on the others

Every method but stats(), local_stats() and close() of a closed store is
collective, as in C: every rank of the communicator calls it, in the same
order.  Scalar arguments are the root's (kvflash_mpi's "root" option, 0 by
default); tensors matter only on the root, which passes K, V and q and gets
the outputs; the other ranks pass None (or nothing) and get None.  A
failure raises the same kvflash.Error subclass on every rank, with the
library's message (kvf_mpi_last_error: it names the failing rank).  A bad
argument on the root (a tensor of the wrong shape or dtype, a negative id)
is checked on the root and raised on every rank before anything is called,
so no rank is left waiting in a collective.
"""

import ctypes
import os

import numpy as np
from mpi4py import MPI

from . import _arrays as A
from . import _lib
from . import _lib_mpi
from ._lib import lib
from ._check import set_field
from .errors import (Closed, Error, InvalidArgument, OutOfRange, ECLOSED,
                     EINVAL, ENOMEM, ERANGE, error)

_MEDIA = {"file": _lib.MEDIA_FILE, "memory": _lib.MEDIA_MEMORY,
          "flash": _lib.MEDIA_FLASH}
_OPTION_NAMES = [f for f, _ in _lib.Options._fields_
                 if f not in ("struct_size", "model", "device_paths",
                              "n_device_paths")]


def _comm_type():
    """MPI_Comm as ctypes sees it: Open MPI's is a pointer, MPICH's an
    int."""
    if MPI._sizeof(MPI.Comm) == ctypes.sizeof(ctypes.c_void_p):
        return ctypes.c_void_p
    return ctypes.c_int


_COMM = _comm_type()
mlib = _lib_mpi.load(_COMM)


def check(rc):
    """Raise the kvflash.Error of a failed status (kvf_mpi_last_error)."""
    if rc != 0:
        raise error(rc, mlib.kvf_mpi_last_error().decode("utf-8", "replace"))


def _int(v, call, what, bits):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise InvalidArgument(EINVAL, "%s: %s must be an int, got %s" % (
            call, what, type(v).__name__))
    v = int(v)
    if v < 0 or v >= 1 << bits:
        raise InvalidArgument(EINVAL, "%s: %s %d is not in [0, 2^%d)" % (
            call, what, v, bits))
    return v


def _store_options(options, call):
    """kvf_options for each rank's local store from keyword options (the
    fields of kvf_options; media and evict_policy also by name)."""
    opts = _lib.new(_lib.Options, None)
    for name, value in options.items():
        if name not in _OPTION_NAMES:
            raise InvalidArgument(EINVAL, "%s: unknown option %r (options: "
                                  "%s)" % (call, name,
                                           ", ".join(_OPTION_NAMES)))
        if name == "media" and isinstance(value, str):
            if value not in _MEDIA:
                raise InvalidArgument(EINVAL, "%s: media %r is not one of "
                                      "%s" % (call, value, sorted(_MEDIA)))
            value = _MEDIA[value]
        if name == "evict_policy" and isinstance(value, str):
            if value not in _lib.EVICT_POLICIES:
                raise InvalidArgument(EINVAL, "%s: evict_policy %r is not "
                                      "one of %s" % (
                                          call, value,
                                          sorted(_lib.EVICT_POLICIES)))
            value = _lib.EVICT_POLICIES[value]
        set_field(opts, name, value, call)
    return opts


class ShardedStore:
    """A sharded store over comm (kvf_mpi_open; collective).

    ShardedStore(comm, path, *, n_layers, n_q_heads, n_kv_heads, head_dim,
                 dtype, shard="head", block_tokens=0, root=0, tensor=None,
                 **options)

    comm: an mpi4py communicator (duplicated by the library).  path: this
    rank's directory (its store is path/rank-R).  shard: "head" (KV heads
    split over the ranks) or "token" (token blocks of block_tokens, 0 =
    256, dealt round-robin).  options: the fields of kvf_options for each
    rank's local store, as kvflash.Store takes them.  tensor: "torch" or
    "numpy", the kind read() and attend() give back on the root (default:
    that of dtype).  Every rank passes the same arguments.  A context
    manager: leaving the block closes the store on every rank.  Unlike
    kvflash.Store it is not closed when garbage collected: close is
    collective, and the ranks would collect it at different moments.
    """

    def __init__(self, comm, path, *, n_layers, n_q_heads, n_kv_heads,
                 head_dim, dtype, shard="head", block_tokens=0, root=0,
                 tensor=None, **options):
        call = "ShardedStore"
        self._st = None
        if not isinstance(comm, MPI.Comm):
            raise InvalidArgument(EINVAL, "%s: comm must be an mpi4py "
                                  "communicator, got %s" % (
                                      call, type(comm).__name__))
        if shard not in _lib_mpi.SHARDS:
            raise InvalidArgument(EINVAL, "%s: shard %r is not one of %s" % (
                call, shard, sorted(_lib_mpi.SHARDS)))
        if tensor not in (None, "torch", "numpy"):
            raise InvalidArgument(EINVAL, "%s: tensor %r is not 'torch' or "
                                  "'numpy'" % (call, tensor))
        code, kind = A.parse_dtype(dtype)
        model = _lib.Model(_int(n_layers, call, "n_layers", 32),
                           _int(n_q_heads, call, "n_q_heads", 32),
                           _int(n_kv_heads, call, "n_kv_heads", 32),
                           _int(head_dim, call, "head_dim", 32), code)
        self._store_opts = _store_options(options, call)
        o = _lib_mpi.new(_lib_mpi.MpiOptions, ctypes.byref(model))
        o.shard = _lib_mpi.SHARDS[shard]
        o.block_tokens = _int(block_tokens, call, "block_tokens", 32)
        set_field(o, "root", root, call)
        o.store = ctypes.pointer(self._store_opts)
        handle = ctypes.c_void_p()
        c_comm = _COMM(MPI._handleof(comm))
        check(mlib.kvf_mpi_open(c_comm, os.fsencode(os.fspath(path)),
                                ctypes.byref(o), ctypes.byref(handle)))
        self._st = handle
        # the binding's own agreement (root's checks) on a communicator of
        # its own, so its traffic never mixes with the caller's
        self._comm = comm.Dup()
        self.path = os.fspath(path)
        self.rank = comm.Get_rank()
        self.n_ranks = comm.Get_size()
        self.root = int(root)
        self.shard = shard
        self.n_layers, self.n_q_heads = model.n_layers, model.n_q_heads
        self.n_kv_heads, self.head_dim = model.n_kv_heads, model.head_dim
        self.dtype_code = code
        self.dtype = A.DTYPE_NAMES[code]
        self.kind = tensor or kind or (
            "torch" if A._torch() is not None else "numpy")

    # ---- lifecycle ------------------------------------------------------

    def _h(self, call):
        if self._st is None:
            raise Closed(ECLOSED, "%s: the sharded store is closed" % call)
        return self._st

    @property
    def is_root(self):
        return self.rank == self.root

    def _agree(self, call, prepare):
        """Run prepare() (the root's checks and buffers) on the root and
        tell every rank whether it failed: an Error raised there is raised
        on every rank, before any collective of the library.  Returns
        prepare()'s value on the root, None elsewhere."""
        st = self._h(call)
        got, err, cause = None, None, None
        if self.is_root:
            try:
                got = prepare()
            except Error as e:
                err = (e.status, e.message)
                cause = e
            except Exception as e:  # noqa: BLE001 - every rank must hear
                # a bad argument Python itself refused (a scale that is
                # not a number, an output too large to make): raised
                # here alone, it left the other ranks in the collective
                err = (ENOMEM if isinstance(e, MemoryError) else EINVAL,
                       "%s: %s: %s" % (call, type(e).__name__, e))
                cause = e
        err = self._comm.bcast(err, root=self.root)
        if err is not None:
            raise error(*err) from cause
        return st, got

    def close(self):
        """Close every rank's store (kvf_mpi_close; collective).  A second
        close is a no-op."""
        st, self._st = self._st, None
        if st is not None:
            comm, self._comm = self._comm, None
            try:
                check(mlib.kvf_mpi_close(st))
            finally:
                comm.Free()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    @property
    def closed(self):
        return self._st is None

    def sync(self):
        """kvf_sync on every rank (kvf_mpi_sync)."""
        check(mlib.kvf_mpi_sync(self._h("sync")))

    def stats(self):
        """This rank's kvf_mpi_stats as a dict (local, not collective);
        shard by name."""
        s = _lib_mpi.new(_lib_mpi.MpiStats)
        check(mlib.kvf_mpi_stats_get(self._h("stats"), ctypes.byref(s)))
        out = {f: getattr(s, f) for f, _ in _lib_mpi.MPI_STATS_FIELDS}
        out["shard"] = mlib.kvf_mpi_shard_name(s.shard).decode()
        return out

    def local_stats(self):
        """kvf_stats_get of this rank's local store (kvf_mpi_local; local,
        not collective)."""
        s = _lib.new(_lib.Stats)
        local = mlib.kvf_mpi_local(self._h("local_stats"))
        rc = lib.kvf_stats_get(local, ctypes.byref(s))
        if rc != 0:
            raise error(rc, lib.kvf_last_error().decode("utf-8", "replace"))
        return {f: getattr(s, f) for f, _ in _lib.STATS_FIELDS}

    # ---- sequences --------------------------------------------------------

    def seq_create(self, seq):
        st, seq = self._agree("seq_create",
                              lambda: _int(seq, "seq_create", "seq", 64))
        check(mlib.kvf_mpi_seq_create(st, seq or 0))

    def seq_free(self, seq):
        st, seq = self._agree("seq_free",
                              lambda: _int(seq, "seq_free", "seq", 64))
        check(mlib.kvf_mpi_seq_free(st, seq or 0))

    def seq_len(self, seq, layer=0):
        """Tokens of one layer of a sequence; every rank gets it."""
        st, args = self._agree("seq_len", lambda: (
            _int(seq, "seq_len", "seq", 64),
            _int(layer, "seq_len", "layer", 32)))
        seq, layer = args or (0, 0)
        n = ctypes.c_uint64()
        check(mlib.kvf_mpi_seq_len(st, seq, layer, ctypes.byref(n)))
        return n.value

    # ---- K/V --------------------------------------------------------------

    def _kv(self, call, what, x):
        """x as a contiguous [n_tokens, n_kv_heads, head_dim] buffer in the
        store's dtype (the root's K or V)."""
        if x is None or A.kind_of(x) is None:
            raise InvalidArgument(EINVAL, "%s: the root's %s must be a torch "
                                  "tensor or a numpy array, got %s" % (
                                      call, what, type(x).__name__))
        if A.dtype_code(x) != self.dtype_code:
            raise InvalidArgument(EINVAL, "%s: %s has dtype %s, the store "
                                  "holds %s (convert it first)" % (
                                      call, what, A.dtype_str(x),
                                      self.dtype))
        shape = tuple(x.shape)
        if len(shape) != 3 or shape[1:] != (self.n_kv_heads, self.head_dim):
            raise InvalidArgument(EINVAL, "%s: %s must have shape [n_tokens, "
                                  "%d, %d], got %s" % (
                                      call, what, self.n_kv_heads,
                                      self.head_dim, shape))
        if A.is_torch(x):
            return x.detach().cpu().contiguous()
        return np.ascontiguousarray(x)

    def append(self, seq, layer, k=None, v=None):
        """Append the root's k and v ([n_tokens, n_kv_heads, head_dim], the
        store's dtype) to one layer of a sequence: each rank keeps its
        share (kvf_mpi_append)."""
        call = "append"

        def prepare():
            kx, vx = self._kv(call, "k", k), self._kv(call, "v", v)
            if kx.shape[0] != vx.shape[0]:
                raise InvalidArgument(EINVAL, "%s: k has %d tokens, v has %d"
                                      % (call, kx.shape[0], vx.shape[0]))
            return (_int(seq, call, "seq", 64), _int(layer, call, "layer", 32),
                    _int(kx.shape[0], call, "n_tokens", 32), kx, vx)

        st, args = self._agree(call, prepare)
        if args is None:
            check(mlib.kvf_mpi_append(st, 0, 0, 0, None, None))
            return
        seq, layer, n, kx, vx = args
        check(mlib.kvf_mpi_append(st, seq, layer, n, A.pointer(kx),
                                  A.pointer(vx)))
        del kx, vx

    def read(self, seq, layer, kv_head, t0=0, t1=None):
        """Tokens [t0, t1) (t1 None: to the end) of one KV head, gathered
        on the root: (k, v) there, each [t1 - t0, head_dim] in the store's
        dtype; None on the other ranks."""
        call = "read"
        # every rank asks (the root's t1 is the one that counts, and an
        # end past the length is refused before the output is made)
        end = self.seq_len(seq, layer)

        def prepare():
            a = (_int(seq, call, "seq", 64), _int(layer, call, "layer", 32),
                 _int(kv_head, call, "kv_head", 32), _int(t0, call, "t0", 64),
                 end if t1 is None else _int(t1, call, "t1", 64))
            if a[4] > end:
                raise OutOfRange(ERANGE, "%s: tokens [%d, %d) past the end "
                                 "of sequence %d (layer %d has %d tokens)" %
                                 (call, a[3], a[4], a[0], a[1], end))
            n = max(a[4] - a[3], 0)
            return a + (A.empty(self.kind, (n, self.head_dim),
                                self.dtype_code),
                        A.empty(self.kind, (n, self.head_dim),
                                self.dtype_code))

        st, args = self._agree(call, prepare)
        if args is None:
            check(mlib.kvf_mpi_read(st, 0, 0, 0, 0, 0, None, None))
            return None
        seq, layer, kv_head, t0, t1, k, v = args
        check(mlib.kvf_mpi_read(st, seq, layer, kv_head, t0, t1,
                                A.pointer(k), A.pointer(v)))
        return k, v

    # ---- attention ------------------------------------------------------

    def attend(self, seq, layer, q=None, *, lse=False, sparse=0, scale=None,
               window=0, top_r=0, top_k=0, h2o=False, sink_tokens=0,
               recent_tokens=0):
        """Decode attention of one layer, computed on each rank next to its
        data (kvf_mpi_attend).  q: the root's [n_q_heads, head_dim] (any
        float dtype; computed in float32).  Returns, on the root, out
        ([n_q_heads, head_dim] float32) or (out, lse) with lse=True; None
        on the other ranks.  sparse, top_r, top_k, sink_tokens,
        recent_tokens and h2o are for head sharding only (as in C)."""
        call = "attend"

        def prepare():
            kind = A.kind_of(q) or self.kind
            qf = A.f32(call, "q", q, (self.n_q_heads, self.head_dim))
            out = A.empty_like_kind(kind, (self.n_q_heads, self.head_dim),
                                    np.float32)
            lse_buf = A.empty_like_kind(kind, (self.n_q_heads,),
                                        np.float32) if lse else None
            o = _lib.new(_lib.AttnOpts)
            if scale is not None:
                o.scale = float(scale)
            o.sparse = _int(sparse, call, "sparse", 32)
            o.top_r = _int(top_r, call, "top_r", 32)
            o.top_k = _int(top_k, call, "top_k", 32)
            o.window = _int(window, call, "window", 64)
            o.h2o = 1 if h2o else 0
            o.sink_tokens = _int(sink_tokens, call, "sink_tokens", 32)
            o.recent_tokens = _int(recent_tokens, call, "recent_tokens", 32)
            if lse_buf is not None:
                o.lse = A.pointer(lse_buf)
            return (_int(seq, call, "seq", 64), _int(layer, call, "layer", 32),
                    qf, out, lse_buf, o)

        st, args = self._agree(call, prepare)
        if args is None:
            check(mlib.kvf_mpi_attend(st, 0, 0, None, None, None))
            return None
        seq, layer, qf, out, lse_buf, o = args
        check(mlib.kvf_mpi_attend(st, seq, layer, A.pointer(qf),
                                  A.pointer(out), ctypes.byref(o)))
        del qf
        return (out, lse_buf) if lse else out


__all__ = ["ShardedStore", "check"]
