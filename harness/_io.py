"""Atomic file output and the one-line CLI error.

A file is written next to its destination under a temporary name and renamed
into place, so an interrupted run never leaves a half-written file that looks
complete.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


class UsageError(Exception):
    """Bad command-line input: printed as one line, exit status 2."""


def ensure_writable_dir(path, arg="--out"):
    """Create ``path`` if needed and check that files can be written into it."""
    p = Path(path)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"{arg}: cannot create directory {str(p)!r}: {e.strerror}") from None
    if not p.is_dir():
        raise UsageError(f"{arg}: {str(p)!r} exists and is not a directory")
    if not os.access(p, os.W_OK | os.X_OK):
        raise UsageError(f"{arg}: directory {str(p)!r} is not writable")
    return p


def umask():
    """The process umask (read by setting it and putting it back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def output_dir(path, arg="--out"):
    """``ensure_writable_dir`` for the length of a command: if the command fails, a
    directory that this run created and left empty is removed again."""
    existed = os.path.lexists(path)
    out = ensure_writable_dir(path, arg)
    try:
        yield out
    except BaseException:
        if not existed:
            try:
                out.rmdir()                  # only if empty: nothing written is lost
            except OSError:
                pass
        raise


def atomic_write_bytes(path, data: bytes):
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~umask())      # mkstemp makes 0600; a report is for reading
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def atomic_write_text(path, text: str):
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_csv(frame, path):
    """Write a pandas DataFrame as CSV, atomically."""
    return atomic_write_text(path, frame.to_csv(index=False))
