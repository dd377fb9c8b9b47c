"""File output that is all new or all old, and the one-line CLI error.

A command's files are written into a staging folder beside their destination
and moved into place together (``output_set``): a folder never holds a mix of
two runs' files. A single file is written under a temporary name and renamed
(``atomic_write_bytes``). Leftovers of a run killed with -9 carry its process
id and are removed by the next run.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from pathlib import Path

from harness.infra import signals

STAGING_PREFIX = ".harness-staging-"


class UsageError(Exception):
    """Bad command-line input: printed as one line, exit status 2."""


class UserCodeError(UsageError):
    """The user's own code (``depth --forward``'s file or function) raised: the message is one
    line naming their file, line and exception; ``frames`` their own frames, printed below it
    (the harness's left out); exit status 2. Its ``__cause__`` is what they raised."""

    def __init__(self, message, frames=""):
        super().__init__(message)
        self.frames = frames


_CONTROL_NAMES = {"\n": "a newline", "\r": "a carriage return", "\t": "a tab",
                  "\x00": "a NUL byte"}


def check_name(path, arg="--out"):
    """A path whose bytes are not UTF-8, or that holds a control character (a newline: it
    would split every line that names the folder), cannot be printed or written into the
    report: refuse it."""
    text = os.fspath(path)
    if any("\udc80" <= c <= "\udcff" for c in text):
        raise UsageError(f"{arg}: the name {ascii(text)} holds bytes that are not UTF-8; "
                         f"please use a UTF-8 name")
    bad = next((c for c in text if c < " " or "\x7f" <= c <= "\x9f"), None)
    if bad is not None:
        what = _CONTROL_NAMES.get(bad, f"the control character {bad!r}")
        raise UsageError(f"{arg}: the name {text!r} holds {what}; please use a name without "
                         f"control characters")
    return text


def check_out(path, arg="--out", files=(), whole=False):
    """The output folder ``path``, checked before anything heavy loads or any work starts: a
    UsageError (exit status 2) at once for one that cannot be used; nothing is left behind.

    An existing ``path`` must be a directory this process can write in; a missing one, its
    nearest existing parent (where it will be created). Writable means a folder was made
    and removed there: permission bits do not tell root, a read-only mount or /proc apart.
    ``files``: the names the command writes, none of which may be a directory.
    ``whole``: the command replaces the folder whole (the report): it must be empty, or hold
    nothing but the staging of an earlier run, and be neither the current directory nor
    one that holds it; its parent, where the lock goes, must be writable too. Returns the
    path (resolved, when ``whole``)."""
    text = check_name(path, arg)
    if not text:
        raise UsageError(f"{arg}: the name is empty; give a folder ('.' for the current one)")
    p = Path(text)
    try:
        if whole:
            p = p.resolve()                          # a symlink to a folder: that folder
            cwd = Path.cwd().resolve()
            if p == cwd or p in cwd.parents:
                raise UsageError(f"{arg}: {text!r} is the current directory or holds it; the "
                                 f"report replaces its folder whole, so give it a folder of its own")
        if p.is_symlink() and not p.exists():
            raise UsageError(f"{arg}: {text!r} is a link to nothing")
        if p.exists():
            if not p.is_dir():
                raise UsageError(f"{arg}: {text!r} exists and is not a directory")
            if whole and any(not q.name.startswith(STAGING_PREFIX) for q in p.iterdir()):
                raise UsageError(f"{arg}: {text!r} exists and is not an empty directory")
            _probe(p, arg)
            if whole:
                _probe(p.parent, arg)
            for name in files:
                if (p / name).is_dir():
                    raise UsageError(f"{arg}: {str(p / name)!r} is a directory, where the file "
                                     f"{name} goes; move it away")
        else:
            parent = next(q for q in p.absolute().parents if q.exists())
            if not parent.is_dir():
                raise UsageError(f"{arg}: cannot create {text!r}: {str(parent)!r} is not a "
                                 f"directory")
            _probe(parent, arg)
    except OSError as e:                             # a name too long, a folder we may not read
        raise UsageError(f"{arg}: cannot use {text!r}: {e.strerror or e}") from None
    return p


def _probe(folder, arg):
    """Make and remove a folder in ``folder``, named as a staging folder (a run killed -9 in
    between leaves what the next run removes). SIGINT and SIGTERM are held back from before
    the mkdir to after the rmdir: one that comes in between is raised once the probe is gone."""
    with signals.deferred():
        try:
            probe = tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{os.getpid()}-probe-", dir=folder)
        except OSError as e:
            why = e.strerror or e
            raise UsageError(f"{arg}: cannot write in {str(folder)!r}: {why}") from None
        os.rmdir(probe)


def ensure_writable_dir(path, arg="--out", files=()):
    """Create ``path`` if needed and check that ``files`` can be written into it."""
    p = Path(check_name(path, arg))
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"{arg}: cannot create directory {str(p)!r}: {e.strerror}") from None
    if not p.is_dir():
        raise UsageError(f"{arg}: {str(p)!r} exists and is not a directory")
    if not os.access(p, os.W_OK | os.X_OK):
        raise UsageError(f"{arg}: directory {str(p)!r} is not writable")
    for name in files:
        if (p / name).is_dir():
            raise UsageError(f"{arg}: {str(p / name)!r} is a directory, where the file {name} "
                             f"goes; move it away")
    return p


def umask():
    """The process umask (read by setting it and putting it back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def remove_stale(folder, pattern):
    """Remove leftovers named by ``pattern`` (a regex whose group 1 is a pid) of dead processes."""
    try:
        entries = list(Path(folder).iterdir())
    except OSError:
        return
    for p in entries:
        m = re.fullmatch(pattern, p.name)
        if m and not signals.pid_alive(int(m.group(1))):
            shutil.rmtree(p, ignore_errors=True)


@contextlib.contextmanager
def output_dir(path, arg="--out", files=()):
    """``ensure_writable_dir`` for the length of a command: if the command fails (a signal
    included, at any moment, the mkdir's own), the folders this run created and left empty
    are removed again, the deepest first."""
    p = Path(check_name(path, arg))
    made = [q for q in (p, *p.parents) if not os.path.lexists(q)]     # deepest first
    try:
        yield ensure_writable_dir(path, arg, files)
    except BaseException:
        for q in made:
            try:
                q.rmdir()                    # only if empty: nothing written is lost
            except OSError:
                break
        raise


class OutputSet:
    """A command's files, staged and then moved into ``folder`` together.

    ``write_csv`` / ``write_text`` stage a file; ``commit`` moves every staged file
    into place with signals held back, putting the old files back if a move fails,
    so that the folder holds one run's files: all new, or all old.
    """

    def __init__(self, folder):
        self.folder = Path(folder)
        remove_stale(self.folder, re.escape(STAGING_PREFIX) + r"(\d+)-.*")
        self._stage = None
        self.names = []

    @property
    def stage(self):
        """The staging folder, made on first use: inside the caller's ``try`` whose ``finally``
        calls ``discard``, never in the constructor, from which a signal could leave it
        made and unknown. Made and recorded with SIGINT and SIGTERM held back."""
        if self._stage is None:
            with signals.deferred():
                self._stage = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{os.getpid()}-",
                                                    dir=self.folder))
        return self._stage

    def write_bytes(self, name, data):
        with open(self.stage / name, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(self.stage / name, 0o666 & ~umask())
        self.names.append(name)

    def write_text(self, name, text):
        self.write_bytes(name, text.encode("utf-8"))

    def write_csv(self, name, frame):
        self.write_text(name, frame.to_csv(index=False))

    def commit(self):
        signals.checkpoint()                  # a swallowed signal stops here, before any move
        old = self.stage / ".old"
        old.mkdir()
        moved = []
        with signals.deferred():
            try:
                for name in self.names:
                    dest = self.folder / name
                    if os.path.lexists(dest):
                        os.replace(dest, old / name)
                    moved.append(name)
                    os.replace(self.stage / name, dest)
            except BaseException:
                for name in reversed(moved):     # put the old set back
                    dest = self.folder / name
                    with contextlib.suppress(OSError):
                        os.replace(dest, self.stage / name)
                    with contextlib.suppress(OSError):
                        if os.path.lexists(old / name):
                            os.replace(old / name, dest)
                raise

    def discard(self):
        if self._stage is not None:
            shutil.rmtree(self._stage, ignore_errors=True)


@contextlib.contextmanager
def output_set(folder):
    """``with output_set(out) as files: files.write_csv(...)``: committed together at the end
    of the block, discarded (the old files untouched) if the block raises."""
    files = OutputSet(folder)
    try:
        yield files
        files.commit()
    finally:
        files.discard()


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
