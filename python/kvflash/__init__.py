"""kvflash: a flash-aware KV-cache store for LLM inference, from Python.

    import torch, kvflash
    with kvflash.Store("kv", n_layers=2, n_q_heads=8, n_kv_heads=2,
                       head_dim=64, dtype=torch.float16) as st:
        st.seq_create(0)
        st.append(0, 0, k, v)            # [n_tokens, n_kv_heads, head_dim]
        out = st.attend(0, 0, q)         # [n_q_heads, head_dim] float32

A thin ctypes binding over libkvflash.so (no compiled extension): the
methods of Store are the C calls without the kvf_ prefix; every failure
raises a kvflash.Error subclass carrying the status and the C message.
kvflash.torch holds torch.optim optimizers whose state lives in a store.
"""

from .errors import (Error, InvalidArgument, OutOfRange, NotFound, Exists,
                     Mismatch, VersionError, Closed, NotSupported,
                     OutOfMemory, NoSpace, Busy, IOFailure, Corrupt, Fatal,
                     status_name)
from .store import Store, Job, Optimizer, attn_merge, version

__version__ = version()
__all__ = ["Store", "Job", "Optimizer", "Error", "InvalidArgument",
           "OutOfRange", "NotFound", "Exists", "Mismatch", "VersionError",
           "Closed", "NotSupported", "OutOfMemory", "NoSpace", "Busy",
           "IOFailure", "Corrupt", "Fatal", "status_name", "attn_merge",
           "version"]
