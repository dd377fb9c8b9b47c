"""harness.infra.progress's compilation on a cold cache: a second process compiles the
Transformer's kernels while this one compiles the rest, then this one loads them."""

from __future__ import annotations

import pytest

from harness import models
from harness.infra import progress


class _Child:
    def __init__(self, log):
        self.log, self.done = log, False

    def wait(self):
        self.log.append("child waited")
        self.done = True

    def poll(self):
        return 0 if self.done else None

    def kill(self):
        self.log.append("child killed")


@pytest.fixture
def calls(monkeypatch):
    log = []
    monkeypatch.setattr(progress, "warm_up_family", lambda fam: log.append(fam.name))
    monkeypatch.setattr(progress, "_second_process", lambda names: (
        log.append(("child", tuple(names))) or _Child(log)))
    return log


def _families(log):
    return [x for x in log if isinstance(x, str) and x in models.NAMES]


def test_the_second_share_is_loaded_here_after_the_child_compiled_it(calls):
    progress._compile_everything(parallel=True)
    assert calls[0] == ("child", progress.SECOND_SHARE)
    waited = calls.index("child waited")
    assert set(_families(calls[:waited])) == set(models.NAMES) - set(progress.SECOND_SHARE)
    assert _families(calls[waited:]) == list(progress.SECOND_SHARE)


def test_without_parallel_or_a_child_every_family_is_compiled_here_in_order(calls, monkeypatch):
    progress._compile_everything(parallel=False)
    assert _families(calls) == list(models.NAMES) and "child waited" not in calls
    calls.clear()
    monkeypatch.setattr(progress, "_second_process", lambda names: None)
    progress._compile_everything(parallel=True)
    assert _families(calls) == list(models.NAMES)


def test_an_interruption_while_compiling_kills_the_child(calls, monkeypatch):
    def interrupted(fam):
        raise KeyboardInterrupt
    monkeypatch.setattr(progress, "warm_up_family", interrupted)
    with pytest.raises(KeyboardInterrupt):
        progress._compile_everything(parallel=True)
    assert calls[-2:] == ["child killed", "child waited"]     # killed, then reaped


def test_one_core_or_no_registered_family_starts_no_child(monkeypatch):
    monkeypatch.setattr(progress.os, "cpu_count", lambda: 1)
    assert progress._second_process(["transformer"]) is None
    monkeypatch.setattr(progress.os, "cpu_count", lambda: 2)
    assert progress._second_process(["no-such-family"]) is None
