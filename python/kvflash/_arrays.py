"""Tensors and arrays as the C calls see them: pointer, dtype, strides.

The binding accepts torch tensors and numpy arrays and gives back the same
kind.  A CPU tensor or array whose rows (the last dimension) are
contiguous is passed as it lies, strides and all (no copy); anything else
(a GPU tensor, a transposed last dimension, negative numpy strides) is
copied once into a contiguous CPU buffer first.

dtypes: f16 is torch.float16 / numpy.float16, f32 torch.float32 /
numpy.float32, bf16 is torch.bfloat16; numpy has no bfloat16, so with
numpy a bf16 store takes and gives numpy.uint16 arrays holding the raw
bfloat16 bits.
"""

import sys

import numpy as np

from . import _lib
from .errors import InvalidArgument, EINVAL

DTYPE_NAMES = {_lib.DTYPE_F16: "f16", _lib.DTYPE_BF16: "bf16",
               _lib.DTYPE_F32: "f32"}
ELT_BYTES = {_lib.DTYPE_F16: 2, _lib.DTYPE_BF16: 2, _lib.DTYPE_F32: 4}


def _torch():
    return sys.modules.get("torch")


def is_torch(x):
    t = _torch()
    return t is not None and isinstance(x, t.Tensor)


def kind_of(x):
    """'torch' or 'numpy' for a tensor or array; None for anything else."""
    if is_torch(x):
        return "torch"
    if isinstance(x, np.ndarray):
        return "numpy"
    return None


def parse_dtype(dtype):
    """A kvf_dtype code and the array kind implied, from a torch dtype, a
    numpy dtype or one of "f16", "bf16", "f32"."""
    t = _torch()
    if t is not None and isinstance(dtype, t.dtype):
        codes = {t.float16: _lib.DTYPE_F16, t.bfloat16: _lib.DTYPE_BF16,
                 t.float32: _lib.DTYPE_F32}
        if dtype in codes:
            return codes[dtype], "torch"
        raise InvalidArgument(EINVAL, "Store: dtype %s is not float16, "
                              "bfloat16 or float32" % dtype)
    if isinstance(dtype, str):
        names = {"f16": _lib.DTYPE_F16, "float16": _lib.DTYPE_F16,
                 "bf16": _lib.DTYPE_BF16, "bfloat16": _lib.DTYPE_BF16,
                 "f32": _lib.DTYPE_F32, "float32": _lib.DTYPE_F32}
        if dtype in names:
            return names[dtype], "numpy"
        raise InvalidArgument(EINVAL, "Store: dtype %r is not one of "
                              "'f16', 'bf16', 'f32'" % dtype)
    try:
        nd = np.dtype(dtype)
    except TypeError:
        raise InvalidArgument(EINVAL, "Store: dtype %r is not a torch or "
                              "numpy dtype or a name" % (dtype,)) from None
    if nd == np.float16:
        return _lib.DTYPE_F16, "numpy"
    if nd == np.float32:
        return _lib.DTYPE_F32, "numpy"
    raise InvalidArgument(EINVAL, "Store: numpy dtype %s is not float16 or "
                          "float32 (bfloat16: use 'bf16')" % nd)


def dtype_code(x):
    """The kvf_dtype of a tensor or array, or None."""
    if is_torch(x):
        t = _torch()
        return {t.float16: _lib.DTYPE_F16, t.bfloat16: _lib.DTYPE_BF16,
                t.float32: _lib.DTYPE_F32}.get(x.dtype)
    if x.dtype == np.float16:
        return _lib.DTYPE_F16
    if x.dtype == np.float32:
        return _lib.DTYPE_F32
    if x.dtype == np.uint16:
        return _lib.DTYPE_BF16
    return None


def dtype_str(x):
    return str(x.dtype)


def _broadcast(strides, shape):
    """Whether a dimension of more than one entry has stride 0 (a
    broadcast view: expand, broadcast_to), which the library would read
    as dense rows past the end of the data."""
    return any(s == 0 and n > 1 for s, n in zip(strides, shape))


def host(x):
    """x as a CPU tensor/array whose last dimension is contiguous, whose
    strides are non-negative and none of them 0 over more than one entry
    (a broadcast is copied out); x itself when it already is."""
    if is_torch(x):
        if x.device.type != "cpu":
            x = x.cpu()
        if (x.dim() and x.stride(-1) != 1 and x.shape[-1] > 1) or \
                _broadcast(x.stride(), x.shape):
            x = x.contiguous()
        return x
    if (x.ndim and x.strides[-1] != x.itemsize and x.shape[-1] > 1) or \
            any(s < 0 for s in x.strides) or _broadcast(x.strides, x.shape):
        x = np.ascontiguousarray(x)
    return x


# what an empty torch tensor hands the library: its data_ptr() is 0, which
# the C calls refuse as a NULL output even for zero elements (an empty
# numpy array has an address); nothing is read or written through it
_NO_ELEMENTS = np.zeros(8, dtype=np.float64)


def pointer(x):
    if is_torch(x):
        if x.numel() == 0:
            return _NO_ELEMENTS.ctypes.data
        return x.data_ptr()
    return x.ctypes.data


def byte_strides(x):
    if is_torch(x):
        return tuple(s * x.element_size() for s in x.stride())
    return tuple(x.strides)


def empty(kind, shape, code):
    """A new contiguous tensor/array of kvf_dtype code."""
    if kind == "torch":
        t = _torch()
        dt = {_lib.DTYPE_F16: t.float16, _lib.DTYPE_BF16: t.bfloat16,
              _lib.DTYPE_F32: t.float32}[code]
        return t.empty(tuple(shape), dtype=dt)
    dt = {_lib.DTYPE_F16: np.float16, _lib.DTYPE_BF16: np.uint16,
          _lib.DTYPE_F32: np.float32}[code]
    return np.empty(tuple(shape), dtype=dt)


def empty_like_kind(kind, shape, np_dtype):
    """A new contiguous tensor/array of a plain numpy dtype (float32,
    int64, uint32...)."""
    if kind == "torch":
        t = _torch()
        dt = {np.float32: t.float32, np.int64: t.int64,
              np.uint8: t.uint8, np.int32: t.int32}[np_dtype]
        return t.empty(tuple(shape), dtype=dt)
    return np.empty(tuple(shape), dtype=np_dtype)


def f32(call, what, x, shape):
    """x as a contiguous float32 CPU tensor/array of exactly shape (a
    float16/bfloat16 input is widened, which is exact; a float64 input is
    rounded); the InvalidArgument message names what and the shapes."""
    kind = kind_of(x)
    if kind is None:
        raise InvalidArgument(EINVAL, "%s: %s must be a torch tensor or a "
                              "numpy array, got %s" % (call, what,
                                                      type(x).__name__))
    if tuple(x.shape) != tuple(shape):
        raise InvalidArgument(EINVAL, "%s: %s must have shape %s, got %s" % (
            call, what, tuple(shape), tuple(x.shape)))
    if kind == "torch":
        t = _torch()
        if not x.is_floating_point():
            raise InvalidArgument(EINVAL, "%s: %s has dtype %s, not a "
                                  "floating type" % (call, what, x.dtype))
        if x.device.type != "cpu":
            x = x.cpu()
        if x.dtype != t.float32:
            x = x.to(t.float32)
        return x.contiguous()
    if x.dtype.kind != "f":
        raise InvalidArgument(EINVAL, "%s: %s has dtype %s, not a floating "
                              "type" % (call, what, x.dtype))
    return np.ascontiguousarray(x, dtype=np.float32)


def as_uint64(call, what, x, n):
    """A contiguous numpy uint64 array of n ids or positions from a list,
    tuple, numpy array or torch tensor."""
    if is_torch(x):
        x = x.detach().cpu().numpy()
    a = np.asarray(x)
    if a.size == 0 and a.dtype.kind == "f":
        a = a.astype(np.uint64)  # [] is float64 to numpy: no id is wrong
    if a.ndim != 1 or a.shape[0] != n:
        raise InvalidArgument(EINVAL, "%s: %s must hold %d entries, got "
                              "shape %s" % (call, what, n, a.shape))
    if a.dtype.kind not in "iu":
        raise InvalidArgument(EINVAL, "%s: %s must be integers, got %s" % (
            call, what, a.dtype))
    if a.dtype.kind == "i" and (a < 0).any():
        raise InvalidArgument(EINVAL, "%s: %s holds a negative value %d" % (
            call, what, int(a.min())))
    return np.ascontiguousarray(a, dtype=np.uint64)
