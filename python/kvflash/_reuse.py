"""Capacity and reuse: the Store methods over prefix reuse
(kvf_seq_create_tokens, kvf_seq_add_tokens), cached prefixes
(kvf_prefix_list, kvf_prefix_drop), eviction (kvf_seq_pin,
kvf_seq_unpin, kvf_evict, kvf_evict_log) and export/import
(kvf_seq_export, kvf_seq_import); a mixin, so store.py stays the store's
core."""

import ctypes
import os

import numpy as np

from . import _lib
from ._check import check, _u64
from ._lib import lib
from .errors import InvalidArgument, EINVAL

SEQ_NONE = (1 << 64) - 1


def _token_ids(tokens, call):
    """tokens (a sequence of ints, a numpy array or a CPU torch tensor) as
    a contiguous uint32 numpy array, checked."""
    if hasattr(tokens, "detach"):  # torch
        tokens = tokens.detach().cpu().numpy()
    a = np.asarray(tokens)
    if a.ndim != 1:
        raise InvalidArgument(EINVAL, "%s: tokens must be 1-D, got shape %s"
                              % (call, a.shape))
    if a.size and a.dtype.kind not in "iu":
        raise InvalidArgument(EINVAL, "%s: tokens must be integers, got %s"
                              % (call, a.dtype))
    if a.size and (int(a.min()) < 0 or int(a.max()) >= 1 << 32):
        raise InvalidArgument(EINVAL, "%s: token ids must be in [0, 2^32)"
                              % call)
    return np.ascontiguousarray(a, dtype=np.uint32)


def _path(p, call):
    if not isinstance(p, (str, bytes, os.PathLike)):
        raise InvalidArgument(EINVAL, "%s: path must be a str or path, got %s"
                              % (call, type(p).__name__))
    return os.fsencode(p)


def _evict_policy(value, call):
    """An eviction policy given by name or number, as kvf_evict_policy."""
    if isinstance(value, str):
        if value not in _lib.EVICT_POLICIES:
            raise InvalidArgument(EINVAL, "%s: evict_policy %r is not one of %s"
                                  % (call, value, sorted(_lib.EVICT_POLICIES)))
        return _lib.EVICT_POLICIES[value]
    return value


class ReuseCalls:
    """Store methods for prefix reuse and for moving sequences."""

    def seq_create_tokens(self, seq, tokens):
        """Create seq for token ids, sharing the longest stored prefix;
        return how many tokens it reused (append K/V from there)."""
        ids = _token_ids(tokens, "seq_create_tokens")
        n = ctypes.c_uint64()
        check(lib.kvf_seq_create_tokens(
            self._h("seq_create_tokens"), _u64(seq, "seq_create_tokens", "seq"),
            ids.ctypes.data_as(ctypes.c_void_p), ids.size, ctypes.byref(n)))
        return n.value

    def seq_add_tokens(self, seq, tokens):
        """Register the next token ids of seq (its whole groups become
        reusable prefix chunks once every layer holds their K/V)."""
        ids = _token_ids(tokens, "seq_add_tokens")
        check(lib.kvf_seq_add_tokens(
            self._h("seq_add_tokens"), _u64(seq, "seq_add_tokens", "seq"),
            ids.ctypes.data_as(ctypes.c_void_p), ids.size))

    def prefix_list(self):
        """The ids of the store's cached prefixes, ascending
        (kvf_prefix_list); seq_info describes each (its "cached" is 1)."""
        st = self._h("prefix_list")
        while True:
            n = ctypes.c_size_t()
            check(lib.kvf_prefix_list(st, None, 0, ctypes.byref(n)))
            cap = n.value
            ids = (ctypes.c_uint64 * max(cap, 1))()
            check(lib.kvf_prefix_list(st, ids, cap, ctypes.byref(n)))
            if n.value <= cap:
                return [ids[i] for i in range(n.value)]

    def prefix_drop(self, seq=None):
        """Drop one cached prefix (its id, from prefix_list) or, with
        seq=None, every one (kvf_prefix_drop); returns how many went."""
        n = ctypes.c_uint64()
        sid = SEQ_NONE if seq is None else _u64(seq, "prefix_drop", "seq")
        check(lib.kvf_prefix_drop(self._h("prefix_drop"), sid,
                                  ctypes.byref(n)))
        return n.value

    def seq_export(self, seq, path):
        """Write seq (K/V, X, token ids) to the file at path."""
        check(lib.kvf_seq_export(self._h("seq_export"),
                                 _u64(seq, "seq_export", "seq"),
                                 _path(path, "seq_export")))

    def seq_import(self, path, seq=None):
        """Make a sequence from an export file; seq=None keeps the id it
        had.  Returns the id."""
        out = ctypes.c_uint64()
        sid = SEQ_NONE if seq is None else _u64(seq, "seq_import", "seq")
        check(lib.kvf_seq_import(self._h("seq_import"),
                                 _path(path, "seq_import"), sid,
                                 ctypes.byref(out)))
        return out.value

    def seq_pin(self, seq):
        """Keep seq out of eviction until seq_unpin (pins count)."""
        check(lib.kvf_seq_pin(self._h("seq_pin"), _u64(seq, "seq_pin", "seq")))

    def seq_unpin(self, seq):
        check(lib.kvf_seq_unpin(self._h("seq_unpin"),
                                _u64(seq, "seq_unpin", "seq")))

    def evict(self, nbytes, policy=None):
        """Evict sequences until nbytes of media are given back (kvf_evict);
        policy "lru" | "lfu" | "endurance", None for the store's.  Returns
        the bytes given back."""
        freed = ctypes.c_uint64()
        check(lib.kvf_evict(self._h("evict"),
                            0 if policy is None else
                            _evict_policy(policy, "evict"),
                            _u64(nbytes, "evict", "nbytes"),
                            ctypes.byref(freed)))
        return freed.value

    def evict_log(self):
        """The sequences evicted since the last call, oldest first, as
        dicts (kvf_evict_log; reason and policy as names)."""
        st = self._h("evict_log")
        out = []
        while True:
            evs = (_lib.EvictEvent * 256)()
            n = ctypes.c_uint32()
            check(lib.kvf_evict_log(st, evs, 256, ctypes.byref(n), None))
            names = {v: k for k, v in _lib.EVICT_POLICIES.items()}
            for e in evs[:n.value]:
                out.append({"seq": e.seq,
                            "reason": _lib.EVICT_REASONS.get(e.reason, e.reason),
                            "policy": names.get(e.policy, e.policy),
                            "bytes": e.bytes, "copy_bytes": e.copy_bytes,
                            "uses": e.uses, "idle": e.idle})
            if n.value < 256:
                return out
