"""Command output (harness.infra.files): atomic files, sets of files replaced together, and
no empty directory left by a failed run; each failure at each step, and the names refused."""

import errno
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import numpy as np
import pandas as pd
import pytest

from _helpers import _listing, _with_umask
from harness.kernels import rnn
from harness.infra import files as _io, signals as _interrupt
from harness.infra.files import atomic_write_text, output_dir


def test_output_dir_removes_what_a_failed_run_created(tmp_path):
    target = tmp_path / "new"
    with pytest.raises(RuntimeError):
        with output_dir(target):
            raise RuntimeError("boom")
    assert not target.exists()


def test_output_dir_keeps_a_directory_that_existed(tmp_path):
    with pytest.raises(RuntimeError):
        with output_dir(tmp_path):
            raise RuntimeError("boom")
    assert tmp_path.is_dir()


def test_output_dir_keeps_what_was_written(tmp_path):
    target = tmp_path / "new"
    with pytest.raises(RuntimeError):
        with output_dir(target) as out:
            atomic_write_text(out / "a.csv", "x\n1\n")
            raise RuntimeError("boom")
    assert (target / "a.csv").read_text() == "x\n1\n"


def test_atomic_write_leaves_no_temporary(tmp_path):
    atomic_write_text(tmp_path / "f.txt", "hello")
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]


def test_masked_arrays_are_refused():
    X = np.ma.masked_array(np.ones((3, 2)), mask=[[0, 1]] * 3)
    with pytest.raises(TypeError, match="X is a masked array"):
        rnn.forward(X, np.ones((2, 2)), np.eye(2))


# Sends the signal at one chosen moment of the command's own file operations: just before or
# just after the first os.mkdir, os.rmdir, os.replace or os.open whose path's name matches a regular
# expression (HARNESS_TEST_SIGNAL_AT="after-mkdir:-probe-"). A test hook, loaded by Python at
# start-up from PYTHONPATH; the harness knows nothing of it.
_AT_FILE_OPERATION = """\
import os, re, signal
_sig = int(os.environ["HARNESS_TEST_SIGNAL"])
_when, _, _name = os.environ["HARNESS_TEST_SIGNAL_AT"].partition(":")
_sent = []


def _wrapped(op, real):
    def f(*paths, **kw):
        hit = not _sent and any(re.search(_name, os.path.basename(os.fspath(p)))
                                for p in paths[:2] if isinstance(p, (str, bytes, os.PathLike)))
        if hit and _when == "before-" + op:
            _sent.append(op)
            os.kill(os.getpid(), _sig)    # handled on the next line Python runs
        out = real(*paths, **kw)
        if hit and _when == "after-" + op:
            _sent.append(op)
            os.kill(os.getpid(), _sig)
        return out
    return f


for _op in ("mkdir", "rmdir", "replace", "open"):
    setattr(os, _op, _wrapped(_op, getattr(os, _op)))
"""

_STAGE = r"^\.harness-staging-\d+-(?!probe-)"       # the staging folder, not the probe
DECAY_FILES = {"decay.csv", "decay_summary.csv", "decay_clipping.csv", "decay_additive.csv"}


@pytest.mark.parametrize("command, at", [
    ("report", "after-mkdir:-probe-"),        # the --out probe, made in the parent
    ("report", "before-rmdir:-probe-"),
    ("report", r"before-open:^\.out\.lock$"),   # the report's lock, made in the parent
    ("report", r"after-open:^\.out\.lock$"),    # made, its pid not yet written (#39)
    ("decay", "after-mkdir:-probe-"),
    ("decay", "before-rmdir:-probe-"),
    ("decay", "after-mkdir:^out$"),           # the output folder, made by this run
    ("decay", "after-mkdir:" + _STAGE),       # the staging folder in it
    ("decay", r"after-mkdir:^\.old$"),       # the commit's folder for the old set
    ("decay", r"before-replace:^decay\.csv$"),  # the first file moving in
])
def test_sigterm_at_each_moment_of_the_output_leaves_nothing(command, at, tmp_path):
    """SIGTERM at a chosen moment of the command's file operations, sent from inside the
    process (so where it lands does not depend on the machine's load): the command says it
    was interrupted and the output's parent holds nothing but, where the signal was held
    back until the set had moved in, the complete output. The probe's moment left
    .harness-staging-<pid>-probe-<id> in the parent (a full make test, #39)."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_AT_FILE_OPERATION)
    parent = tmp_path / "parent"
    parent.mkdir()
    out = parent / "out"
    argv = {"report": ["report", "--quick"],
            "decay": ["decay", "--T", "30", "--d", "5", "--rho", "0.9", "--quiet"]}[command]
    env = dict(os.environ, PYTHONPATH=str(hook), HARNESS_TEST_SIGNAL=str(int(signal.SIGTERM)),
               HARNESS_TEST_SIGNAL_AT=at)
    proc = subprocess.run([sys.executable, "-m", "harness", *argv, "--out", str(out)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                          timeout=600)
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr      # it always lands
    assert proc.stderr.splitlines()[-1] == (f"harness {command}: interrupted (SIGTERM); no "
                                            f"partial output was left"), proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    left = sorted(os.listdir(parent))
    if at.startswith("before-replace"):        # held back until the whole set had moved in
        assert left == ["out"] and set(os.listdir(out)) == DECAY_FILES, (left, os.listdir(out))
    else:
        assert left == [], left


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize("whole", [False, True])
def test_a_signal_between_the_probes_mkdir_and_rmdir_is_raised_once_it_is_gone(
        sig, whole, tmp_path, monkeypatch):
    real = os.mkdir

    def mkdir(path, *args, **kwargs):
        real(path, *args, **kwargs)
        if "-probe-" in os.fspath(path):
            os.kill(os.getpid(), sig)          # handled on the next line Python runs

    out = tmp_path / "out"
    if whole:
        out.mkdir()                            # probed in the folder, then in its parent
    monkeypatch.setattr(os, "mkdir", mkdir)
    with _interrupt.installed():
        with pytest.raises(KeyboardInterrupt):
            _io.check_out(out, whole=whole)
        assert _interrupt.received() == sig
    assert _listing(tmp_path) == (["out"] if whole else [])
    assert not whole or _listing(out) == []


def test_an_output_set_makes_nothing_until_it_is_used(tmp_path):
    """Its staging folder is made by its first use, inside the caller's try, so that a signal
    between the constructor and that try leaves nothing behind."""
    files = _io.OutputSet(tmp_path)
    assert _listing(tmp_path) == []
    files.discard()
    files = _io.OutputSet(tmp_path)
    files.write_text("a.txt", "a")
    assert files.stage.parent == tmp_path and (files.stage / "a.txt").read_text() == "a"
    files.discard()
    assert _listing(tmp_path) == [] and files.stage.parent == tmp_path   # not made again


def test_output_dir_removes_every_folder_a_failed_run_created(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with output_dir(tmp_path / "a" / "b" / "c"):
            raise KeyboardInterrupt
    assert _listing(tmp_path) == []
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "keep").write_text("k")
    with pytest.raises(RuntimeError):
        with output_dir(tmp_path / "a" / "b" / "c"):
            raise RuntimeError("boom")
    assert _listing(tmp_path) == ["a"] and _listing(tmp_path / "a") == ["keep"]


def test_main_restores_the_sigterm_handler(tmp_path):
    from harness import cli
    before = signal.getsignal(signal.SIGTERM)
    assert cli.main(["decay", "--T", "8", "--d", "2", "--rho", "0.9", "--quiet",
                     "--out", str(tmp_path)]) == 0
    assert signal.getsignal(signal.SIGTERM) is before


def test_depth_writes_its_files_only_when_the_run_completes(tmp_path, monkeypatch):
    from harness import cli
    from harness.analysis import schedule

    def boom(*a, **k):
        raise RuntimeError("interrupted")

    monkeypatch.setattr(schedule, "schedule_table", boom)
    out = tmp_path / "d"
    with pytest.raises(RuntimeError):
        cli.main(["depth", "--T", "8", "16", "--d", "4", "--schedule-T", "8", "--no-measure",
                  "--out", str(out)])
    assert not out.exists()                    # depth.csv was not written ahead of the rest


def test_analyser_errors_are_one_line_unless_debugging(monkeypatch, capsys):
    from harness import cli
    from harness.commands import decay

    def bad(args):
        raise ValueError("rho must be > 0\nsecond line")

    monkeypatch.setattr(decay, "run", bad)
    assert cli.main(["decay"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "rho must be > 0" in err and "HARNESS_DEBUG=1" in err
    monkeypatch.setenv("HARNESS_DEBUG", "1")
    with pytest.raises(ValueError, match="rho must be"):
        cli.main(["decay"])


class _HalfWriter:
    """A file whose write puts half the bytes down, then fails as a full disk would."""

    def __init__(self, f):
        self.f = f

    def write(self, data):
        self.f.write(data[: len(data) // 2])
        self.f.flush()
        raise OSError(errno.ENOSPC, "No space left on device")

    def __getattr__(self, name):
        return getattr(self.f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()


def test_atomic_write_failing_halfway_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "decay.csv"
    _io.atomic_write_text(target, "old,contents\n1,2\n")
    real_fdopen = os.fdopen
    with mock.patch.object(_io.os, "fdopen", lambda fd, mode: _HalfWriter(real_fdopen(fd, mode))):
        with pytest.raises(OSError, match="No space"):
            _io.atomic_write_text(target, "new,contents\n" * 1000)
    assert target.read_text() == "old,contents\n1,2\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["decay.csv"]


@pytest.mark.parametrize("step", ["fsync", "chmod", "replace"])
def test_atomic_write_failing_at_each_later_step_keeps_the_old_file(tmp_path, step):
    target = tmp_path / "f.txt"
    target.write_text("old")

    def fail(*a, **k):
        raise OSError(errno.EIO, f"{step} failed")
    with mock.patch.object(_io.os, step, fail):
        with pytest.raises(OSError, match=f"{step} failed"):
            _io.atomic_write_text(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]


def test_atomic_write_interrupted_leaves_no_temporary(tmp_path):
    target = tmp_path / "f.txt"

    def interrupt(*a):
        raise KeyboardInterrupt
    with mock.patch.object(_io.os, "fsync", interrupt):
        with pytest.raises(KeyboardInterrupt):
            _io.atomic_write_bytes(target, b"x")
    assert list(tmp_path.iterdir()) == []


def test_atomic_write_makes_a_readable_file_with_the_exact_bytes(tmp_path):
    path = _with_umask(0o027, _io.atomic_write_bytes, tmp_path / "b.bin", b"\x00\x01data\xff")
    assert path == tmp_path / "b.bin"
    assert path.read_bytes() == b"\x00\x01data\xff"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640           # 0o666 less the umask
    open_to_all = _with_umask(0, _io.atomic_write_bytes, tmp_path / "c.bin", b"c")
    assert stat.S_IMODE(open_to_all.stat().st_mode) == 0o666
    _io.atomic_write_text(tmp_path / "t.txt", "ρ = 0.9")
    assert (tmp_path / "t.txt").read_bytes() == "ρ = 0.9".encode("utf-8")


def test_umask_is_read_without_changing_it():
    old = os.umask(0o037)
    try:
        assert _io.umask() == 0o037
        assert _io.umask() == 0o037
    finally:
        os.umask(old)


def test_atomic_write_uses_a_hidden_temporary_beside_the_destination(tmp_path):
    seen = []
    real = os.replace

    def spy(src, dst):
        seen.append((src, dst))
        return real(src, dst)
    with mock.patch.object(_io.os, "replace", spy):
        _io.atomic_write_text(tmp_path / "depth.csv", "x")
    (src, dst), = seen
    src = os.fspath(src)
    assert os.path.dirname(src) == str(tmp_path) and os.fspath(dst) == str(tmp_path / "depth.csv")
    assert os.path.basename(src).startswith(".depth.csv.") and src.endswith(".tmp")


def _folder_with(tmp_path, **files):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def test_output_set_replaces_the_old_files_together_and_leaves_no_stage(tmp_path):
    folder = _folder_with(tmp_path, **{"a.csv": "old a", "b.csv": "old b", "keep.txt": "k"})

    def run():
        with _io.output_set(folder) as files:
            assert files.stage.parent == folder
            assert files.stage.name.startswith(f"{_io.STAGING_PREFIX}{os.getpid()}-")
            files.write_text("a.csv", "new a")
            files.write_csv("b.csv", pd.DataFrame({"x": [1, 2], "y": ["p", "q"]}))
            files.write_bytes("c.bin", b"\x00c")
            assert [n for n in _listing(folder) if not n.startswith(_io.STAGING_PREFIX)] == \
                ["a.csv", "b.csv", "keep.txt"]                                  # nothing moved yet
    _with_umask(0, run)
    assert _listing(folder) == ["a.csv", "b.csv", "c.bin", "keep.txt"]
    assert (folder / "a.csv").read_text() == "new a"
    assert (folder / "b.csv").read_text() == "x,y\n1,p\n2,q\n"
    assert (folder / "c.bin").read_bytes() == b"\x00c" and (folder / "keep.txt").read_text() == "k"
    for name in ("a.csv", "b.csv", "c.bin"):
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o666
    files = _io.OutputSet(folder)
    _with_umask(0o077, files.write_text, "d.txt", "d")
    assert stat.S_IMODE((files.stage / "d.txt").stat().st_mode) == 0o600
    files.discard()
    assert _listing(folder) == ["a.csv", "b.csv", "c.bin", "keep.txt"]


def test_output_set_failing_halfway_puts_the_old_set_back(tmp_path):
    folder = _folder_with(tmp_path, **{"a.csv": "old a", "b.csv": "old b"})
    real = os.replace

    def fail_on_b(src, dst):
        if os.fspath(dst) == str(folder / "b.csv") and _io.STAGING_PREFIX in os.fspath(src) \
                and ".old" not in os.fspath(src):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(src, dst)
    with mock.patch.object(_io.os, "replace", fail_on_b):
        with pytest.raises(OSError, match="No space"):
            with _io.output_set(folder) as files:
                files.write_text("a.csv", "new a")
                files.write_text("b.csv", "new b")
                files.write_text("c.csv", "new c")
    assert _listing(folder) == ["a.csv", "b.csv"]
    assert (folder / "a.csv").read_text() == "old a" and (folder / "b.csv").read_text() == "old b"


def test_output_set_failing_on_a_new_name_removes_what_it_moved(tmp_path):
    folder = _folder_with(tmp_path, **{"a.csv": "old a"})
    real = os.replace

    def fail_on_c(src, dst):
        if os.fspath(dst) == str(folder / "c.csv"):
            raise OSError(errno.EIO, "I/O error")
        return real(src, dst)
    with mock.patch.object(_io.os, "replace", fail_on_c):
        with pytest.raises(OSError, match="I/O"):
            with _io.output_set(folder) as files:
                files.write_text("a.csv", "new a")
                files.write_text("b.csv", "new b")
                files.write_text("c.csv", "new c")
    assert _listing(folder) == ["a.csv"] and (folder / "a.csv").read_text() == "old a"


def test_output_set_interrupted_before_commit_changes_nothing(tmp_path):
    folder = _folder_with(tmp_path, **{"a.csv": "old a"})
    with pytest.raises(KeyboardInterrupt):
        with _io.output_set(folder) as files:
            files.write_text("a.csv", "new a")
            raise KeyboardInterrupt
    assert _listing(folder) == ["a.csv"] and (folder / "a.csv").read_text() == "old a"


def test_output_set_removes_the_stages_of_dead_runs_only(tmp_path):
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead = int(proc.stdout)
    for name in (f"{_io.STAGING_PREFIX}{dead}-x1", f"{_io.STAGING_PREFIX}{os.getpid()}-x2",
                 f"{_io.STAGING_PREFIX}{dead}", "other-123-x"):
        (tmp_path / name).mkdir()
    with _io.output_set(tmp_path) as files:
        files.write_text("a.csv", "a")
    assert _listing(tmp_path) == sorted([f"{_io.STAGING_PREFIX}{os.getpid()}-x2",
                                         f"{_io.STAGING_PREFIX}{dead}", "a.csv", "other-123-x"])


def test_ensure_writable_dir_names_the_argument_and_the_path(tmp_path, monkeypatch):
    deep = tmp_path / "a" / "b" / "c"
    assert _io.ensure_writable_dir(deep) == deep and deep.is_dir()      # parents made too
    assert _io.ensure_writable_dir(deep, "--x") == deep                 # and an existing one kept
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(_io.UsageError) as e:
        _io.ensure_writable_dir(blocker / "sub", "--x")
    assert str(e.value) == f"--x: cannot create directory {str(blocker / 'sub')!r}: Not a directory"
    with pytest.raises(_io.UsageError, match=r"^--out: cannot create directory"):
        _io.ensure_writable_dir(blocker / "sub")
    with pytest.raises(_io.UsageError, match=r"^--x: the name .* holds bytes that are not UTF-8"):
        _io.ensure_writable_dir(str(tmp_path / "bad\udcff"), "--x")
    (deep / "x.csv").mkdir()
    with pytest.raises(_io.UsageError) as e:
        _io.ensure_writable_dir(deep, "--x", files=("y.csv", "x.csv"))
    assert str(e.value) == (f"--x: {str(deep / 'x.csv')!r} is a directory, where the file x.csv "
                            f"goes; move it away")
    modes = []

    def refuse(path, mode):
        modes.append(mode)
        return False
    monkeypatch.setattr(_io.os, "access", refuse)
    with pytest.raises(_io.UsageError) as e:
        _io.ensure_writable_dir(deep, "--x")
    assert str(e.value) == f"--x: directory {str(deep)!r} is not writable"
    assert modes == [os.W_OK | os.X_OK]


def test_output_set_writes_utf8_csv_without_the_index(tmp_path):
    frame = pd.DataFrame({"é": [1, 2]}, index=[7, 8])
    with _io.output_set(tmp_path) as files:
        files.write_csv("f.csv", frame)
        files.write_text("t.txt", "ρ")
    assert (tmp_path / "f.csv").read_bytes() == "é\n1\n2\n".encode("utf-8")
    assert (tmp_path / "t.txt").read_bytes() == "ρ".encode("utf-8")
    _io.atomic_write_text(tmp_path / "h.txt", "ρ")
    assert (tmp_path / "h.txt").read_bytes() == "ρ".encode("utf-8")


def test_check_name_refuses_every_undecodable_byte_and_names_the_option():
    for raw in (b"\x80", b"out\xff", b"caf\xe9"):           # surrogateescape: \udc80..\udcff
        name = raw.decode("utf-8", "surrogateescape")
        with pytest.raises(_io.UsageError, match=r"^--out: the name .* not UTF-8"):
            _io.check_name(name)
        with pytest.raises(_io.UsageError, match=r"^--figures: "):
            _io.check_name(name, "--figures")
    assert _io.check_name("café/\u00e9") == "café/\u00e9"


@pytest.mark.parametrize("name, what", [
    ("out\nx", "a newline"), ("out\r", "a carriage return"), ("a\tb", "a tab"),
    ("a\x00b", "a NUL byte"), ("a\x1bb", "the control character '\\x1b'"),
    ("a\x85b", "the control character '\\x85'"),
])
def test_check_name_refuses_a_control_character_and_names_it(name, what):
    with pytest.raises(_io.UsageError) as err:
        _io.check_name(name, "--figures")
    assert str(err.value) == (f"--figures: the name {name!r} holds {what}; please use a name "
                              f"without control characters")


def test_an_out_path_with_a_newline_is_refused_before_anything_is_written(tmp_path, capsys):
    from harness import cli
    out = tmp_path / "a\nb"
    assert cli.main(["decay", "--T", "8", "--d", "2", "--quiet", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == (f"harness decay: error: --out: the name {str(out)!r} holds a newline; please "
                   f"use a name without control characters\n")
    assert _listing(tmp_path) == []


def test_a_stale_staging_folder_removed_by_another_run_is_no_error(tmp_path, monkeypatch):
    stale = tmp_path / f"{_io.STAGING_PREFIX}999999-abc"
    stale.mkdir()
    (stale / "depth.csv").write_text("x")

    def other_run_got_there_first(pid):
        shutil.rmtree(stale)
        return False                                         # its owner is dead
    monkeypatch.setattr(_interrupt, "pid_alive", other_run_got_there_first)
    files = _io.OutputSet(tmp_path)
    assert not stale.exists()
    files.discard()
    files.discard()                                          # twice: still no error
    assert list(tmp_path.iterdir()) == []


def test_check_name_shows_the_name_it_refuses():
    name = b"out\xff".decode("utf-8", "surrogateescape")
    with pytest.raises(_io.UsageError) as err:
        _io.check_name(name, "--figures")
    assert str(err.value) == ("--figures: the name 'out\\udcff' holds bytes that are not UTF-8; "
                              "please use a UTF-8 name")


def test_a_file_in_the_way_of_the_output_folder_is_named(tmp_path, monkeypatch):
    """mkdir refuses a file by itself; this check catches one put there after mkdir (a race)."""
    f = tmp_path / "report"
    f.write_text("not a folder")
    monkeypatch.setattr(_io.Path, "mkdir", lambda self, **kw: None)
    with pytest.raises(_io.UsageError) as err:
        _io.ensure_writable_dir(f, "--out")
    assert str(err.value) == f"--out: {str(f)!r} exists and is not a directory"


def test_a_failed_commit_puts_back_the_old_files_it_can(tmp_path, monkeypatch):
    """The move of b fails, and putting old a back fails too: old b still comes back, and
    the error the caller sees is the one that stopped the commit, not the second one."""
    for name in ("a.csv", "b.csv"):
        (tmp_path / name).write_text(f"old {name}")
    files = _io.OutputSet(tmp_path)
    files.write_text("a.csv", "new a.csv")
    files.write_text("b.csv", "new b.csv")
    real = _io.os.replace

    def flaky(src, dst):
        src, dst = Path(src), Path(dst)
        if src.parent == files.stage and src.name == "b.csv":
            raise OSError("disk full")
        if src.parent.name == ".old" and src.name == "a.csv":
            raise OSError("cannot put a.csv back")
        return real(src, dst)
    monkeypatch.setattr(_io.os, "replace", flaky)
    with pytest.raises(OSError, match="disk full"):
        files.commit()
    monkeypatch.undo()
    files.discard()
    assert (tmp_path / "b.csv").read_text() == "old b.csv"


def test_check_out_names_each_folder_it_refuses_and_probes_where_it_will_write(tmp_path,
                                                                               monkeypatch):
    """Each refusal word for word with the argument it names; the probe folder made and removed
    in the folder itself (or its nearest existing parent), named as a staging folder."""
    import tempfile

    def refused(path, **kw):
        with pytest.raises(_io.UsageError) as e:
            _io.check_out(path, "--x", **kw)
        return str(e.value)

    assert refused("") == "--x: the name is empty; give a folder ('.' for the current one)"
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    assert refused(tmp_path / "dangling") == f"--x: {str(tmp_path / 'dangling')!r} is a link to nothing"
    (tmp_path / "file").write_text("x")
    assert refused(tmp_path / "file") == f"--x: {str(tmp_path / 'file')!r} exists and is not a directory"
    assert refused(tmp_path / "file" / "sub") == (
        f"--x: cannot create {str(tmp_path / 'file' / 'sub')!r}: {str(tmp_path / 'file')!r} is "
        f"not a directory")
    out = tmp_path / "out"
    (out / "x.csv").mkdir(parents=True)
    assert refused(out, files=("y.csv", "x.csv")) == (
        f"--x: {str(out / 'x.csv')!r} is a directory, where the file x.csv goes; move it away")
    assert _io.check_out(out, "--x") == out                 # not whole: a full folder is fine
    assert refused(out, whole=True) == f"--x: {str(out)!r} exists and is not an empty directory"
    assert refused("o" * 300) == f"--x: cannot use {'o' * 300!r}: File name too long"
    assert refused(str(tmp_path / "bad\udcff")).startswith("--x: the name ")

    probes, real = [], tempfile.mkdtemp

    def recorded(*a, prefix=None, dir=None, **k):
        probes.append((prefix, dir))
        if dir is not None and Path(dir) == tmp_path / "ro":
            raise OSError(errno.EROFS, "Read-only file system")
        return real(*a, prefix=prefix, dir=dir, **k)
    monkeypatch.setattr(tempfile, "mkdtemp", recorded)
    (tmp_path / "ro").mkdir()
    assert refused(tmp_path / "ro") == f"--x: cannot write in {str(tmp_path / 'ro')!r}: Read-only file system"
    assert refused(tmp_path / "ro" / "new" / "deeper") == (
        f"--x: cannot write in {str(tmp_path / 'ro')!r}: Read-only file system")   # its parent
    (tmp_path / "ro" / "inner").mkdir()            # whole: the parent, where the lock goes, too
    assert refused(tmp_path / "ro" / "inner", whole=True) == (
        f"--x: cannot write in {str(tmp_path / 'ro')!r}: Read-only file system")
    probes.clear()
    (tmp_path / "fresh").mkdir()
    assert _io.check_out(tmp_path / "fresh", whole=True) == (tmp_path / "fresh").resolve()
    prefix = f"{_io.STAGING_PREFIX}{os.getpid()}-probe-"
    assert probes == [(prefix, tmp_path / "fresh"), (prefix, tmp_path)]    # the folder, then
    assert sorted(p.name for p in (tmp_path / "fresh").iterdir()) == []    # its parent: removed
