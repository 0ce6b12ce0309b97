"""kvflash.Error and its subclasses, one per kvf_status code.

Every failed call raises the subclass of its status; `status` is the
numeric kvf_status and `message` the library's message (kvf_last_error),
which names the call, the bad value and the limit.  Checks the binding
makes itself before calling the library (shapes, dtypes) raise the same
classes with messages of the same form.
"""

OK = 0
EINVAL, ERANGE, ENOENT, EEXIST, EMISMATCH, EVERSION, ECLOSED, ENOTSUP = \
    10, 11, 12, 13, 14, 15, 16, 17
ENOMEM, ENOSPC, EBUSY = 30, 31, 32
EIO, ECORRUPT = 40, 41
EFATAL = 50


class Error(Exception):
    """A kvflash call failed: `status` (kvf_status) and `message`."""

    status = None

    def __init__(self, status, message):
        super().__init__("%s (%s)" % (message, _NAMES.get(status, status)))
        self.status = status
        self.message = message


class InvalidArgument(Error, ValueError):
    """KVF_EINVAL: malformed argument (dtype, shape, NULL); fix it."""


class OutOfRange(Error, IndexError):
    """KVF_ERANGE: a number past its limit (layer, token, position)."""


class NotFound(Error, KeyError):
    """KVF_ENOENT: the sequence or optimizer does not exist."""

    def __str__(self):  # KeyError would quote the message
        return Exception.__str__(self)


class Exists(Error):
    """KVF_EEXIST: the object to create exists already."""


class Mismatch(Error):
    """KVF_EMISMATCH: options contradict the stored configuration."""


class VersionError(Error):
    """KVF_EVERSION: struct or format newer than this library."""


class Closed(Error):
    """KVF_ECLOSED: the handle was closed."""


class NotSupported(Error):
    """KVF_ENOTSUP: valid, but not supported here."""


class OutOfMemory(Error, MemoryError):
    """KVF_ENOMEM: memory allocation failed."""


class NoSpace(Error):
    """KVF_ENOSPC: the store is full; free sequences and retry."""


class Busy(Error):
    """KVF_EBUSY: held by another handle or process."""


class IOFailure(Error, OSError):
    """KVF_EIO: the operating system reported an I/O error."""

    def __str__(self):
        return Exception.__str__(self)


class Corrupt(Error):
    """KVF_ECORRUPT: stored data failed verification; not returned."""


class Fatal(Error):
    """KVF_EFATAL: the handle stopped; close and reopen."""


_CLASSES = {EINVAL: InvalidArgument, ERANGE: OutOfRange, ENOENT: NotFound,
            EEXIST: Exists, EMISMATCH: Mismatch, EVERSION: VersionError,
            ECLOSED: Closed, ENOTSUP: NotSupported, ENOMEM: OutOfMemory,
            ENOSPC: NoSpace, EBUSY: Busy, EIO: IOFailure,
            ECORRUPT: Corrupt, EFATAL: Fatal}
_NAMES = {OK: "KVF_OK", EINVAL: "KVF_EINVAL", ERANGE: "KVF_ERANGE",
          ENOENT: "KVF_ENOENT", EEXIST: "KVF_EEXIST",
          EMISMATCH: "KVF_EMISMATCH", EVERSION: "KVF_EVERSION",
          ECLOSED: "KVF_ECLOSED", ENOTSUP: "KVF_ENOTSUP",
          ENOMEM: "KVF_ENOMEM", ENOSPC: "KVF_ENOSPC", EBUSY: "KVF_EBUSY",
          EIO: "KVF_EIO", ECORRUPT: "KVF_ECORRUPT", EFATAL: "KVF_EFATAL"}


def error(status, message):
    """The Error subclass instance for a status."""
    return _CLASSES.get(status, Error)(status, message)


def status_name(status):
    return _NAMES.get(status, "status %d" % status)
