"""Reading a file someone else may have placed: a report downloaded from a pull-request run, a restored cache entry.

Such a path can be a symbolic link to a secret (whose first characters an error message would then echo) or a FIFO
that blocks the reader forever, so it is opened without following a link and read only when it is a regular file.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

# Not on every platform (Windows has neither): there, the regular-file check below still applies.
_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


class NotARegularFile(OSError):
    """The path is a symbolic link, a directory, a FIFO or a device: it is not read."""


def read_regular_file(path: Path, max_bytes: int) -> bytes:
    """Up to ``max_bytes + 1`` bytes of ``path`` (one more than allowed tells the caller it is too large).

    Raises NotARegularFile when ``path`` is a symbolic link (not followed) or not a regular file, OSError when it
    cannot be read.
    """
    try:
        descriptor = os.open(path, _FLAGS)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise NotARegularFile(errno.ELOOP, "a symbolic link: not followed", str(path)) from None
        raise
    with os.fdopen(descriptor, "rb") as handle:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise NotARegularFile(errno.EINVAL, "not a regular file", str(path))
        return handle.read(max_bytes + 1)
