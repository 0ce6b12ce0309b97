"""The two helpers every Store method uses: check (a failed kvf_status as
the kvflash.Error of its code, with kvf_last_error) and _u64 (an integer
argument checked before it reaches the library).  Below store.py and the
mixins it inherits, so neither imports the other for them."""

import numpy as np

from ._lib import lib
from .errors import InvalidArgument, EINVAL, error


def check(rc):
    """Raise the kvflash.Error of a failed status (with kvf_last_error)."""
    if rc != 0:
        msg = lib.kvf_last_error().decode("utf-8", "replace")
        raise error(rc, msg)


def _u64(v, call, what):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise InvalidArgument(EINVAL, "%s: %s must be an int, got %s" % (
            call, what, type(v).__name__))
    v = int(v)
    if v < 0 or v >= 1 << 64:
        raise InvalidArgument(EINVAL, "%s: %s %d is not in [0, 2^64)" % (
            call, what, v))
    return v
