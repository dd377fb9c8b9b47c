"""harness.analysis.roofline and ``harness roofline``: bytes and flops against brute counts,
the bound's min rule, the crossover and the caption against numbers computed apart, the CLI."""

from __future__ import annotations

import dataclasses
from collections import Counter, OrderedDict

import numpy as np
import pandas as pd
import pytest

from harness import cli, models
from harness.analysis import depth
from harness.analysis import roofline as R

# --------------------------------------------------------------------------- brute counts


def lru_traffic(stream, capacity):
    """{array: elements moved} between a fully associative LRU cache of ``capacity`` elements
    and the memory behind it, for a stream of ("r" | "w", (array, index)): every read that
    misses, and every element written (once: written back at the end; a write allocates
    without a read)."""
    cache, moved, written = OrderedDict(), Counter(), set()
    for op, key in stream:
        if key in cache:
            cache.move_to_end(key)
        else:
            moved[key[0]] += op == "r"
            cache[key] = True
            while len(cache) > capacity:
                cache.popitem(last=False)
        if op == "w" and key not in written:
            written.add(key)
            moved[key[0]] += 1
    return moved


def rnn_forward_stream(T, d, gates=1, states=1):
    """The element accesses of a step loop: the input GEMM's one pass over W_ih (gates d x d)
    and X, then at each step the matrix-vector product, row by row (W_hh[i, j] with h_(t-1)[j]),
    the other states of step t-1 read, and step t's states written."""
    for i in range(gates * d * d):
        yield "r", ("W_ih", i)
    for i in range(T * d):
        yield "r", ("X", i)
    for t in range(T):
        for i in range(gates * d):
            for j in range(d):
                yield "r", ("W_hh", i * d + j)
                if t:
                    yield "r", ("S0", (t - 1) * d + j)
        for k in range(1, states):
            for i in range(d):
                if t:
                    yield "r", (f"S{k}", (t - 1) * d + i)
        for k in range(states):
            for i in range(d):
                yield "w", (f"S{k}", t * d + i)


@pytest.mark.parametrize("family,gates,states", [("rnn", 1, 1), ("lstm", 4, 2), ("gru", 3, 1)])
@pytest.mark.parametrize("fits", [True, False])
def test_the_recurrences_forward_bytes_are_an_lru_caches_traffic(family, gates, states, fits):
    """W_hh fits in the resident cache: every element moves once, the whole traffic is the
    model's; it does not: an LRU cache streams W_hh in again at every step, the model's
    re-read. Both sides of the rule, against a simulated cache."""
    T, d, s = 9, 8, 8
    w_hh = gates * d * d
    capacity = w_hh + 8 * d if fits else w_hh - 1                # elements
    brute = lru_traffic(rnn_forward_stream(T, d, gates, states), capacity)
    model = R.kernel_bytes(family, "default", "forward", 1, T, d, s, resident=capacity * s)
    assert brute["W_hh"] * s == w_hh * s + model["reread"]
    assert brute["W_hh"] == (w_hh if fits else T * w_hh)
    if fits:
        assert sum(brute.values()) * s == model["bytes"]
    else:                    # the level is the one W_hh, read again each step, lives in
        assert model["working_set"] == w_hh * s


def _nbytes(x):
    if isinstance(x, np.ndarray):
        return x.nbytes
    if isinstance(x, (tuple, list)):
        return sum(_nbytes(v) for v in x)
    return 0


# bytes a forward keeps that it does not return (documented in the models' docstrings)
def _kept_inside(family, kernel, B, T, d, s):
    if family == "transformer":
        return (models.get("transformer").kernels.grid_elements(T, B) + 4 * B * T * d) * s
    if (family, kernel) == ("linear_attention", "parallel"):
        return B * T * T * s
    return 0


@pytest.mark.parametrize("family,kernel", list(R.KERNELS))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_forwards_bytes_once_are_its_arguments_and_results(family, kernel, dtype):
    """The forward's io is what the call reads and writes once: the arrays passed and
    returned (their nbytes), and what it keeps inside for the backward (the Transformer's
    grid and hidden, parallel linear attention's T x T)."""
    B, T, d = 2, 12, 8
    fam = models.get(family)
    X, W = fam.kernels.inputs(T, d, B, dtype, 0)
    out = fam.kernel(kernel).forward(X, *W)
    s = np.dtype(dtype).itemsize
    model = R.kernel_bytes(family, kernel, "forward", B, T, d, s, resident=1 << 40)
    assert model["io"] == _nbytes(X) + _nbytes(W) + _nbytes(out) + _kept_inside(
        family, kernel, B, T, d, s)
    assert model["reread"] == 0


def test_tiled_attention_reads_keys_and_values_again_per_query_tile_when_they_do_not_fit():
    from harness.kernels.attention import TILE_Q
    T, d, s = 3 * TILE_Q, 8, 8
    kv = 2 * T * d * s
    fits = R.kernel_bytes("attention", "tiled", "forward", 1, T, d, s, resident=kv)
    spills = R.kernel_bytes("attention", "tiled", "forward", 1, T, d, s, resident=kv - 1)
    assert fits["reread"] == 0 and spills["reread"] == 2 * kv
    assert spills["working_set"] == kv and fits["working_set"] == fits["io"]
    assert spills["io"] == fits["io"]


# --------------------------------------------------------------------------- flops

@pytest.mark.parametrize("family,kernel", list(R.KERNELS))
def test_a_kernels_flops_are_twice_the_traced_multiplications(family, kernel):
    T, d = 6, 8
    tr = depth.trace_model(R.KERNELS[family, kernel][1], T, d)
    real = R.REAL_MULTIPLICATIONS.get((family, kernel), {})
    traced = sum(n * real.get(part, 1) for part, n in tr.macs_by_part().items())
    assert R.kernel_flops(family, kernel, "forward", 1, T, d) == 2 * traced
    assert R.kernel_flops(family, kernel, "forward", 3, T, d) == 3 * 2 * traced
    assert R.kernel_flops(family, kernel, "backward", 1, T, d) == 2 * 2 * traced


def test_the_lrus_flops_count_its_complex_arithmetic_in_real_operations():
    # a brute count of the real operations of h_t = lam * h_(t-1) + B x_t, x real, lam and
    # B complex: B x_t is d_h d real-by-complex products (2 multiplications, 2 additions
    # each); lam * h is a complex product (4 multiplications, 2 additions), + u_t 2 additions
    T, d = 7, 5
    ops = 0
    for t in range(T):
        for i in range(d):
            for k in range(d):
                ops += 2 + 2                     # Re and Im of b_ik x_k, accumulated
            ops += 4 + 2 + 2                     # lam_i h_i, then + u_i
    assert R.kernel_flops("lru", "default", "forward", 1, T, d) == ops
    assert R.kernel_flops("lru", "default", "backward", 2, T, d) == 2 * 2 * ops


def rnn_backward_products(T, d):
    """Multiplications of a plain RNN backward, counted by walking its loops: per step,
    dX_t = W_xh^T da_t, dW_xh += da_t x_t^T, dW_hh += da_t h_(t-1)^T (none at t = 1, h_0 = 0),
    dh_(t-1) = W_hh^T da_t (none at t = 1); the elementwise tanh' products aside, as the
    forward's count sets its tanh aside."""
    count = 0
    for t in range(T):
        for i in range(d):
            for j in range(d):
                count += 1                       # dX_t
                count += 1                       # dW_xh
                if t:
                    count += 1                   # dW_hh
                    count += 1                   # dh_(t-1)
    return count


def test_the_backwards_count_is_twice_the_forwards_against_a_brute_count():
    T, d = 50, 4
    brute = 2 * rnn_backward_products(T, d)
    model = R.kernel_flops("rnn", "default", "backward", 1, T, d)
    assert model == 2 * R.kernel_flops("rnn", "default", "forward", 1, T, d)
    assert abs(model - brute) / brute <= 1 / T                   # the first step's two products


# --------------------------------------------------------------------------- bound

def test_the_bound_is_the_lower_roof_on_either_side_of_the_ridge():
    peak, bw = 40e9, 10e9                    # ridge at 4 flop / byte
    assert R.bound(1.0, peak, bw) == (10e9, "bandwidth")
    assert R.bound(100.0, peak, bw) == (40e9, "compute")
    assert R.bound(4.0, peak, bw) == (40e9, "compute")
    assert R.bound(3.999, peak, bw)[1] == "bandwidth"


def _ceilings(peak=20.0, bw=None):
    bw = bw or {"L1": 100.0, "L2": 50.0, "L3": 20.0, "memory": 5.0}
    rows = [dict(ceiling="gemm (NumPy)", dtype="float64", level="compute", value=peak / 2),
            dict(ceiling="FMA loop (Numba)", dtype="float64", level="compute", value=peak)]
    rows += [dict(ceiling="sum (read)", dtype="float64", level=lv, value=v) for lv, v in bw.items()]
    rows += [dict(ceiling="triad (a = b + s c)", dtype="float64", level=lv, value=v / 2)
             for lv, v in bw.items()]
    frame = pd.DataFrame(rows).assign(lo=lambda f: f.value * 0.9, hi=lambda f: f.value * 1.1,
                                      working_set_bytes=1, unit="GB/s", blas="")
    frame.attrs["caches"] = {"L1": 32 << 10, "L2": 512 << 10, "L3": 32 << 20}
    return frame


def test_a_placed_kernel_takes_the_level_its_working_set_fits_in():
    c = _ceilings()
    caches = c.attrs["caches"]
    small = R.place("rnn", "default", "forward", 1, 16, 8, "float64", 1e-3, 0.9e-3, 1.1e-3, c,
                    caches)
    assert small["level"] == "L1" and small["working_set_bytes"] <= caches["L1"]
    big = R.place("attention", "default", "forward", 1, 4096, 64, "float64", 1.0, 0.9, 1.1, c,
                  caches)
    assert big["level"] == "memory"                   # A alone is 128 MiB
    flops = R.kernel_flops("attention", "default", "forward", 1, 4096, 64)
    assert big["achieved"] == flops and big["achieved_lo"] == pytest.approx(flops / 1.1)
    assert big["bound"] == min(20e9, big["intensity"] * 5e9)
    assert big["fraction"] == pytest.approx(flops / big["bound"])


def test_the_levels_are_chosen_smallest_first():
    caches = {"L1": 10, "L2": 100, "L3": 1000}
    assert [R.level_of(n, caches) for n in (1, 10, 11, 100, 1000, 1001)] == \
        ["L1", "L1", "L2", "L2", "L3", "memory"]
    assert R.working_sets(caches, 8) == {"L1": 5, "L2": 50, "L3": 400, "memory": 8000}
    assert R.usable_caches(caches) == {"L1": 10, "L2": 100, "L3": 800}       # 8 x L2
    assert R.usable_caches({"L1": 1, "L2": 100, "L3": 300})["L3"] == 300


# --------------------------------------------------------------------------- caches

def test_cache_sizes_read_sysfs_then_lscpu_then_the_default(tmp_path):
    for i, (level, kind, size) in enumerate([(1, "Data", "48K"), (1, "Instruction", "32K"),
                                             (2, "Unified", "2048K"), (3, "Unified", "96M")]):
        p = tmp_path / "sys" / f"index{i}"
        p.mkdir(parents=True)
        (p / "level").write_text(f"{level}\n")
        (p / "type").write_text(f"{kind}\n")
        (p / "size").write_text(f"{size}\n")
    assert R.cache_sizes(tmp_path / "sys") == ({"L1": 48 << 10, "L2": 2 << 20, "L3": 96 << 20},
                                               "sysfs")
    lscpu = ("L1d cache:                               64 KiB (2 instances)\n"
             "L1i cache:                               64 KiB (2 instances)\n"
             "L2 cache:                                1 MiB (2 instances)\n"
             "L3 cache:                                32 MiB (1 instance)\n")
    assert R.cache_sizes(tmp_path / "none", lscpu) == (
        {"L1": 32 << 10, "L2": 512 << 10, "L3": 32 << 20}, "lscpu")
    assert R.cache_sizes(tmp_path / "none", "nothing here") == (R.DEFAULT_CACHES, "default")


# --------------------------------------------------------------------------- crossover

def _kernels_frame(step_s, rate, d, Ts=(128, 512, 2048)):
    """An RNN forward of ``step_s`` a step, attention's forward at ``rate`` flop/s at every T."""
    rows = [dict(family="rnn", kernel="default", direction="forward", batch=1, T=1000, d=d,
                 dtype="float64", seconds=1000 * step_s, flops=4 * 1000 * d * d, bound=1e10,
                 fraction=0.5)]
    rows += [dict(family="attention", kernel="default", direction="forward", batch=1, T=T, d=d,
                  dtype="float64", achieved=rate, seconds=1.0, flops=1, bound=1, fraction=1)
             for T in Ts]
    return pd.DataFrame(rows)


def test_the_predicted_crossover_solves_T_step_equal_to_attentions_time():
    d, step, rate = 64, 2e-6, 8e9
    p = R.predicted_crossover(_kernels_frame(step, rate, d), _ceilings(), d)
    # T step = 4 T^2 d / rate (grid and mix, 2 T^2 d multiplications, 2 flops each)
    assert p["predicted_T"] == pytest.approx(step * rate / (4 * d), rel=0.01)
    assert p["rnn_step_s"] == step
    assert p["rnn_step_read_s"] == pytest.approx(d * d * 8 / 100e9)     # 32 KiB: L1
    assert p["w_hh_level"] == "L1"
    # both at their bounds: the RNN's 4 d^2 flops a step at 1e10, attention at its own bound
    assert p["rnn_step_bound_s"] == pytest.approx(4 * d * d / 1e10)
    assert R.predicted_crossover(_kernels_frame(step, rate, d), _ceilings(), 32) == {}


def test_the_caption_states_numbers_computed_apart():
    from harness.report import captions
    c = _ceilings()
    k = pd.DataFrame([R.place("rnn", "default", direction, 1, T, d, "float64", sec, sec * 0.9,
                              sec * 1.1, c, c.attrs["caches"])
                      for direction, T, d, sec in [("forward", 1000, 64, 2e-3),
                                                   ("backward", 1000, 64, 3e-3),
                                                   ("forward", 1000, 512, 0.5)]])
    x = pd.DataFrame([dict(d=64, dtype="float64", counted_T=64.0, bound_T=70.0, predicted_T=300.0,
                           measured_T=250.0, measured_T_lo=200.0, measured_T_hi=320.0,
                           rnn_step_s=2e-6, rnn_step_bound_s=5e-7, rnn_step_read_s=1e-7,
                           w_hh_level="L1", rnn_fraction=0.25, rnn_T=1000, attention_T="128")])
    text = captions.caption_roofline({"ceilings": c, "roofline": k, "roofline_crossover": x})
    fractions = sorted(r["fraction"] for _, r in k.iterrows())
    n_compute = sum(1 for kind in k.bound_kind if kind.split(" ")[0] == "compute")
    assert f"median {fractions[1]:.0%}" in text
    assert f"{n_compute} are bound by compute and {3 - n_compute} by bandwidth" in text
    assert "float64 peaks at 20.0 GFLOP/s" in text and "200% of the faster GEMM" in text
    assert "100.0 GB/s in L1" in text and "5.0 GB/s in memory" in text
    assert "4.0× its roofline bound" in text and "T ≈ 300" in text and "T ≈ 250" in text


# --------------------------------------------------------------------------- CLI

TINY = dataclasses.replace(R.QUICK, gemm_n=64, min_sample_s=1e-3, crossover_T=(8, 16, 32, 64))


def test_the_cli_writes_every_file_with_documented_columns(tmp_path, monkeypatch, capsys):
    from test_data_dictionary import dictionary
    monkeypatch.setattr(R, "QUICK", TINY)
    monkeypatch.setattr(R, "cache_sizes", lambda *a, **k: ({"L1": 32 << 10, "L2": 256 << 10,
                                                            "L3": 1 << 20}, "sysfs"))
    out = tmp_path / "roof"
    assert cli.main(["roofline", "--quick", "--family", "rnn", "--d", "8", "--quiet",
                     "--out", str(out)]) == 0
    from harness.commands.roofline import FILES
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES)
    doc = dictionary()
    for name in ("ceilings.csv", "roofline.csv", "roofline_crossover.csv"):
        frame = pd.read_csv(out / name)
        assert len(frame)
        missing = [col for col in frame.columns if col not in doc.get(name, {})]
        assert not missing, f"{name}: {missing} not in docs/data.md"
    k = pd.read_csv(out / "roofline.csv")
    assert set(k.family) == {"rnn"} and set(k.direction) == {"forward", "backward"}
    assert (k.achieved_lo <= k.achieved).all() and (k.achieved <= k.achieved_hi).all()
    assert np.allclose(k.intensity, k.flops / k.bytes)
    c = pd.read_csv(out / "ceilings.csv")
    assert set(c.level) == {"compute", "L1", "L2", "L3", "memory"}
    assert set(c[c.level == "compute"].dtype) == {"float32", "float64"}
    x = pd.read_csv(out / "roofline_crossover.csv")
    assert list(x.d) == [8] and x.counted_T.iloc[0] == 8


@pytest.mark.parametrize("argv,flag", [
    (["--dtype", "float16"], "--dtype"), (["--family", "nosuch"], "--family"),
    (["--d", "0"], "--d"), (["--rounds", "2"], "--rounds"), (["--rounds", "x"], "--rounds")])
def test_bad_arguments_are_named(argv, flag, tmp_path, capsys):
    try:
        rc = cli.main(["roofline", *argv, "--out", str(tmp_path / "o")])
    except SystemExit as e:                   # argparse's own: not a whole number
        rc = e.code
    assert rc == 2
    assert flag in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_a_config_with_too_few_rounds_or_no_family_is_refused():
    with pytest.raises(ValueError, match="rounds"):
        R.check_config(dataclasses.replace(R.QUICK, rounds=2))
    with pytest.raises(ValueError, match="families"):
        R.check_config(dataclasses.replace(R.QUICK, families=()))
    with pytest.raises(ValueError, match="dtypes"):
        R.check_config(dataclasses.replace(R.QUICK, dtypes=("int8",)))


# --------------------------------------------------------------------------- the docs' tables

def _docs():
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "docs" / "_ext"))
    import harness_docs
    return root, harness_docs


def _table_rows(text):
    return [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines()
            if line.startswith("| ") and not line.startswith("| family |")
            and not line.startswith("| ceiling |") and not line.startswith("| d |")]


def test_the_docs_kernel_table_is_its_csv_with_each_fraction_recomputed():
    root, docs = _docs()
    d = pd.read_csv(root / "docs" / "roofline.csv")
    rows = _table_rows(docs.render("roofline_kernels"))
    assert len(rows) == len(d)
    for cells, r in zip(rows, d.itertuples()):
        assert cells[:3] == [r.family, r.kernel, r.direction]
        assert cells[-1] == f"{r.achieved / r.bound:.0%}"            # fraction, recomputed
        assert float(cells[7]) == pytest.approx(r.flops / r.bytes, abs=0.005)
        assert float(cells[8]) == pytest.approx(r.bound / 1e9, abs=0.05)


def test_the_docs_ceiling_and_crossover_tables_are_their_csvs():
    root, docs = _docs()
    c = pd.read_csv(root / "docs" / "ceilings.csv", keep_default_na=False)
    rows = _table_rows(docs.render("roofline_ceilings"))
    assert [r[0] for r in rows] == list(c.ceiling)
    assert [float(r[4].split()[0]) for r in rows] == [round(v, 1) for v in c.value]
    x = pd.read_csv(root / "docs" / "roofline_crossover.csv")
    rows = _table_rows(docs.render("roofline_crossover"))
    assert [int(r[0]) for r in rows] == list(x.d) and [float(r[1]) for r in rows] == list(x.d)
    # the page's bound column: the kernels' peaks and bandwidths, from the committed ceilings
    k = pd.read_csv(root / "docs" / "roofline.csv")
    peak = {dt: g.value.max() * 1e9 for dt, g in c[c.level == "compute"].groupby("dtype")}
    bw = {lv: g.value.max() * 1e9 for lv, g in c[c.level != "compute"].groupby("level")}
    recomputed = [min(peak[r.dtype], r.intensity * bw[r.level]) for r in k.itertuples()]
    assert np.allclose(k.bound, recomputed, rtol=1e-12)


def test_rows_placed_again_keep_their_timings_and_follow_the_ceilings():
    c = _ceilings()
    k = pd.DataFrame([R.place("rnn", "default", "forward", 1, 1000, 64, "float64", 2e-3,
                              1.8e-3, 2.2e-3, c, c.attrs["caches"])]).assign(rounds=7, threads=1)
    slower = _ceilings(peak=10.0)
    slower.attrs["caches"] = c.attrs["caches"]
    again = R.replace_on(k, slower)
    assert list(again.columns) == list(k.columns) and again.seconds[0] == 2e-3
    assert again.bound[0] == pytest.approx(k.bound[0] / 2) and again.fraction[0] == \
        pytest.approx(2 * k.fraction[0])


# --------------------------------------------------------------------------- the figure

def _two_dtype_frames():
    """Ceilings in both dtypes (float64 two GEMMs, the faster first, and the FMA loop; float32
    the FMA loop alone) and kernels of three families, both directions, with intervals of
    unequal sides, one row's hi below its median and one's lo above it (those sides of the bar
    clip at zero length), the smallest intensity below 0.05 x 4 (where the x range starts)."""
    c64 = _ceilings()
    extra = c64[c64.ceiling.str.startswith("gemm")].assign(ceiling="gemm (Numba)", value=12.0)
    c32 = _ceilings(peak=60.0).assign(dtype="float32")
    c32 = c32[~c32.ceiling.str.startswith("gemm")]            # the FMA loop alone: no GEMM
    c = pd.concat([c32, c64, extra], ignore_index=True)
    rows = []
    for i, (fam, direction, dtype) in enumerate([("rnn", "forward", "float32"),
                                                ("rnn", "backward", "float32"),
                                                ("attention", "forward", "float32"),
                                                ("lstm", "backward", "float64"),
                                                ("attention", "forward", "float64")]):
        ach = (i + 1) * 1.5e9
        rows.append(dict(family=fam, kernel="default", direction=direction, dtype=dtype,
                         intensity=0.01 * 6 ** i, achieved=ach,
                         achieved_lo=ach * (0.8 - 0.05 * i) if i != 3 else ach * 1.05,
                         achieved_hi=ach * (1.1 + 0.1 * i) if i != 2 else ach * 0.9))
    return c, pd.DataFrame(rows)


def test_the_roofline_figure_draws_every_kernel_its_interval_and_each_ceiling():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.colors as mcolors
    import seaborn as sns
    from matplotlib.collections import LineCollection, PathCollection
    from matplotlib.transforms import Bbox, TransformedBbox
    from harness.report import figures
    c, k = _two_dtype_frames()
    fig = figures.figure_roofline({"ceilings": c, "roofline": k})
    try:
        axes = dict(zip(("float32", "float64"), fig.axes))
        assert len(fig.axes) == 2
        width, height = fig.get_size_inches()      # two 4 x 5 in panels, the legend beside
        assert height == pytest.approx(4.0) and 2 * 4.0 * 1.25 <= width < 2 * 4.0 * 1.25 + 2
        xs = np.geomspace(max(min(k.intensity.min() / 4, 0.05), 1e-3), k.intensity.max() * 4, 200)
        for dtype, ax in axes.items():
            rows = k[k.dtype == dtype]
            assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
            assert dtype in ax.get_title()
            assert ax.get_xlabel() == "arithmetic intensity (flop / byte)"
            assert ax.get_ylabel() in ("GFLOP/s", "")           # the left panel's only
            # every kernel a point at (intensity, GFLOP/s), size 45
            pts = np.vstack([p.get_offsets() for p in ax.collections
                             if isinstance(p, PathCollection) and len(p.get_offsets())])
            want = np.column_stack([rows.intensity, rows.achieved / 1e9])
            np.testing.assert_allclose(sorted(map(tuple, pts)), sorted(map(tuple, want)),
                                       rtol=1e-13)
            sizes = {float(s) for p in ax.collections if isinstance(p, PathCollection)
                     for s in p.get_sizes()}
            assert sizes == {45.0}
            # each interval a vertical bar from achieved_lo to max(achieved_hi, achieved)
            bars = [seg for lc in ax.collections if isinstance(lc, LineCollection)
                    for seg in lc.get_segments()]
            got = sorted((float(s[0][0]), float(s[0][1]), float(s[1][1])) for s in bars)
            exp = sorted((r.intensity, min(r.achieved_lo, r.achieved) / 1e9,
                          max(r.achieved_hi, r.achieved) / 1e9) for r in rows.itertuples())
            np.testing.assert_allclose(got, exp, rtol=1e-13)
            bar, = ax.containers                              # one errorbar call: bars, caps, no line
            assert bar.lines[0] is None and bar.has_yerr and not bar.has_xerr
            assert {c.get_markersize() for c in bar.lines[1]} == {4.0}     # capsize 2
            lc = next(lc for lc in ax.collections if isinstance(lc, LineCollection))
            assert lc.get_linewidth()[0] == pytest.approx(0.8)
            assert tuple(lc.get_color()[0][:3]) == pytest.approx((0.45,) * 3)
            assert lc.get_zorder() == 1
            # the ceilings: the faster GEMM and the FMA loop flat; each level's best bandwidth
            # (the read sum, not the triad at half) a diagonal up to the peak
            # float64: 20 (FMA), 10 and 12 (GEMMs); float32: 60 (FMA) alone
            flat = ([("gemm (Numba)", 12.0, "--"), ("FMA loop (Numba)", 20.0, "-")]
                    if dtype == "float64" else [("FMA loop (Numba)", 60.0, "--")])
            top = 20.0 if dtype == "float64" else 60.0
            leg = ax.get_legend()
            labels = [t.get_text() for t in leg.get_texts()]
            bw = {"L1": 100.0, "L2": 50.0, "L3": 20.0, "memory": 5.0}
            assert labels == ([f"{name}: {v:.1f} GFLOP/s" for name, v, _ in flat]
                              + [f"{lv}: {v:.1f} GB/s" for lv, v in bw.items()])
            drawn = {ln.get_label(): ln for ln in ax.get_lines()}
            handles = [drawn[t] for t in labels]
            for h, (_, v, ls) in zip(handles, flat):
                assert tuple(h.get_ydata()) == (v, v) and h.get_linestyle() == ls
                assert h.get_color() == "k" and h.get_linewidth() == pytest.approx(0.9)
            crest = sns.color_palette("crest", 4)
            for h, (lv, v), colour in zip(handles[len(flat):], bw.items(), crest):
                np.testing.assert_allclose(h.get_xdata(), xs, rtol=1e-13)
                np.testing.assert_allclose(h.get_ydata(), np.minimum(v * xs, top), rtol=1e-13)
                assert h.get_linewidth() == pytest.approx(1.0)
                assert mcolors.same_color(h.get_color(), colour)
            anchor = TransformedBbox(Bbox.from_bounds(0, -0.16, 0, 0), ax.transAxes).bounds
            assert leg._loc == 2 and leg.get_bbox_to_anchor().bounds == pytest.approx(anchor)
            assert leg.get_title().get_text() == "ceilings" and not leg.get_frame_on()
            assert leg._ncols == 2 and leg.get_texts()[0].get_fontsize() == pytest.approx(6.5)
            assert leg.get_title().get_fontsize() == pytest.approx(7)
        # one marker per direction, one colour per family, the same in both panels
        legend = {t.get_text() for t in fig.legends[0].get_texts()}
        assert {"rnn", "attention", "lstm", "forward", "backward"} <= legend
        assert axes["float32"].get_shared_y_axes().joined(axes["float32"], axes["float64"])
        plt.close(fig)
        fig = figures.figure_roofline({"ceilings": c, "roofline": k.assign(intensity=k.intensity + 1)})
        flat = [ln for ln in fig.axes[0].get_lines() if ln.get_label().startswith("L1")]
        assert flat[0].get_xdata()[0] == pytest.approx(0.05)     # every kernel above 0.2: 0.05
    finally:
        plt.close("all")


def test_the_caption_reads_whole_as_worked_out_by_hand():
    """Every clause of the roofline caption, its numbers worked out by hand: a dtype with a GEMM
    alone (no FMA clause), a non-default kernel's name, a crossover row without a step time
    (left out, and the rows after it kept), one with no crossing and nothing measured (its step
    a hair below 1.235 us, so that the microseconds' rounding shows a wrong scale), one with
    a measured crossing and its interval, one measured without an interval."""
    from harness.report import captions
    c = pd.concat([_ceilings(), pd.DataFrame([dict(
        ceiling="gemm (NumPy)", dtype="float32", level="compute", value=30.0, lo=27.0, hi=33.0,
        working_set_bytes=1, unit="GFLOP/s", blas="")])], ignore_index=True)
    k = pd.DataFrame([
        dict(family="rnn", kernel="default", direction="forward", T=1000, d=64, dtype="float64",
             fraction=0.25, bound_kind="compute"),
        dict(family="attention", kernel="tiled", direction="backward", T=4096, d=64,
             dtype="float32", fraction=0.8, bound_kind="bandwidth (L2)"),
        dict(family="lstm", kernel="default", direction="forward", T=1000, d=256,
             dtype="float64", fraction=0.5, bound_kind="compute")])
    nan = float("nan")
    x = pd.DataFrame([
        dict(d=32, rnn_step_s=nan, rnn_step_bound_s=nan, predicted_T=nan, bound_T=nan,
             counted_T=32.0, measured_T=nan, measured_T_lo=nan, measured_T_hi=nan),
        dict(d=64, rnn_step_s=1.2349995e-6, rnn_step_bound_s=5e-7, predicted_T=nan, bound_T=70.0,
             counted_T=64.0, measured_T=nan, measured_T_lo=nan, measured_T_hi=nan),
        dict(d=256, rnn_step_s=1.5e-5, rnn_step_bound_s=5e-6, predicted_T=1234.4, bound_T=300.0,
             counted_T=256.0, measured_T=1500.0, measured_T_lo=1200.0, measured_T_hi=2100.0),
        dict(d=512, rnn_step_s=1e-4, rnn_step_bound_s=2.5e-5, predicted_T=5000.0, bound_T=800.0,
             counted_T=512.0, measured_T=900.0, measured_T_lo=nan, measured_T_hi=nan)]
    ).assign(w_hh_level="L1")          # a text column, as written: d stays an integer
    text = captions.caption_roofline({"ceilings": c, "roofline": k, "roofline_crossover": x})
    tail = ("(each step waits for the last); from the two kernels' achieved rates attention's "
            "grid and mix overtake it at ")
    assert text == (
        "On one thread, float32 peaks at 30.0 GFLOP/s (gemm (NumPy), 95 % interval 27.0–33.0); "
        "float64 peaks at 20.0 GFLOP/s (FMA loop (Numba), 95 % interval 18.0–22.0); the FMA loop "
        "20.0, 200% of the faster GEMM. Bandwidth (the better of the read-only sum and the "
        "triad) is 100.0 GB/s in L1, 50.0 GB/s in L2, 20.0 GB/s in L3, 5.0 GB/s in memory."
        " Of 3 kernel timings, 2 are bound by compute and 1 by bandwidth; they reach a median "
        "50% of their bound, from 25% (rnn forward, T = 1000, d = 64, float64) to 80% "
        "(attention tiled backward, T = 4096, d = 64, float32)."
        " At d = 64 the RNN's step takes 1.23 µs, 2.5× its roofline bound " + tail +
        "no crossing, with both at their bounds at T ≈ 70 (counted: T = 64); not bracketed by "
        "the measured lengths."
        " At d = 256 the RNN's step takes 15.00 µs, 3.0× its roofline bound " + tail +
        "T ≈ 1,234, with both at their bounds at T ≈ 300 (counted: T = 256); measured at "
        "T ≈ 1,500 (95 % interval 1,200–2,100)."
        " At d = 512 the RNN's step takes 100.00 µs, 4.0× its roofline bound " + tail +
        "T ≈ 5,000, with both at their bounds at T ≈ 800 (counted: T = 512); measured at "
        "T ≈ 900.")
