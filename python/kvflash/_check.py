"""The helpers every Store method uses: check (a failed kvf_status as
the kvflash.Error of its code, with kvf_last_error), _u64 (an integer
argument checked before it reaches the library) and set_field (a C struct
field set from a caller's value, checked against the field's C type).
Below store.py and the mixins it inherits, so neither imports the other
for them."""

import ctypes
import numbers

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


def _int_range(ctype):
    bits = 8 * ctypes.sizeof(ctype)
    if ctype._type_ in "bhilq":
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


def set_field(obj, name, value, call):
    """obj.name = value, refused with InvalidArgument, naming the field,
    where ctypes would wrap an integer to the field's width (2**32 + 3 into
    a uint32_t became 3), truncate a float or raise a plain TypeError."""
    ctype = dict(obj._fields_)[name]
    code = getattr(ctype, "_type_", None)
    if isinstance(code, str) and code in "bBhHiIlLqQ":
        if not isinstance(value, (numbers.Integral, np.integer)):
            raise InvalidArgument(EINVAL, "%s: %s must be an int, got %s" % (
                call, name, type(value).__name__))
        lo, hi = _int_range(ctype)
        if not lo <= int(value) <= hi:
            raise InvalidArgument(EINVAL, "%s: %s %d is not in [%d, %d]" % (
                call, name, int(value), lo, hi))
        value = int(value)
    elif isinstance(code, str) and code in "fd":
        if isinstance(value, bool) or not isinstance(
                value, (numbers.Real, np.floating, np.integer)):
            raise InvalidArgument(EINVAL, "%s: %s must be a number, got %s" % (
                call, name, type(value).__name__))
        try:
            value = float(value)
        except OverflowError:
            raise InvalidArgument(EINVAL, "%s: %s %r is past a double" % (
                call, name, value)) from None
    try:
        setattr(obj, name, value)
    except (TypeError, ValueError):
        raise InvalidArgument(EINVAL, "%s: %s=%r has the wrong type" % (
            call, name, value)) from None
