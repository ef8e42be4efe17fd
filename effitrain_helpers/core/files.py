"""Reading and writing the files a user points the workbook at, so that nothing hangs and nothing is half written.

- :func:`read_bytes` (and :func:`read_text`): a file the workbook reads (a verdicts file, a manifest, a
  notebook, a checkpoint's marker) must be a regular file of at most ``limit`` bytes. A FIFO would block the
  read forever and a device such as ``/dev/zero`` never ends, so the file is opened without blocking and its
  kind and size are checked before a byte is read; anything else is one ``ValueError`` naming the path.
- :func:`write_atomically`: a file written to a temporary file beside it, flushed, then renamed over the
  target, so the target is the old file or the new one, never a truncated one (a full disk, a crash). An
  ``OSError`` names the path (a bare "No space left on device" names none).
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from effitrain_helpers.core.language import msg, tr

MAX_BYTES = 256 * 2**20  # larger than any notebook, manifest or verdicts file the workbook writes


def _kind(mode: int) -> str:
    """What a file that is not a regular file is, in words."""
    for test, name in ((stat.S_ISDIR, msg("a folder")), (stat.S_ISFIFO, msg("a named pipe (FIFO)")),
                       (stat.S_ISCHR, msg("a device")), (stat.S_ISBLK, msg("a device")),
                       (stat.S_ISSOCK, msg("a socket"))):
        if test(mode):
            return name
    return msg("a special file")


def read_bytes(path, limit: int = MAX_BYTES) -> bytes:
    """The bytes of ``path`` if it is a regular file of at most ``limit`` bytes; ``ValueError`` naming the path
    otherwise (``OSError`` when it cannot be opened). Never blocks on a FIFO, never reads past ``limit``."""
    path = Path(path)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise ValueError(tr("{path} is {kind}, not a regular file: the workbook reads only regular files. "
                                "Fix: point it to a file.", path=str(path), kind=tr(_kind(mode))))
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise ValueError(tr("{path} is larger than {limit:,} bytes, more than such a file ever holds. Fix: "
                                "point it to the right file.", path=str(path), limit=limit))
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text(path, limit: int = MAX_BYTES) -> str:
    """:func:`read_bytes` decoded as UTF-8 (``UnicodeDecodeError``, a ``ValueError``, when it is not)."""
    return read_bytes(path, limit).decode("utf-8")


def write_atomically(path, data: bytes | str, exclusive: bool = False) -> None:
    """Write ``data`` to ``path`` whole or not at all (temporary file, flush, rename); ``exclusive``: only if
    no file is there (``FileExistsError`` otherwise, and the file there is untouched). An ``OSError`` (a full
    disk) leaves no temporary file and names ``path``."""
    path = Path(path)
    data = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        try:
            with open(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            if exclusive:
                os.link(tmp, path)  # fails when a file appeared there meanwhile
            else:
                os.replace(tmp, path)
        except FileExistsError:
            raise
        except OSError as err:
            if err.filename is None:  # ENOSPC from write() names no file: name the one being written
                raise OSError(err.errno, err.strerror, str(path)) from None
            raise
    finally:
        Path(tmp).unlink(missing_ok=True)
