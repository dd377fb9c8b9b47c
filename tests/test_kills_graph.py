"""The traced graph, its task graph and schedule, and the all-or-nothing file output.

Written against mutants of ``harness.analysis.trace``, ``harness.analysis.schedule``, ``harness.analysis.depth``
and ``harness.infra.files`` that survived the other tests. Each expected value is worked out
by hand from a tiny graph (levels, edges, bottom levels, span), from a closed form
(ceil(log2 n) as a bit length), or from what a plain ndarray does with the same
indexing, so that a changed axis, dtype, label or comparison makes a test fail.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.kernels import greedy as _greedy
from harness.infra import signals as _interrupt, files as _io
from harness.analysis import depth, schedule, trace
from harness.models import RECURRENCE

# ============================================================================ trace

def test_clog2_is_the_depth_of_the_halving_tree():
    # ceil(log2 n) = bit length of n - 1 for n >= 1; no tree (0 levels) over 0 or 1 leaves
    for n in range(70):
        want = (n - 1).bit_length() if n >= 1 else 0
        assert trace.clog2(n) == want == len(trace.tree_levels(n)), n


def test_every_traced_element_costs_bytes_per_element():
    """dist float32 + sdepth int32 = BYTES_PER_ELEMENT, which the memory estimates use:
    for leaves, and for stacks and concatenations that mix in plain arrays."""
    g = trace.Graph()
    X = trace.leaf(g, "X", (3, 2), ("T", "d_model"), source_row=0)
    plain = np.zeros((3, 2))
    values = [X, X[1], X.T, np.concatenate([X, plain]), np.concatenate([plain, X], axis=1),
              np.stack([X, plain]), np.exp(X) + plain]
    for v in values:
        assert v.dist.dtype == np.float32 and v.sdepth.dtype == np.int32, v
        assert v.dist.itemsize + v.sdepth.itemsize == trace.BYTES_PER_ELEMENT
    # a traced array reports the dtype of the ndarray it stands for
    assert X.dtype == np.float64 and X.dtype.type(0.5) == 0.5
    assert trace.Traced(g, (2,), [], np.zeros(2, np.float32), np.zeros(2, np.int32), ("?",),
                        dtype="float32").dtype == np.float32


def test_stack_and_concatenate_follow_numpy_axes_and_union_lineage():
    g = trace.Graph()
    X = trace.leaf(g, "X", (2, 3), ("T", "d_model"), source_row=0)
    a, b = np.exp(X), np.tanh(X)                 # two ops: scalar depth 1 each
    ref_a, ref_b = np.zeros((2, 3)), np.ones((2, 3))
    # default axis 0, as for ndarrays
    s = np.stack([a, b])
    assert s.shape == np.stack([ref_a, ref_b]).shape == (2, 2, 3)
    assert s.axes == ("T", "T", "d_model")
    # vectors: the new axis comes first; a's depths (1) in row 0, a leaf's (0) in row 1
    v = np.stack([a[0], trace.leaf(g, "y", (3,), ("d_model",))])
    assert v.shape == (2, 3) and v.axes == ("T", "d_model")
    np.testing.assert_array_equal(v.sdepth, np.stack([np.ones(3), np.zeros(3)]))
    c = np.concatenate([a, b])
    assert c.shape == np.concatenate([ref_a, ref_b]).shape == (4, 3)
    # an explicit axis reaches both dist and sdepth
    w = np.concatenate([a, trace.leaf(g, "Y", (2, 4), ("T", "d_model"))], axis=1)
    assert w.shape == w.dist.shape == w.sdepth.shape == (2, 7)
    np.testing.assert_array_equal(w.sdepth, [[1, 1, 1, 0, 0, 0, 0]] * 2)
    np.testing.assert_array_equal(w.dist[:, :3], [[1, 1, 1], [np.inf] * 3])
    # a plain array in the list adds no dependency and is never an input position
    m = np.stack([a, ref_b], axis=0)
    assert m.deps == [(a.owner, -1)]
    assert np.isinf(m.dist[1]).all() and (m.sdepth[1] == 0).all()
    m2 = np.concatenate([ref_a, b, a], axis=0)
    assert m2.deps == [(b.owner, -1), (a.owner, -1)]


def test_indexing_labels_axes_like_numpy_drops_them():
    g = trace.Graph()
    H = trace.leaf(g, "H", (2, 5, 3), ("head", "T", "d_k"))
    row = H[:, 2]                                 # one position of every head
    assert row.shape == np.zeros((2, 5, 3))[:, 2].shape == (2, 3)
    assert row.axes == ("head", "d_k")
    row2 = H[..., 4, :]
    assert row2.axes == ("head", "d_k") and row2.shape == (2, 3)
    X = trace.leaf(g, "X", (5, 3), ("T", "d_model"))
    assert X[1].axes == ("d_model",)
    col = X[:, 1]                                 # not a row read: the axis it keeps is unknown
    assert col.shape == (5,) and col.axes == ("?",)
    # an unknown label takes the other operand's name when broadcast
    v = trace.leaf(g, "v", (5,), ("T",))
    assert (col + v).axes == ("T",)
    assert X[1:3].axes == ("T", "d_model")        # same rank: labels kept


def test_max_and_sum_drop_the_reduced_axis_by_default():
    g = trace.Graph()
    X = trace.leaf(g, "X", (4, 3), ("T", "d_model"))
    ref = np.zeros((4, 3))
    assert X.max().shape == ref.max(axis=-1).shape == (4,)
    assert X.sum().shape == (4,)
    assert X.max(keepdims=True).shape == ref.max(axis=-1, keepdims=True).shape == (4, 1)
    assert X.max().axes == ("T",)


def test_views_of_a_weight_keep_its_part():
    """lam reshaped, transposed or indexed still scales a state under the weight's part."""
    g = trace.Graph(weight_parts={"lam": "recurrence"})
    lam = trace.leaf(g, "lam", (4,), ("d_h",))
    U = trace.leaf(g, "U", (3, 4), ("T", "d_h"), source_row=0)
    for view in (lam.reshape(1, 4), lam[None, :], lam.reshape(4, 1).T, lam[0:4]):
        assert view.part == "recurrence"
        view * U
        assert g.ops[-1].part == "recurrence" and g.ops[-1].macs == 12
    U * U
    assert g.ops[-1].part == "mul"


def test_batched_scores_are_the_grid_and_batched_mix_the_mix():
    """Multi-head shapes (head, T, d_k): Q K^T is still the T x T grid."""
    g = trace.Graph()
    Q = trace.leaf(g, "Q", (2, 5, 3), ("head", "T", "d_k"))
    K = trace.leaf(g, "K", (2, 5, 3), ("head", "T", "d_k"))
    V = trace.leaf(g, "V", (2, 5, 4), ("head", "T", "d_v"))
    E = Q @ np.swapaxes(K, -1, -2)
    assert E.shape == (2, 5, 5) and E.axes == ("head", "T", "T")
    assert g.ops[-1].part == "grid" and g.ops[-1].macs == 2 * 5 * 5 * 3
    E @ V
    assert g.ops[-1].part == "mix" and g.ops[-1].macs == 2 * 5 * 4 * 5
    Q @ trace.leaf(g, "M", (3, 4), ("d_k", "d_v"))
    assert g.ops[-1].part == "product"


def test_an_op_without_inputs_is_a_source():
    g = trace.Graph()
    op = g.new_op("add", [], (2,), 1, ("?",))
    assert (op.id, op.deps, op.op_depth, op.part) == (0, [], 1, "add")
    assert g.ops == [op]


# ============================================================================ task graph

def _toy_trace():
    """Five ops, worked out by hand below.

    op0 A = X @ W  (3, 2), k = 2, read by rows  -> tasks 0, 1, 2
    op1 s = A[1].sum()  () over 2 terms          -> task 3 (waits for row 1 only)
    op2 X[:, :1].sum()  (3,) over 1 term: no levels -> task 4
    op3 s + A  (3, 2)                            -> task 5 (waits for 3 and rows 0..2)
    op4 W * 2  (2, 2), from a leaf only          -> task 6 (no inputs: last and free)
    """
    g = trace.Graph()
    X = trace.leaf(g, "X", (3, 2), ("T", "d_model"), source_row=0)
    W = trace.leaf(g, "W", (2, 2), ("d_model", "d_k"))
    A = X @ W
    s = A[1].sum()
    X[:, :1].sum()
    y = s + A
    W * 2.0
    return depth.Trace("toy", 3, 2, g, (y,))


def test_task_graph_of_a_hand_built_trace():
    tg = schedule.task_graph(_toy_trace(), "scalar")
    # scalar levels: matmul [N k, N (k-1)] = [12, 6], a third per row; sum of 2: [1];
    # sum of 1: none; add [6]; mul [4]
    np.testing.assert_array_equal(tg.level_ptr, [0, 2, 4, 6, 7, 7, 8, 9])
    np.testing.assert_array_equal(tg.level_size, [4, 2, 4, 2, 4, 2, 1, 6, 4])
    # edges (1, 3), (0, 5), (1, 5), (2, 5), (3, 5)
    np.testing.assert_array_equal(tg.succ_ptr, [0, 1, 3, 4, 5, 5, 5, 5])
    np.testing.assert_array_equal(tg.succ_idx, [5, 3, 5, 5, 5])
    np.testing.assert_array_equal(tg.indeg, [0, 0, 0, 1, 0, 4, 0])
    # bottom levels: 6 -> 1, 5 -> 1, 4 -> 0, 3 -> 1 + 1, 2 -> 2 + 1, 1 -> 2 + 2, 0 -> 2 + 1
    np.testing.assert_array_equal(tg.prio, [3, 4, 3, 2, 0, 1, 1])
    assert (tg.work, tg.span) == (18 + 1 + 6 + 4, 4)       # chain: row 1, sum, add
    # the compiled kernels are given int64 buffers, whatever the ops' levels
    for name in ("level_ptr", "level_size", "succ_ptr", "succ_idx", "indeg", "prio"):
        assert getattr(tg, name).dtype == np.int64, name
    el = schedule.task_graph(_toy_trace(), "element")
    # element: a dot product of k = 2 terms is 2 steps of N; a sum of 2 is 1 combine
    np.testing.assert_array_equal(el.level_size, [2, 2, 2, 2, 2, 2, 1, 6, 4])
    assert (el.work, el.span) == (12 + 1 + 6 + 4, 4)
    assert el.level_size.dtype == np.int64 and el.prio.dtype == np.int64


def test_schedule_of_a_hand_built_trace():
    frame = schedule.schedule("toy", 3, 2, (1, 100), "scalar", tr=_toy_trace())
    assert list(frame.P) == [1, 100]
    assert list(frame.time) == [29, 4]       # one processor: the work; many: the span
    assert frame.bounds_ok.all()
    assert frame.speedup.tolist() == pytest.approx([1.0, 29 / 4])


def test_a_graph_without_ops_has_no_work_and_no_span():
    tg = schedule.task_graph(depth.Trace("none", 1, 1, trace.Graph(), ()), "scalar")
    assert (tg.work, tg.span) == (0, 0)
    np.testing.assert_array_equal(tg.level_ptr, [0])
    assert tg.level_size.shape == (0,) and tg.level_size.dtype == np.int64
    assert len(tg.indeg) == len(tg.prio) == len(tg.succ_idx) == 0


def test_upper_bound_is_inclusive():
    """An op on an empty array: one step that does nothing. W = 0, S = 1, so the
    schedule takes exactly W/P + S = 1 step, which Brent's bound allows."""
    g = trace.Graph()
    x = trace.leaf(g, "x", (0, 3), ("T", "d_model"))
    y = x + x
    frame = schedule.schedule("empty", 0, 3, (1, 2), "scalar", tr=depth.Trace("empty", 0, 3, g, (y,)))
    assert list(frame.time) == [1, 1] and list(frame.upper) == [1.0, 1.0]
    assert frame.bounds_ok.all()


def _lose_one_task(monkeypatch):
    real = _greedy.greedy_schedule

    def lossy(*args):
        real(*args)
        args[-1][2] -= 1                    # every unit of work done, one task never finished
    monkeypatch.setattr(_greedy, "greedy_schedule", lossy)


def test_schedule_refuses_a_kernel_that_loses_a_task(monkeypatch):
    tr = _toy_trace()
    assert schedule.schedule("toy", 3, 2, (2,), "scalar", tr=tr).time.iloc[0] > 0
    _lose_one_task(monkeypatch)
    with pytest.raises(AssertionError, match="schedule of toy T=3 P=2 lost tasks"):
        schedule.schedule("toy", 3, 2, (2,), "scalar", tr=tr)
    # the table names the model and T it was scheduling
    with pytest.raises(AssertionError, match=f"schedule of {RECURRENCE} T=3 P=4 lost tasks"):
        schedule.schedule_table([3], 2, processors=(4,), grains=("scalar",),
                                families=(RECURRENCE,))


def test_schedule_table_is_one_tidy_frame():
    frame = schedule.schedule_table([3, 4], 2, processors=(1, 4), grains=("scalar", "element"),
                                    families=(RECURRENCE,))
    assert len(frame) == 2 * 2 * 2
    assert list(frame.index) == list(range(8))
    assert frame.set_index(["T", "grain", "P"]).index.is_unique
    assert (frame.d == 2).all() and set(frame.model) == {RECURRENCE}


def test_plateau_P_keys_each_row_by_model_T_and_grain():
    rows = []
    for T, times in ((5, [100, 50, 30, 29.8]), (7, [80, 40, 39.9, 39.9])):
        for P, t in zip([8, 1, 4, 2], [times[3], times[0], times[2], times[1]]):   # unsorted
            rows.append({"model": "toy", "T": T, "grain": "scalar", "P": P, "time": t, "span": T})
    pl = schedule.plateau_P(pd.DataFrame(rows), tol=0.01)
    assert list(pl.columns) == ["model", "T", "grain", "plateau_P", "floor", "span"]
    # T=5: floor 29.8, 30 <= 29.8 * 1.01 = 30.098 -> P = 4; T=7: 40 <= 40.299 -> P = 2
    assert pl.set_index("T").plateau_P.to_dict() == {5: 4, 7: 2}
    assert pl.set_index("T").floor.to_dict() == {5: 29, 7: 39}
    assert pl.set_index("T").span.to_dict() == {5: 5, 7: 7}


# ============================================================================ depth

# ============================================================================ _io

def test_check_name_refuses_every_undecodable_byte_and_names_the_option():
    for raw in (b"\x80", b"out\xff", b"caf\xe9"):           # surrogateescape: \udc80..\udcff
        name = raw.decode("utf-8", "surrogateescape")
        with pytest.raises(_io.UsageError, match=r"^--out: the name .* not UTF-8"):
            _io.check_name(name)
        with pytest.raises(_io.UsageError, match=r"^--figures: "):
            _io.check_name(name, "--figures")
    assert _io.check_name("café/\u00e9") == "café/\u00e9"


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


# ============================================================================ second pass
# Mutants first filed in bulk as "equivalent on the operands every traced forward uses":
# each test below uses an operand the tracer supports but no traced forward happens to use
# (a batched, 1-D or list operand, a plain array wider than the traced one, a 3-D reshape).

def test_an_op_and_a_stack_list_each_dependency_once():
    g = trace.Graph()
    X = trace.leaf(g, "X", (2, 3), ("T", "d_model"), source_row=0)
    a = np.exp(X)                                 # op 0
    a + a                                         # op 1 reads op 0 twice: one edge
    assert g.ops[-1].deps == [(0, -1)]
    a * a[1]                                      # the whole of op 0 and its row 1
    assert g.ops[-1].deps == [(0, -1), (0, 1)]
    assert np.stack([a, a, a]).deps == [(0, -1)]
    assert np.concatenate([a, X, a]).deps == [(0, -1)]


def test_a_plain_operand_wider_than_the_traced_one_broadcasts_like_numpy():
    g = trace.Graph()
    x = trace.leaf(g, "x", (3,), ("d_model",))
    plain = np.zeros((2, 3))
    for y in (x + plain, plain * x, np.where(np.ones((2, 3), bool), x, 0.0)):
        assert y.shape == y.dist.shape == y.sdepth.shape == g.ops[-1].shape == (2, 3)
        assert y.axes == ("?", "d_model")


def test_where_waits_for_the_traced_branch():
    g = trace.Graph()
    X = trace.leaf(g, "X", (2, 3), ("T", "d_model"), source_row=0)
    e = np.exp(X)                                 # dist: row 0 one op from position 1
    mask = np.array([[True, False, True], [True, True, False]])
    for w in (np.where(mask, e, 0.0), np.where(mask, 0.0, e)):
        assert g.ops[-1].kind == "where" and g.ops[-1].deps == [(e.owner, -1)]
        np.testing.assert_array_equal(w.dist, [[2, 2, 2], [np.inf] * 3])
        np.testing.assert_array_equal(w.sdepth, np.full((2, 3), 2))


def test_matmul_sdepth_is_per_row_of_a_and_per_column_of_b():
    """Element (i, j) is 1 + ceil(log2 k) levels after the deepest of row i and column j."""
    g = trace.Graph()
    X = trace.leaf(g, "X", (2, 3), ("T", "d_model"))
    W = trace.leaf(g, "W", (3, 4), ("d_model", "d_k"))
    a = np.concatenate([np.exp(X[:1]), X[1:]])                    # row depths 1, 0
    np.testing.assert_array_equal((a @ W).sdepth, [[1 + 1 + 2] * 4, [0 + 1 + 2] * 4])
    b = np.concatenate([np.exp(W[:, :2]), W[:, 2:]], axis=1)      # column depths 1, 1, 0, 0
    np.testing.assert_array_equal((X @ b).sdepth, [[4, 4, 3, 3]] * 2)


def test_matmul_with_vectors_and_lists_drops_axes_like_numpy():
    g = trace.Graph()
    W = trace.leaf(g, "W", (4, 3), ("d_h", "d_model"))
    v = trace.leaf(g, "v", (3,), ("d_model",))
    u = trace.leaf(g, "u", (4,), ("d_h",))
    Wv = W @ v
    assert Wv.shape == (np.zeros((4, 3)) @ np.zeros(3)).shape == (4,) and Wv.axes == ("d_h",)
    uW = u @ W
    assert uW.shape == (np.zeros(4) @ np.zeros((4, 3))).shape == (3,) and uW.axes == ("d_model",)
    vv = v @ v
    assert vv.shape == vv.dist.shape == (np.zeros(3) @ np.zeros(3)).shape == ()
    assert vv.axes == () and g.ops[-1].shape == ()
    Wl = W @ [1.0, 2.0, 3.0]                      # a list, as ndarray @ list allows
    assert Wl.shape == (4,) and Wl.axes == ("d_h",) and g.ops[-1].inner == 3


def test_batched_matmul_follows_numpy_shapes_and_depths():
    g = trace.Graph()
    A = trace.leaf(g, "A", (2, 3, 4), ("head", "T", "d_k"), source_row=0)
    M = trace.leaf(g, "M", (4, 5), ("d_k", "d_v"))
    AM = A @ M                                    # (head, T, d_k) @ (d_k, d_v)
    assert AM.shape == AM.dist.shape == np.matmul(np.zeros((2, 3, 4)), np.zeros((4, 5))).shape
    assert AM.axes == ("head", "T", "d_v") and g.ops[-1].inner == 4
    assert g.ops[-1].part == "product"            # contracts over d_k, not over T
    np.testing.assert_array_equal(AM.dist, np.broadcast_to([[1.0], [np.inf], [np.inf]], (2, 3, 5)))
    assert (AM.sdepth == 1 + 2).all()
    B = trace.leaf(g, "B", (2, 4, 5), ("head", "d_k", "d_v"))
    X = trace.leaf(g, "X", (3, 4), ("T", "d_k"), source_row=1)
    XB = X @ B                                    # (T, d_k) @ (head, d_k, d_v)
    assert XB.shape == XB.dist.shape == XB.sdepth.shape == (2, 3, 5)
    assert XB.axes[-2:] == ("T", "d_v")
    np.testing.assert_array_equal(XB.dist, np.broadcast_to([[np.inf], [1.0], [np.inf]], (2, 3, 5)))
    K = trace.leaf(g, "K", (2, 4, 3), ("head", "d_k", "T"))
    X @ K                                         # every pair of positions, per head
    assert g.ops[-1].part == "grid" and g.ops[-1].shape == (2, 3, 3)
    u = trace.leaf(g, "u", (4,), ("d_k",))
    uB = u @ B                                    # (d_k,) @ (head, d_k, d_v)
    assert uB.shape == uB.dist.shape == np.matmul(np.zeros(4), np.zeros((2, 4, 5))).shape
    Av = A @ u
    assert Av.shape == (2, 3) and Av.axes == ("head", "T")


def test_sum_and_max_of_vectors_and_batches():
    g = trace.Graph()
    v = trace.leaf(g, "v", (5,), ("d_model",))
    s = v.sum()
    assert s.shape == s.dist.shape == np.zeros(5).sum(axis=-1).shape == ()
    assert s.axes == () and int(s.sdepth) == 3 and g.ops[-1].inner == 5   # ceil(log2 5)
    H = trace.leaf(g, "H", (2, 3, 4), ("head", "T", "d_k"))
    m = H.max()
    assert m.shape == m.sdepth.shape == (2, 3) and m.axes == ("head", "T")
    assert (m.sdepth == 2).all() and g.ops[-1].inner == 4


def test_reshape_labels_of_3d_and_of_added_leading_axes():
    g = trace.Graph()
    H = trace.leaf(g, "H", (2, 3, 4), ("head", "T", "d_k"))
    assert H.reshape(2, 3, 4).axes == ("head", "T", "d_k")        # nothing merged
    assert H.reshape(6, 4).axes == ("head", "d_k")                # head and T merged
    X = trace.leaf(g, "X", (3, 4), ("T", "d_model"))
    assert X.reshape(3, 4).axes == ("T", "d_model")
    # a new leading axis merges nothing: its label is unknown
    Y = X.reshape(1, 3, 4)
    assert Y.shape == (1, 3, 4) and Y.axes == ("?", "T", "d_model")


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


# ============================================================================ depth, second pass

def _parts_trace(seconds):
    """The toy trace plus an empty product under a weight part: parts product 12, mul 4, idle 0."""
    tr = _toy_trace()
    g = tr.graph
    g.weight_parts["E"] = "idle"
    trace.leaf(g, "E", (0, 2), ("T", "d_model")) @ trace.leaf(g, "W2", (2, 2), ("d_model", "d_k"))
    Z = trace.leaf(g, "Z", (3, 2), ("T", "d_model"), source_row=0)
    tr.outputs = (np.exp(np.concatenate([Z[:1]] * 3)),)   # every row one op from position 1
    tr.seconds = seconds
    assert tr.macs_by_part() == {"product": 12, "mul": 4, "idle": 0}
    return tr


class _Fam:
    class tracing:
        lesson_parts = ("product", "spare")


class _Form:
    def __init__(self, parts):
        self.parts = parts

    def macs(self, T, d):
        return dict(self.parts)


def _one_toy_form(monkeypatch, closed):
    monkeypatch.setattr(depth.models, "traced_forms",
                        lambda families: {"toy": (_Fam(), _Form(closed))})


def test_count_table_rows_a_part_missing_on_one_side_as_zero(monkeypatch):
    _one_toy_form(monkeypatch, {"product": 12, "mul": 4, "spare": 0})
    traces = {("toy", 3, 2): _parts_trace(0.0)}
    frame = depth.count_table([3], 2, families=("toy",), traces=traces)
    assert frame.part.tolist() == ["idle", "mul", "product", "spare"]
    assert frame.macs.tolist() == [0, 4, 12, 0] and frame.flops.tolist() == [0, 8, 24, 0]
    assert frame.closed_form.tolist() == [0, 4, 12, 0]
    assert frame.in_lesson_comparison.tolist() == [False, False, True, True]
    # a closed form that disagrees stops the table, showing the rows that differ
    _one_toy_form(monkeypatch, {"product": 13, "mul": 4})
    with pytest.raises(AssertionError, match=r"(?s)traced counts differ from the closed "
                                             r"forms:\n.*product.*12.*13"):
        depth.count_table([3], 2, families=("toy",), traces=traces)


def test_depth_table_counts_lesson_parts_it_did_not_trace_as_zero(monkeypatch):
    _one_toy_form(monkeypatch, {})
    tr = _parts_trace(0.125)
    frame = depth.depth_table([3], 2, families=("toy",), traces={("toy", 3, 2): tr})
    row = frame.iloc[0]
    assert (row.macs, row.flops, row.macs_all) == (12, 24, 16)      # product 12 + spare 0
    assert (row.ops, row.max_path, row.scalar_work, row.scalar_span) == (7, 1, 29 + 6, 1)
    assert row.trace_seconds == tr.seconds == 0.125                 # the trace's own figure
    assert list(frame.columns)[-1] == "trace_seconds"


def test_matmul_labels_every_axis_of_its_shape_batch_axes_from_either_side():
    g = trace.Graph()
    a = trace.leaf(g, "a", (3, 4), ("T", "d_k"))
    b = trace.leaf(g, "b", (2, 4, 5), ("head", "d_k", "d_v"))
    v = trace.leaf(g, "v", (4,), ("d_k",))
    c = trace.leaf(g, "c", (2, 1, 5, 4), ("layer", "1", "T", "d_k"))
    cases = [(a, b, ("head", "T", "d_v")), (v, b, ("head", "d_v")),
             (b, np.ones(5), ("head", "d_k")), (c, b, ("layer", "head", "T", "d_v")),
             (np.ones((2, 3, 4)), a.T, ("?", "?", "T"))]
    for x, y, want in cases:
        r = x @ y
        assert r.shape == np.shape(np.ones(np.shape(x) if not isinstance(x, trace.Traced) else x.shape)
                                   @ np.ones(y.shape if isinstance(y, trace.Traced) else np.shape(y)))
        assert r.axes == want, (r.shape, r.axes)


def test_matmul_labels_three_batch_axes():
    g = trace.Graph()
    a = trace.leaf(g, "a", (2, 1, 3, 5, 4), ("x", "y", "z", "T", "d_k"))
    w = trace.leaf(g, "w", (4, 6), ("d_k", "d_v"))
    assert (a @ w).axes == ("x", "y", "z", "T", "d_v")
    b = trace.leaf(g, "b", (2, 1, 3, 4, 6), ("x", "y", "z", "d_k", "d_v"))
    q = trace.leaf(g, "q", (5, 4), ("T", "d_k"))
    r = q @ b
    assert r.shape == (2, 1, 3, 5, 6) and r.axes == ("x", "y", "z", "T", "d_v")
