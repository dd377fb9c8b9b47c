"""depth.trace_model and depth.check_trace_memory: what they report besides the counts.

The time a trace took, the argument a refusal names, the figures a memory refusal
states, and which traced forms a family's name checks.
"""
import re
import time

import pytest

from harness.analysis import depth
from harness import models


def test_a_trace_records_the_seconds_it_took_within_the_call():
    t0 = time.perf_counter()
    tr = depth.trace_model("rnn", 6, 3)
    outer = time.perf_counter() - t0
    assert isinstance(tr.seconds, float)
    assert 0 < tr.seconds <= outer


@pytest.mark.parametrize("args, widths, name", [
    ((0, 4), {}, "T"), ((4, 0), {}, "d"), ((4, 4), {"d_h": 0}, "d_h"),
    ((2.5, 4), {}, "T"), ((4, "4"), {}, "d")])
def test_a_refused_size_names_its_argument(args, widths, name):
    with pytest.raises((TypeError, ValueError), match=rf"^{name} must be an integer >= 1"):
        depth.trace_model("rnn", *args, **widths)


def test_the_widths_count_in_the_memory_check():
    T, d, d_h = 4, 2, 400_000                  # small T and d, a width that cannot fit
    need = models.form("rnn")[1].trace_memory_bytes(T, d, d_h=d_h)
    assert need > depth.available_memory_bytes()
    assert models.form("rnn")[1].trace_memory_bytes(T, d) < 2**20
    with pytest.raises(ValueError, match="tracing the rnn at T=4, d=2 needs about"):
        depth.trace_model("rnn", T, d, d_h=d_h)
    with pytest.raises(MemoryError):
        depth.check_trace_memory("rnn", T, d, available=2**30, d_h=d_h)
    depth.check_trace_memory("rnn", T, d, available=2**30)          # fits without the width


def test_a_memory_refusal_states_bytes_and_gib_that_agree():
    T, d = 3000, 64
    need = models.form("attention")[1].trace_memory_bytes(T, d)
    avail = need // 3
    with pytest.raises(MemoryError) as e:
        depth.check_trace_memory("attention", T, d, available=avail)
    m = re.fullmatch(r"tracing the attention at T=3000, d=64 needs about ([\d,]+) bytes "
                     r"\(([\d.]+) GiB\) but only ([\d.]+) GiB are available; use a smaller T or d",
                     str(e.value))
    assert m, str(e.value)
    stated = int(m[1].replace(",", ""))
    assert stated == need
    assert float(m[2]) == pytest.approx(stated / 1024**3, abs=0.005)
    assert float(m[3]) == pytest.approx(avail / 1024**3, abs=0.005)
    assert float(m[3]) < float(m[2])


@pytest.mark.parametrize("T, d, widths", [
    (4096, 16, {}),             # the loop's trace is the larger
    (64, 4, {"d_h": 4096})])    # a wide state: the scan's is
def test_a_family_name_checks_each_of_its_traced_forms_and_a_form_only_itself(T, d, widths):
    needs = {name: form.trace_memory_bytes(T, d, **widths)
             for name, (_, form) in models.traced_forms(("lru",)).items()}
    assert set(needs) == {"lru", "lru-scan"}
    big = max(needs, key=needs.get)
    between = (needs["lru"] + needs["lru-scan"]) // 2
    if big == "lru-scan":
        with pytest.raises(MemoryError, match="tracing the lru-scan at"):
            depth.check_trace_memory("lru-scan", T, d, available=between, **widths)
    else:
        depth.check_trace_memory("lru-scan", T, d, available=between, **widths)  # fits alone
    with pytest.raises(MemoryError, match=f"tracing the {big} at"):
        depth.check_trace_memory("lru", T, d, available=between, **widths)   # both forms
    depth.check_trace_memory("lru", T, d, available=needs[big], **widths)    # exactly enough
