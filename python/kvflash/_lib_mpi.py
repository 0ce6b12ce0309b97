"""libkvflash_mpi, loaded with ctypes as _lib.py loads libkvflash: the
struct mirrors of mpi/kvflash_mpi.h and the call signatures.

MPI must be initialized first (importing mpi4py's MPI does it), and the
library must be built against the MPI that mpi4py uses.  The library is
found, in order: the environment variable KVFLASH_MPI_LIBRARY; the path
the build (or `cmake --install`) wrote into _config.py as MPI_LIBRARY;
then the system's search path (ctypes.util.find_library).
"""

import ctypes
import ctypes.util
import os

from . import _lib
from ._lib import c_size_t, c_u32, c_u64, c_i32, c_ptr, c_char_p

SHARD_HEAD, SHARD_TOKEN = 0, 1
SHARDS = {"head": SHARD_HEAD, "token": SHARD_TOKEN}


class MpiOptions(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("model", _lib.Model),
                ("shard", c_i32), ("block_tokens", c_u32), ("root", c_i32),
                ("store", ctypes.POINTER(_lib.Options))]


MPI_STATS_FIELDS = [
    ("rank", c_i32), ("n_ranks", c_i32), ("shard", c_i32),
    ("kv_head0", c_u32), ("n_kv_heads", c_u32),
    ("attend_calls", c_u64), ("append_calls", c_u64),
    ("q_bytes_sent", c_u64), ("q_bytes_recv", c_u64),
    ("out_bytes_sent", c_u64), ("out_bytes_recv", c_u64),
    ("kv_bytes_sent", c_u64), ("kv_bytes_recv", c_u64),
    ("ctl_bytes_sent", c_u64), ("ctl_bytes_recv", c_u64),
    ("repaired_seqs", c_u64)]


class MpiStats(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t)] + MPI_STATS_FIELDS


P = ctypes.POINTER
S = c_i32  # kvf_status


def signatures(comm_type):
    """The calls' signatures; comm_type is the C type of MPI_Comm (a
    pointer in Open MPI, an int in MPICH)."""
    return {
        "kvf_mpi_options_init_sized": (None, [P(MpiOptions), P(_lib.Model),
                                              c_size_t]),
        "kvf_mpi_open": (S, [comm_type, c_char_p, P(MpiOptions), P(c_ptr)]),
        "kvf_mpi_close": (S, [c_ptr]),
        "kvf_mpi_sync": (S, [c_ptr]),
        "kvf_mpi_seq_create": (S, [c_ptr, c_u64]),
        "kvf_mpi_seq_free": (S, [c_ptr, c_u64]),
        "kvf_mpi_seq_len": (S, [c_ptr, c_u64, c_u32, P(c_u64)]),
        "kvf_mpi_append": (S, [c_ptr, c_u64, c_u32, c_u32, c_ptr, c_ptr]),
        "kvf_mpi_read": (S, [c_ptr, c_u64, c_u32, c_u32, c_u64, c_u64, c_ptr,
                             c_ptr]),
        "kvf_mpi_attend": (S, [c_ptr, c_u64, c_u32, c_ptr, c_ptr,
                               P(_lib.AttnOpts)]),
        "kvf_mpi_stats_get": (S, [c_ptr, P(MpiStats)]),
        "kvf_mpi_local": (c_ptr, [c_ptr]),
        "kvf_mpi_last_error": (c_char_p, []),
        "kvf_mpi_shard_name": (c_char_p, [c_i32]),
    }


def _candidates():
    env = os.environ.get("KVFLASH_MPI_LIBRARY")
    if env:
        yield env
        return
    try:
        from . import _config
        if getattr(_config, "MPI_LIBRARY", ""):
            yield _config.MPI_LIBRARY
    except ImportError:
        pass
    found = ctypes.util.find_library("kvflash_mpi")
    if found:
        yield found


def load(comm_type):
    """The library with its signatures set (once per process)."""
    global _loaded
    if _loaded is not None:
        return _loaded
    tried = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            break
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
    else:
        raise ImportError(
            "kvflash.mpi: cannot load libkvflash_mpi.so; tried: %s. Set "
            "KVFLASH_MPI_LIBRARY to its path, or build kvflash with MPI "
            "(Debian: libopenmpi-dev openmpi-bin)"
            % ("; ".join(tried) or "nothing found"))
    for name, (res, args) in signatures(comm_type).items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args
    _loaded = lib
    return lib


_loaded = None


def new(struct, *init_args):
    """A struct mirror filled by the library's _init_sized call, if any."""
    s = struct()
    if struct is MpiOptions:
        _loaded.kvf_mpi_options_init_sized(ctypes.byref(s), init_args[0],
                                           ctypes.sizeof(s))
    else:
        s.struct_size = ctypes.sizeof(s)
    return s
