"""harness report --quick: a complete, self-consistent, offline folder."""

from __future__ import annotations

import dataclasses
import html
import math
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from _deps import require_executable
from harness import cli, report
from harness.analysis import depth, roofline
from harness.infra.config import QUICK_REPORT
from harness.report import captions, figures, history

ROOT = Path(__file__).resolve().parents[1]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# the quick report, smaller where it only costs time: fewer timed lengths, draws and path lengths
TEST = dataclasses.replace(
    QUICK_REPORT, wall=dataclasses.replace(QUICK_REPORT.wall, T_values=(32, 64, 128, 256, 512),
                                          rounds=5),
    path_T=(64, 256), lessons=dataclasses.replace(QUICK_REPORT.lessons, draws=400),
    memory=dataclasses.replace(QUICK_REPORT.memory, T_values=(1024, 4096)))
# ... and its roofline section on two families, a smaller GEMM, memory at 2 x L3 and shorter
# samples (the report's own config carries it: harness.report.build.roofline_config; the
# section's full run is tests/test_roofline.py's)
object.__setattr__(TEST, "roofline", dataclasses.replace(
    roofline.QUICK, families=("rnn", "attention"), gemm_n=256, min_sample_s=0.001,
    memory_multiple=2, crossover_T=(16, 32, 64, 128)))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("rep") / "report"
    cfg = TEST
    report.build_report(out, cfg, command="harness report --quick --out <x> & 'y'")
    return out


def _html(out):
    return (out / "index.html").read_text(encoding="utf-8")


def _sections(page):
    """(key, caption, csv names) for every section of index.html."""
    found = []
    for m in re.finditer(r'<section id="([^"]+)">(.*?)</section>', page, re.S):
        key, body = m.group(1), m.group(2)
        cap = re.search(r'<p class="caption" data-section="[^"]+">(.*?)</p>', body, re.S).group(1)
        csvs = re.findall(r'href="([^"]+)\.csv"', body)
        # the page writes 10^x as 10<sup>x</sup> (a minus as −): read it back as the caption's text
        cap = re.sub(r"10<sup>([+−]?)([\d.]+)</sup>",
                     lambda p: "10^" + p.group(1).replace("−", "-") + p.group(2), cap)
        found.append((key, html.unescape(cap), csvs))
    return found


def test_index_and_every_section(built):
    page = _html(built)
    keys = [k for k, _, _ in _sections(page)]
    for k in ("decay", "clipping", "depth", "schedule", "work", "wall", "maps", "additive",
              "linear"):
        assert k in keys
    assert "Machine, versions and command" in page
    # the Table-1 view of the depth analyser
    assert "max_path" in page and "parallelism" in page


def test_every_image_exists_and_is_valid(built):
    page = _html(built)
    srcs = re.findall(r'<img src="([^"]+)"', page)
    assert len(srcs) >= 9
    for src in srcs:
        data = (built / src).read_bytes()
        assert data.startswith(PNG_MAGIC), src
    svgs = re.findall(r'href="([^"]+\.svg)"', page)
    assert len(svgs) == len(srcs)
    for name in svgs:
        root = ET.parse(built / name).getroot()
        assert root.tag.endswith("svg"), name


def test_every_csv_loads(built):
    for path in built.glob("*.csv"):
        frame = pd.read_csv(path)
        assert len(frame) > 0, path.name


def _expected_in_captions(out):
    """What each caption must state, computed from the CSV columns directly or from closed
    forms, never by the caption functions: {section: [substrings]}."""
    def csv(name):
        return pd.read_csv(out / f"{name}.csv")

    def p10(x):
        return f"10^{x:+.1f}"

    d, s = csv("decay"), csv("decay_summary")
    K = int(d.distance.max())
    tanh = d.query("model == 'rnn' and weight == 'orthogonal' and input_scale == 1.0 and "
                   "activation == 'tanh' and rho == 0.9 and distance == @K").log10_norm.iloc[0]
    att = d.query("model == 'attention' and input_scale == 1.0")
    near = att[att.distance <= K / 4].log10_norm.to_numpy().mean()
    far = att[att.distance > 3 * K / 4].log10_norm.to_numpy().mean()
    tanh_rows = s.query("model == 'rnn' and activation == 'tanh'")
    c = csv("clipping").set_index("rho")
    routes = csv("additive_routes").set_index("va_scale")
    rm = csv("row_max").set_index(["d_k", "scaled"]).row_max
    diag = csv("attention_diagonal")
    w = csv("wall_times")
    m = csv("peak_memory")
    top = m[m["T"] == m["T"].max()].set_index("model").peak_bytes
    pairs = {k: g.sort_values("T").tail(2) for k, g in m.groupby("model")}
    slope = {k: np.polyfit(np.log(g["T"]), np.log(g.peak_bytes), 1)[0] if (g.peak_bytes > 0).all()
             else None for k, g in pairs.items()}
    return {
        "memory": [f"{k} {v / 2**20:.1f} MiB" + (f" (T^{slope[k]:.2f})" if slope[k] is not None else "")
                   for k, v in top.items()]
                  + [f"{top.idxmax()} needs {top.max() / top.min():.0f} times what {top.idxmin()} needs"],
        "decay": [f"is {p10(K * math.log10(0.9))} through the linear RNN",  # k log10 rho exactly
                  f"and {p10(tanh)} through tanh", f"averages {p10(near)} over the nearest",
                  f"and {p10(far)} over the farthest",
                  f"respected by {int(tanh_rows.bound_respected.sum())} of {len(tanh_rows)}"],
        "clipping": [f"ρ = {c.index.max():g}", p10(c.loc[c.index.max(), "log10_total_before"]),
                     p10(c.loc[c.index.max(), "log10_far_over_near_after"]),
                     p10(c.loc[c.index.min(), "log10_far_over_near_after"])],
        "additive": [f"{routes.loc[0.5, 'value_norm']:.4f} against {routes.loc[0.5, 'score_norm']:.4f}",
                     "2.8303 against 0.2556"],                   # the lesson's printed figures
        "maps": [f"{rm.loc[(8, False)]:.3f} at d_k = 8", f"{rm.loc[(512, False)]:.3f} at d_k = 512",
                 f"{int(diag.rows_max_on_diagonal.iloc[0])} of {int(diag.rows.iloc[0])} rows"],
        "wall": [f"{np.median(w[w.model == 'rnn'].seconds.to_numpy() / w[w.model == 'rnn']['T'].to_numpy()) * 1e6:.1f} µs per step"],
        "linear": _expected_linear(csv),
    }


def _expected_linear(csv):
    """The linear section's caption: the worst agreement, and each algorithm's span, peak
    memory and time at the largest T, read off the CSVs by name."""
    lm, dp, m, w = csv("linear_methods"), csv("depth"), csv("peak_memory"), csv("wall_times")
    forms = {"linear_attention": "recurrent", "linear_attention-parallel": "parallel",
             "linear_attention-chunked": "chunked"}
    span = dp[dp.model.isin(forms) & (dp["T"] == dp["T"].max())].set_index("model").span
    m = m[m.model.isin(forms)].dropna(subset=["peak_bytes"])
    mem = m[m["T"] == m["T"].max()].set_index("model").peak_bytes
    w = w[w.model.isin(forms)]
    sec = w[w["T"] == w["T"].max()].set_index("model").seconds
    return ([f"agree to {(lm.max_abs_diff / lm.max_abs_output).max():.1e} of max |y|",
             ", ".join(f"{forms[f]} {int(span[f]):,}" for f in forms) + " operations"]
            + [f"{forms[f]} {mem[f] / 2**20:.1f} MiB" for f in forms]
            + [f"{forms[f]} {sec[f] * 1e3:,.1f} ms" for f in forms])


def test_captions_state_numbers_computed_another_way(built):
    caps = dict((k, c) for k, c, _ in _sections(_html(built)))
    for key, needles in _expected_in_captions(built).items():
        for needle in needles:
            assert needle in caps[key], (key, needle, caps[key])


def test_decay_caption_reads_the_rows_its_sentence_names(built, tmp_path):
    """Swap the rho = 0.9 and rho = 1.0 rows: a caption that reads the wrong row stops matching."""
    import shutil
    for f in built.glob("*.csv"):
        shutil.copy(f, tmp_path / f.name)
    d = pd.read_csv(tmp_path / "decay.csv")
    d.loc[d.rho == 1.0, "log10_norm"] += 7.0               # a change the rho = 0.9 sentence must ignore
    d.to_csv(tmp_path / "decay.csv", index=False)
    cap = captions.caption_decay({"decay": d, "decay_summary": pd.read_csv(tmp_path / "decay_summary.csv")})
    K = int(d.distance.max())
    assert f"is 10^{K * math.log10(0.9):+.1f} through the linear RNN" in cap


def test_caption_numbers_are_the_data(built):
    decay = pd.read_csv(built / "decay.csv")
    row = decay[(decay.model == "rnn") & (decay.activation == "identity") & (decay.rho == 0.9)
                & (decay.weight == "orthogonal") & (decay.input_scale == 1.0)
                & (decay.distance == 1000)]
    cap = dict((k, c) for k, c, _ in _sections(_html(built)))["decay"]
    assert f"10^{row.log10_norm.iloc[0]:+.1f}" in cap
    assert abs(row.log10_norm.iloc[0] - 1000 * -0.045757490560675115) < 1e-9
    routes = pd.read_csv(built / "additive_routes.csv")
    base = routes[routes.va_scale == 0.5].iloc[0]
    assert round(base.value_norm, 4) == 2.8303 and round(base.score_norm, 4) == 0.2556


def test_offline_and_escaped(built):
    page = _html(built)
    assert not re.search(r'(src|href)="(https?:)?//', page)
    assert "<x>" not in page and "&lt;x&gt;" in page      # the command line is escaped
    assert "&amp; &#x27;y&#x27;" in page


def test_nothing_half_written_on_failure(tmp_path, monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("interrupted")

    monkeypatch.setattr(depth, "depth_table", boom)
    out = tmp_path / "rep"
    with pytest.raises(RuntimeError):
        report.build_report(out, TEST)
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []          # no staging folder left behind


def test_cli_refuses_a_nonempty_out(tmp_path, capsys):
    (tmp_path / "old.txt").write_text("x")
    assert cli.main(["report", "--quick", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--out" in err and "not an empty directory" in err


def test_cli_refuses_an_unwritable_out(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")                        # a file where a parent folder should be
    assert cli.main(["report", "--quick", "--out", str(blocker / "rep")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--out" in err


def test_cli_refuses_an_unwritable_out_before_compiling(tmp_path):
    """With Numba's cache cold, the kernels compile first thing; the refusal comes before
    that, as the one line it is (a fresh process, an empty cache folder)."""
    import os
    blocker = tmp_path / "file"
    blocker.write_text("x")
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cold-cache"), PYTHONPATH=str(root))
    r = subprocess.run([sys.executable, "-m", "harness", "report", "--quick", "--out",
                        str(blocker / "rep")], capture_output=True, text=True, env=env,
                       cwd=root, timeout=900)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("harness report: error: --out:"), \
        r.stderr


def test_cli_refuses_a_parent_it_may_not_write_in(tmp_path, capsys, monkeypatch):
    """As a user other than root, an existing parent without write permission fails at the
    lock file: that is --out's usage error too, naming the parent (simulated: CI runs as root)."""
    import os
    real_open = os.open

    def refuse(path, *a, **k):
        if str(path).endswith(".lock"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *a, **k)

    monkeypatch.setattr(os, "open", refuse)
    assert cli.main(["report", "--quick", "--out", str(tmp_path / "rep")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"harness report: error: --out: cannot write in {str(tmp_path)!r}: "
                   f"Permission denied")
    assert list(tmp_path.iterdir()) == []


def test_help_has_examples():
    for argv in (["--help"], ["report", "--help"], ["decay", "--help"], ["depth", "--help"],
                 ["compare", "--help"]):
        r = subprocess.run([sys.executable, "-m", "harness", *argv], capture_output=True, text=True)
        assert r.returncode == 0, argv
        assert "example" in r.stdout, argv


def _fake_asv_results(root):
    machine = root / "box"
    machine.mkdir(parents=True)
    (machine / "machine.json").write_text("{}")
    params = '[["\'rnn\'", "\'attention\'"], ["64", "256"], ["256"], ["1"], ["\'float64\'"]]'
    for i, (commit, scale, last) in enumerate((("abcdef1234", 1.0, "null"),
                                               ("bcdef12345", 0.5, "4.0"))):
        (machine / f"{commit[:8]}-virtualenv-py3.11.json").write_text(
            f'{{"commit_hash": "{commit}", "date": {1700000000000 + i}, "params": {{}},'
            ' "result_columns": ["result", "params"],'
            f' "results": {{"bench_kernels.Kernels.time_forward": [[{scale}, {2 * scale}, 3.0, {last}],'
            f' {params}], "bench_kernels.Kernels.track_x": [[3.0], [["64"]]],'
            ' "bench_analysers.DecaySweep.time_decay_sweep": [[0.5], [], "v"]}}')
    return root


def test_asv_history_is_read(tmp_path):
    h = history.read_asv_results(str(_fake_asv_results(tmp_path / "results")))
    assert set(h.benchmark) == {"bench_kernels.Kernels.time_forward",
                                "bench_analysers.DecaySweep.time_decay_sweep"}   # no track_
    k = history.kernel_history(h)
    assert list(k.commit.unique()) == ["abcdef12", "bcdef123"]       # oldest first
    first = k[k.commit == "abcdef12"].set_index(["series", "T"]).seconds
    assert first[("rnn forward", 64)] == 1.0 and first[("rnn forward", 256)] == 2.0
    assert first[("attention forward", 64)] == 3.0 and ("attention forward", 256) not in first
    cap = captions.caption_history({"asv_history": k})
    assert "across 2 commits" in cap
    assert "RNN's forward takes 1000.00 ms and attention's 4000.00 ms" in cap     # newest, T = 256
    figures.figure_history({"asv_history": k})


CHROMIUM = ("chromium", "chromium-browser", "google-chrome")


def test_renders_in_headless_chromium_without_broken_images(built, tmp_path):
    chromium = require_executable(CHROMIUM, "apt-get install chromium (.ci/run installs it)")
    r = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}",
         "--virtual-time-budget=10000", "--dump-dom", (built / "index.html").as_uri()],
        capture_output=True, text=True, timeout=120)
    m = re.search(r'data-broken-images="(\d+)"', r.stdout)
    assert m, r.stderr[-2000:]
    assert m.group(1) == "0"


def _caption(out, key):
    return dict((k, c) for k, c, _ in _sections(_html(out)))[key]


def test_depth_and_schedule_captions_state_the_closed_forms(built):
    """The numbers in the captions, against closed forms derived by hand, not from the CSVs."""
    cfg = TEST
    T0, T1, d = min(cfg.depth.T_values), max(cfg.depth.T_values), cfg.depth.d

    def lg(n):                                                      # ceil(log2 n)
        return (n - 1).bit_length()

    cap = _caption(built, "depth")
    assert f"from {3 * T0} to {3 * T1} operations" in cap           # RNN: 3 ops per step
    assert "span stays 9 operations and its path 2" in cap          # attention: constant
    # attention's scalar span 7 + 2 ceil(log2 d) + 3 ceil(log2 T): log T + log d
    assert f"from {7 + 2 * lg(d) + 3 * lg(T0)} to {7 + 2 * lg(d) + 3 * lg(T1)}" in cap
    T, ds = cfg.schedule.T_values[0], cfg.schedule_d
    cap = _caption(built, "schedule")
    assert f"span of {T * (lg(ds) + 3):,}" in cap                   # RNN, scalar tasks
    assert f"floor of {T * (ds + 2):,} steps" in cap                # RNN, element tasks
    assert f"its span, {7 + 2 * lg(ds) + 3 * lg(T)}, is not constant" in cap   # attention, scalar tasks


def test_work_caption_crossover_is_at_d(built):
    cap = _caption(built, "work")
    d = QUICK_REPORT.depth.d
    assert f"cross at T = {d:,} (d = {d})" in cap
    x = pd.read_csv(built / "crossover.csv")
    assert int(x[x.variant == "attention"].d.iloc[0]) == d          # timed at the counted d


def test_report_files_are_readable_by_others(built):
    from harness.infra.files import umask
    mask = umask()
    assert built.stat().st_mode & 0o777 == 0o777 & ~mask      # not mkdtemp's 0700
    for path in built.iterdir():
        assert path.stat().st_mode & 0o777 == 0o666 & ~mask, path.name


def test_linear_attentions_claims_are_judged_on_the_reports_own_frames(built):
    from harness.analysis import claims
    t = pd.read_csv(built / "claims.csv").set_index("claim")
    for fn in (claims.linear_recurrence_or_parallel, claims.selective_gate_depends_on_input):
        assert t.loc[fn.text, "verdict"] == claims.HOLDS, t.loc[fn.text, "measured"]
    lm = pd.read_csv(built / "linear_methods.csv")
    assert t.loc[claims.linear_recurrence_or_parallel.text, "value"] == pytest.approx(
        (lm.max_abs_diff / lm.max_abs_output).max())


def test_the_first_section_is_the_claims_table(built):
    from harness.analysis import claims
    secs = _sections(_html(built))
    assert secs[0][0] == "claims" and secs[0][2] == ["claims"]
    t = pd.read_csv(built / "claims.csv")
    # a claim the lessons make but no measurement can settle is a row that says why (#24)
    assert len(t) == len(claims.CLAIMS) and set(t.verdict) <= {*claims.VERDICTS, claims.NOT_MEASURED}
    assert t[t.verdict == claims.NOT_MEASURED].measured.str.startswith("not measured: ").all()
    counts = t.verdict.value_counts()
    for v in (*claims.VERDICTS, claims.NOT_MEASURED):   # the caption's counts are the table's
        assert f"{int(counts.get(v, 0))} {v}" in secs[0][1]
    page = _html(built)
    assert page.index('id="claims"') < page.index('id="decay"')


def test_machine_json_holds_the_noise_floor(built):
    import json
    meta = json.loads((built / "machine.json").read_text())
    rates = pd.read_csv(built / "rates.csv").iloc[0]
    assert meta["noise_floor"] == pytest.approx(rates.noise_floor)
    assert meta["noise_ratio_lo"] <= meta["noise_ratio"] <= meta["noise_ratio_hi"]
    assert meta["noise_floor"] >= abs(meta["noise_ratio"] - 1)


def test_every_report_column_is_documented(built):
    from test_data_dictionary import check_folder
    names = check_folder(built)
    assert (built / "data.md").read_text() == (ROOT / "docs" / "data.md").read_text()
    assert 'href="data.md"' in _html(built)
    assert {"claims.csv", "decay.csv", "wall_times.csv", "rates.csv", "row_max.csv"} <= names
