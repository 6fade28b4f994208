"""The package's own exceptions, and opening files from outside the one way
every reader does (tensor/file.c's lt__open_regular, in Python).

Every reader of the package raises a LibtensorError subclass for a file it
refuses (CheckpointError, SafetensorsError, TokenizerError), never TypeError,
KeyError, RecursionError or an error from h5py: `.status` is the name of the
status the C library gives for the same file ("LT_ERR_FORMAT", ...) and the
message is its message.
"""
import errno
import fcntl
import os
import stat


class LibtensorError(Exception):
    """A file or value refused by the package; .status names the C status."""

    def __init__(self, message, status="LT_ERR_FORMAT"):
        super().__init__(message)
        self.status = status


def file_kind(mode):
    """lt__file_kind: what a st_mode is, in the C library's words."""
    for test, kind in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "not a regular file"


def open_regular(path, op, exc, not_regular="LT_ERR_FORMAT"):
    """Opens path for reading as lt__open_regular does: O_NONBLOCK (a FIFO
    cannot block the open), fstat, refused unless a regular file, then
    switched to blocking reads. Returns (fd, size); the caller closes fd.
    Raises exc(message, status) with the C library's messages."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as e:
        raise exc("%s: %s: cannot open: %s" % (op, path, os.strerror(e.errno)),
                  status="LT_ERR_NOMEM" if e.errno == errno.ENOMEM else "LT_ERR_IO")
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise exc("%s: %s: is %s, not a regular file: refused (only regular files are read)"
                      % (op, path, file_kind(st.st_mode)), status=not_regular)
        fl = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, fl & ~os.O_NONBLOCK)
        return fd, st.st_size
    except OSError as e:
        os.close(fd)
        raise exc("%s: %s: cannot stat: %s" % (op, path, os.strerror(e.errno)), status="LT_ERR_IO")
    except BaseException:
        os.close(fd)
        raise
