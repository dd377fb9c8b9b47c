"""harness.analysis.trace, the traced graph, and harness.analysis.field, the per-element depths
it keeps as row and column terms (each Field operation against its dense twin). Each expected value is worked out by hand from a
tiny program (ops, parts, dependencies, depths, bytes), from a closed form (ceil(log2 n) as a
bit length), or from what a plain ndarray does with the same operands (shapes, axes), so that
a changed axis, dtype, label or comparison makes a test fail."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.analysis import trace


def test_tree_levels_and_clog2_closed_forms():
    from harness.analysis.trace import clog2, tree_levels
    assert [clog2(n) for n in (1, 2, 3, 4, 5, 1024, 1025)] == [0, 1, 2, 2, 3, 10, 11]
    assert tree_levels(1) == [] and tree_levels(2) == [1] and tree_levels(5) == [2, 1, 1]
    for n in range(1, 70):
        lv = tree_levels(n)
        assert sum(lv) == n - 1 and len(lv) == clog2(n)


@pytest.mark.parametrize("kind,shape,inner,scalar,element,macs", [
    ("matmul", (2, 3), 4, [24, 12, 6], [6, 6, 6, 6], 24),
    ("matmul", (5,), 1, [5], [5], 5),
    ("sum", (2,), 3, [2, 2], [2, 2], 0),
    ("max", (3, 1), 5, [6, 3, 3], [3, 3, 3, 3], 0),
    ("sum", (4,), 1, [], [], 0),
    ("mul", (2, 3), 1, [6], [6], 6),
    ("add", (), 1, [1], [1], 0),
])
def test_op_levels_and_multiplications(kind, shape, inner, scalar, element, macs):
    from harness.analysis.trace import Op
    op = Op(0, kind, kind, shape, inner, [])
    assert op.levels("scalar") == scalar and op.levels("element") == element
    assert op.macs == macs and op.numel == (math.prod(shape) if shape else 1)


def test_op_rows_only_when_split():
    from harness.analysis.trace import Op
    assert Op(0, "add", "add", (4, 3), 1, []).rows == 1
    assert Op(0, "add", "add", (4, 3), 1, [], split=True).rows == 4
    assert Op(0, "add", "add", (2, 4, 3), 1, [], split=True).rows == 4
    assert Op(0, "add", "add", (3,), 1, [], split=True).rows == 1


def test_recorded_ops_are_named_after_what_they_multiply():
    from harness.analysis import trace
    g = trace.Graph(weight_parts={"W": "weights"})
    X = trace.leaf(g, "X", (3, 2), ("T", "d_model"), source_row=0)
    W = trace.leaf(g, "W", (2, 2), ("d_model", "d_k"))
    Q = X @ W                                      # a named weight
    E = Q @ np.swapaxes(Q, -1, -2)                 # every pair of positions
    Y = (E / 2.0 - E.max(axis=-1, keepdims=True)) @ Q          # contracts over positions
    Z = np.tanh(X @ np.ones((2, 2))) * 3.0 + np.exp(-Y) - Y.sum(axis=-1, keepdims=True)
    kinds = [(op.kind, op.part, op.shape, op.inner) for op in g.ops]
    assert kinds == [("matmul", "weights", (3, 2), 2), ("matmul", "grid", (3, 3), 2),
                     ("div", "div", (3, 3), 1), ("max", "max", (3, 1), 3),
                     ("sub", "sub", (3, 3), 1), ("matmul", "mix", (3, 2), 3),
                     ("matmul", "product", (3, 2), 2), ("tanh", "tanh", (3, 2), 1),
                     ("mul", "mul", (3, 2), 1), ("neg", "neg", (3, 2), 1),
                     ("exp", "exp", (3, 2), 1), ("add", "add", (3, 2), 1),
                     ("sum", "sum", (3, 1), 2), ("sub", "sub", (3, 2), 1)]
    assert Z.axes == ("T", "d_k") and E.axes == ("T", "T") and Y.axes == ("T", "d_k")
    assert [op.op_depth for op in g.ops] == [1, 2, 3, 3, 4, 5, 1, 2, 3, 6, 7, 8, 6, 9]
    # position 1 (row 0 of X) is one op into Q's row 0, two into E's row and column 0
    inf = math.inf
    assert E.dist.tolist() == [[2, 2, 2], [2, inf, inf], [2, inf, inf]]
    # scalar depth: Q 1 + log2 2 = 2, E 4, E / 2 5, its max 4 + log2 3 = 6, the - 7, A V 7 + 1 + 2
    assert (E.sdepth == 4).all() and (Y.sdepth == 10).all()


def test_row_reads_split_the_op_and_wait_for_that_row_only():
    from harness.analysis import trace
    g = trace.Graph()
    X = trace.leaf(g, "X", (4, 3), ("T", "d_model"), source_row=1)
    H = np.tanh(X)
    r = H[-1]
    assert r.deps == [(0, 3)] and g.ops[0].split and r.shape == (3,) and r.axes == ("d_model",)
    assert H[np.int64(2)].deps == [(0, 2)]
    assert H[..., 1, :].deps == [(0, 1)]
    whole = H[1:3]
    assert whole.deps == [(0, -1)] and whole.shape == (2, 3)
    col = H[:, 0]
    assert col.deps == [(0, -1)] and col.shape == (4,)
    assert X[2].deps == [] and X.dist[1].tolist() == [0, 0, 0] and np.isinf(X.dist[0]).all()
    assert trace._single_row(2, 1) is None
    assert trace._single_row((slice(None), 1), 2) is None
    assert trace._single_row((1, 0), 2) is None
    assert trace._single_row((Ellipsis, 2, slice(None)), 3) == 2
    assert trace._single_row((0, 2), 3) is None
    assert trace._single_row((slice(None), 2, slice(None)), 3) == 2


def test_reductions_over_the_last_axis_only():
    from harness.analysis import trace
    g = trace.Graph()
    X = trace.leaf(g, "X", (4, 3), ("T", "d_model"), source_row=0)
    s = X.sum(axis=1)
    assert s.shape == (4,) and s.axes == ("T",) and g.ops[-1].inner == 3
    k = X.max(keepdims=True)
    assert k.shape == (4, 1) and k.axes == ("T", "1")
    assert k.sdepth.ravel().tolist() == [2, 2, 2, 2] and k.dist.ravel()[0] == 1
    with pytest.raises(TypeError, match="last axis"):
        X.sum(axis=0)
    with pytest.raises(TypeError, match="last axis"):
        X.max(axis=0)
    # a kept axis takes the other operand's label when broadcast
    assert (X - k).axes == ("T", "d_model") and (k - X).axes == ("T", "d_model")


def test_traced_views_stack_concatenate_reshape_and_where():
    from harness.analysis import trace
    g = trace.Graph()
    X = trace.leaf(g, "X", (3, 2), ("T", "d_model"), source_row=0)
    H = np.tanh(X)
    rows = [H[t] for t in range(3)]
    S = np.stack(rows, axis=0)
    assert S.shape == (3, 2) and S.axes == ("T", "d_model") and S.deps == [(0, 0), (0, 1), (0, 2)]
    S2 = np.stack(rows, axis=-1)
    assert S2.shape == (2, 3) and S2.axes == ("d_model", "T")
    np.testing.assert_array_equal(S2.dist, S.dist.T)
    C = np.concatenate([H, X], axis=0)
    assert C.shape == (6, 2) and C.deps == [(0, -1)] and C.axes == ("T", "d_model")
    assert C.dist[:3].tolist() == H.dist.tolist() and C.dist[3:].tolist() == X.dist.tolist()
    R = H.reshape(6)
    assert R.shape == (6,) and R.axes == ("T",) and R.deps == [(0, -1)]
    R3 = H.reshape((3, 1, 2))
    assert R3.axes == ("T", "T", "d_model") and R3.shape == (3, 1, 2)
    assert len(g.ops) == 1                                   # views add no op
    W = np.where(np.ones((3, 2), bool), H, X)
    assert g.ops[-1].kind == "where" and W.axes == ("T", "d_model") and W.dist[0].tolist() == [1, 1]
    assert np.where(np.ones((3, 2), bool), 0.0, H).axes == ("T", "d_model")
    for bad in (lambda: np.add.reduce(X), lambda: np.add(X, X, out=np.empty((3, 2))),
                lambda: np.sort(X), lambda: np.sin(X)):
        with pytest.raises(TypeError, match="trace"):
            bad()
    with pytest.raises(ValueError, match="do not align"):
        X @ X
    assert repr(X) == "Traced(shape=(3, 2), axes=('T', 'd_model'))"
    assert X.ndim == 2 and X.size == 6 and X.T.leaf == "X" and X.T.shape == (2, 3)


def test_reflected_operators_are_recorded_like_the_others():
    from harness.analysis import trace
    g = trace.Graph()
    X = trace.leaf(g, "X", (2, 2), ("T", "d_model"), source_row=0)
    outs = [1.0 + X, 1.0 - X, 2.0 * X, 1.0 / X, [[1.0, 0.0], [0.0, 1.0]] @ X]
    assert [op.kind for op in g.ops] == ["add", "sub", "mul", "div", "matmul"]
    assert all(o.shape == (2, 2) for o in outs) and g.ops[-1].inner == 2
    assert [o.dist[0, 0] for o in outs] == [1, 1, 1, 1, 1]
    assert outs[0].axes == ("T", "d_model") and outs[4].axes == ("?", "d_model")


def test_reflected_operators_broadcast_a_larger_constant():
    from harness.analysis import trace
    g = trace.Graph()
    x = trace.leaf(g, "x", (2,), ("d_model",))
    big = [[1.0, 2.0]] * 3                                      # (3, 2): a list, so Python reflects
    for out in (big + x, big - x, big * x, big / x):
        assert out.shape == (3, 2)
        assert g.ops[-1].shape == (3, 2)


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


# ----------------------------------------------------------------------------- structured depths

@pytest.mark.parametrize("seed", range(6))
def test_a_field_reads_as_the_dense_array_it_stands_for(seed, monkeypatch):
    """Row and column terms against their dense twin, through every Field operation; DENSE_MAX
    set low so that the small shapes stay in terms."""
    from harness.analysis import field
    from harness.analysis.field import Field
    monkeypatch.setattr(field, "DENSE_MAX", 4)
    rng = np.random.default_rng(seed)
    m, n = rng.integers(2, 6, size=2)
    for how, ufunc in (("min", np.minimum), ("max", np.maximum)):
        dtype = np.float32 if how == "min" else np.int32
        r = rng.integers(0, 9, size=(m, 1)).astype(dtype)
        c = rng.integers(0, 9, size=(1, n)).astype(dtype)
        f = Field((m, n), [r, c], how)
        dense = ufunc(r, c)
        assert len(f.terms) == 2 and f.nbytes == r.nbytes + c.nbytes
        np.testing.assert_array_equal(f.dense(), dense)
        np.testing.assert_array_equal(f.shift(3).dense(), dense + 3)
        for axis in (0, 1, -1):
            for keep in (False, True):
                want = (dense.min if how == "min" else dense.max)(axis=axis, keepdims=keep)
                np.testing.assert_array_equal(f.reduce(axis, keep).dense(), want)
        np.testing.assert_array_equal(f.swap(0, 1).dense(), dense.T)
        for idx in ((1,), (slice(None), 0), (Ellipsis, m - 1, slice(None)), (slice(1, None, 2),),
                    (None, slice(None)), (slice(None), None, -1), ([0, 1],)):
            np.testing.assert_array_equal(f.index(idx).dense(), dense[idx])
        d2 = rng.integers(0, 9, size=(m, n)).astype(dtype)
        both = Field.combine([f, Field((m, n), [d2], how)], (m, n), how)
        np.testing.assert_array_equal(both.dense(), ufunc(dense, d2))
        assert both.total() == ufunc.reduce(ufunc(dense, d2), axis=None)
        np.testing.assert_array_equal(f.reshape((n, m)).dense(), dense.reshape(n, m))
        # one term narrower than the field (a row's depth for every column), and one as wide
        for t in (r, rng.integers(0, 9, size=(m, n)).astype(dtype)):
            one = Field((m, n), [t], how)
            assert len(one.terms) == 1 and one.terms[0].shape == t.shape
            np.testing.assert_array_equal(one.dense(), np.broadcast_to(t, (m, n)))
            for idx in ((1,), (slice(None), 0), (Ellipsis, m - 1, slice(None)), (slice(1, None, 2),),
                        (None, slice(None)), (slice(None), None, -1), ([0, 1],)):
                np.testing.assert_array_equal(one.index(idx).dense(),
                                              np.broadcast_to(t, (m, n))[idx])
            for axis in (0, 1, -1):
                for keep in (False, True):
                    want = ufunc.reduce(np.broadcast_to(t, (m, n)), axis=axis, keepdims=keep)
                    np.testing.assert_array_equal(one.reduce(axis, keep).dense(), want)
    with pytest.raises(IndexError):
        Field((m, n), [r, c], "min").index((m,))
    with pytest.raises(ValueError, match="does not broadcast"):
        Field((2, 3), [np.zeros((3, 1), np.float32)], "min")


def test_an_unsupported_operation_names_the_line_that_called_it():
    g = trace.Graph()
    X = trace.leaf(g, "X", (3, 2), ("T", "d_model"), source_row=0)
    with pytest.raises(TypeError, match=r"np\.cumsum is not traced \(called at .*"
                                        r"test_analysis_trace\.py:\d+: np\.cumsum\(X, axis=0\)\)"):
        np.cumsum(X, axis=0)
    with pytest.raises(TypeError, match=r"np\.log is not traced \(called at .*test_analysis_trace"):
        np.log(X)
    with pytest.raises(TypeError, match=r"\*\* \(power\) is not traced \(called at .*X \*\* 2"):
        X ** 2
    with pytest.raises(TypeError, match=r"a comparison .* is not traced \(called at .*X > 0"):
        X > 0
    with pytest.raises(TypeError, match=r"np\.asarray .* is not traced"):
        np.asarray(X)


def test_called_at_names_the_callers_file_line_and_code():
    import inspect
    here = inspect.currentframe().f_lineno + 1
    got = trace._called_at()
    assert got == f" (called at {__file__}:{here}: got = trace._called_at())"


def test_called_at_skips_numpys_frames_and_code_without_a_file():
    import inspect
    ns = {"_called_at": trace._called_at}
    exec("def cb(row):\n    return _called_at()\n", ns)          # a frame of "<string>"
    here = inspect.currentframe().f_lineno + 1
    got = np.apply_along_axis(ns["cb"], 0, np.zeros((1, 1), dtype=object))[0]
    # apply_along_axis is NumPy's Python code, between this line and the callback
    assert got == (f" (called at {__file__}:{here}: got = np.apply_along_axis(ns[\"cb\"], 0, "
                   f"np.zeros((1, 1), dtype=object))[0])")


def test_called_at_says_nothing_when_every_frame_is_the_tracers_or_numpys(monkeypatch):
    import traceback
    frames = [traceback.FrameSummary(np.__file__, 1, "f", line="x"),
              traceback.FrameSummary(trace.__file__, 2, "g", line="y"),
              traceback.FrameSummary("<string>", 3, "h", line="z"),
              traceback.FrameSummary(trace.__file__, 4, "_called_at", line="w")]
    monkeypatch.setattr(traceback, "extract_stack", lambda: list(frames))
    assert trace._called_at() == ""


def test_called_at_of_a_line_whose_source_is_gone_names_the_file_and_line_alone(monkeypatch):
    import traceback
    frames = [traceback.FrameSummary("/nonexistent/user_forward.py", 7, "forward", line=None),
              traceback.FrameSummary(trace.__file__, 4, "_called_at", line="w")]
    monkeypatch.setattr(traceback, "extract_stack", lambda: list(frames))
    assert trace._called_at() == " (called at /nonexistent/user_forward.py:7: )"


def test_called_at_skips_mutmuts_trampolines_when_mutmut_is_loaded(monkeypatch, tmp_path):
    # under `make mutate` every call into the tracer passes through mutmut's trampoline.py
    import sys
    import traceback
    import types
    fake = types.ModuleType("mutmut")
    fake.__file__ = str(tmp_path / "mutmut" / "__init__.py")
    trampoline = str(tmp_path / "mutmut" / "mutation" / "trampoline.py")
    frames = [traceback.FrameSummary("/home/user/forward.py", 7, "forward", line="y = h ** 2"),
              traceback.FrameSummary(trampoline, 100, "trampoline", line="return orig_func()"),
              traceback.FrameSummary(trace.__file__, 4, "_called_at", line="w")]
    monkeypatch.setattr(traceback, "extract_stack", lambda: list(frames))
    monkeypatch.delitem(sys.modules, "mutmut", raising=False)
    assert trace._called_at() == f" (called at {trampoline}:100: return orig_func())"
    monkeypatch.setitem(sys.modules, "mutmut", fake)
    assert trace._called_at() == " (called at /home/user/forward.py:7: y = h ** 2)"


# ------------------------------------------------------------ Field and its indexing (field.py)

@pytest.mark.parametrize("idx", [0, -1, slice(1, 3), None, Ellipsis, np.int64(2),
                                 (0, 1, 2), (slice(None), 0), (None, 0, None), (Ellipsis, 0),
                                 (0, Ellipsis, slice(1, 2)), (Ellipsis,), (0, None, 1, Ellipsis, 2),
                                 ()])
def test_basic_index_gives_one_entry_per_axis_that_indexes_as_numpy_does(idx):
    from harness.analysis.field import basic_index
    a = np.arange(3 * 4 * 5).reshape(3, 4, 5)
    per_axis = basic_index(idx, a.ndim)
    assert isinstance(per_axis, tuple) and all(e is not Ellipsis for e in per_axis)
    assert sum(e is not None for e in per_axis) == a.ndim       # every axis, new ones beside
    np.testing.assert_array_equal(a[per_axis], a[idx])


@pytest.mark.parametrize("idx", [True, np.bool_(False), [0, 1], np.array([0, 2]), (0, [1]),
                                 (Ellipsis, Ellipsis), (0, 1, 2, 3), (0, None, 1, 2, 3),
                                 (Ellipsis, 0, 1, 2, 3), 1.5, "a"])
def test_basic_index_is_none_for_what_is_not_basic_indexing_of_three_axes(idx):
    from harness.analysis.field import basic_index
    assert basic_index(idx, 3) is None


def test_a_large_field_folds_each_term_into_a_larger_one_it_broadcasts_into():
    from harness.analysis.field import DENSE_MAX, Field
    n = 300                                                     # n^2 = 90,000 > DENSE_MAX
    assert n * n > DENSE_MAX
    col, row = np.arange(n, dtype=np.float32)[:, None], np.arange(n, dtype=np.float32)[None, :]
    f = Field((n, n), [np.full((1, 1), 5.0), col, row], "min")
    # the scalar folds into the first term it broadcasts into, the larger first; the row
    # and the column stay two terms: 2n numbers, not n^2
    assert sorted(t.shape for t in f.terms) == [(1, n), (n, 1)] and f.nbytes == 2 * n * 4
    dense = np.minimum(np.minimum(np.broadcast_to(col, (n, n)), row), 5.0)
    got = np.minimum(*(np.broadcast_to(t, (n, n)) for t in f.terms))
    np.testing.assert_array_equal(got, dense)


def test_field_bytes_are_dense_up_to_dense_max_elements_and_a_row_and_a_column_past_it():
    from harness.analysis.field import BYTES_PER_ELEMENT, DENSE_MAX, field_bytes
    assert DENSE_MAX == 256 * 256
    assert field_bytes(256, 256) == BYTES_PER_ELEMENT * DENSE_MAX
    assert field_bytes(256, 257) == BYTES_PER_ELEMENT * (256 + 257)


def test_a_slice_or_a_row_of_a_weight_is_that_weight():
    g = trace.Graph(weight_parts={"W": "weights"})
    X = trace.leaf(g, "X", (3, 4), ("T", "d_model"), source_row=0)
    W = trace.leaf(g, "W", (4, 4), ("d_model", "d_k"))
    X @ W[:, :2]                                   # the first two columns: still W
    W[1] @ np.ones((4, 2))                         # one row of W: still W
    X[:, :2] @ np.ones((2, 2))                     # a slice of X is no weight
    assert [op.part for op in g.ops] == ["weights", "weights", "product"]


@pytest.mark.parametrize("call,what", [
    (lambda X: np.add.reduce(X), "np.add.reduce"),
    (lambda X: np.multiply.accumulate(X), "np.multiply.accumulate"),
    (lambda X: np.exp(X, out=np.empty((3, 2))), "np.exp(..., out=...)"),
])
def test_a_ufunc_method_or_an_out_argument_is_refused_by_name(call, what):
    g = trace.Graph()
    X = trace.leaf(g, "X", (3, 2), ("T", "d_model"), source_row=0)
    with pytest.raises(TypeError) as e:
        call(X)
    assert str(e.value).startswith(f"trace: {what} is not traced")


def test_a_field_indexes_term_by_term_a_two_long_axis_too(monkeypatch):
    from harness.analysis import field
    from harness.analysis.field import Field
    monkeypatch.setattr(field, "DENSE_MAX", 4)
    r = np.array([[1.0], [5.0]], np.float32)                    # (2, 1): one wide on axis 1
    c = np.array([[3.0, 0.0, 7.0]], np.float32)                 # (1, 3): one wide on axis 0
    f = Field((2, 3), [r, c], "min")
    dense = np.minimum(r, c)
    for idx in ((slice(1, None, 2),), (slice(None), slice(1, None, 2)), (1, slice(2, None)),
                (slice(None, None, -1),), (slice(2, None),)):
        np.testing.assert_array_equal(f.index(idx).dense(), dense[idx])


def test_a_large_field_keeps_its_terms_through_basic_indexing():
    from harness.analysis.field import Field
    n = 300                                                     # past DENSE_MAX: kept in terms
    col, row = np.arange(n, dtype=np.float32)[:, None], np.arange(n, dtype=np.float32)[None, ::-1]
    f = Field((n, n), [col, row], "min")
    dense = np.minimum(col, row)
    for idx in ((slice(1, None),), (Ellipsis, slice(None, None, -1)), (slice(None), slice(0, 250))):
        got = f.index(idx)                                      # each still past DENSE_MAX
        assert got.nbytes <= 2 * n * 4                          # a row and a column, not n x n
        np.testing.assert_array_equal(got.dense(), dense[idx])
    np.testing.assert_array_equal(f.index(([3, 1],)).dense(), dense[[3, 1]])   # not basic: dense


def test_a_three_axis_field_indexes_each_axis_of_each_term(monkeypatch):
    from harness.analysis import field
    from harness.analysis.field import Field
    monkeypatch.setattr(field, "DENSE_MAX", 4)
    rng = np.random.default_rng(0)
    terms = [rng.integers(0, 9, size=s).astype(np.int32) for s in ((2, 1, 1), (1, 3, 1), (1, 1, 4))]
    f = Field((2, 3, 4), terms, "max")
    dense = np.maximum(np.maximum(terms[0], terms[1]), terms[2])
    for idx in ((1,), (slice(None), 2), (slice(None), slice(1, None), 3), (Ellipsis, slice(0, 2)),
                (0, None, slice(None, None, -1), 1), (slice(None), slice(None), slice(3, None))):
        np.testing.assert_array_equal(f.index(idx).dense(), dense[idx])
    # terms wide on two axes: each reduced along the axis asked, and only that one
    g = Field((2, 3, 4), [terms[0] + terms[1], terms[2]], "max")
    assert sorted(t.shape for t in g.terms) == [(1, 1, 4), (2, 3, 1)]
    g_dense = np.maximum(terms[0] + terms[1], terms[2])
    for axis in (0, 1, 2, -1):
        for keep in (False, True):
            np.testing.assert_array_equal(g.reduce(axis, keep).dense(),
                                          g_dense.max(axis=axis, keepdims=keep))


def test_tril_is_one_where_of_its_argument_and_an_offset_is_refused():
    g = trace.Graph()
    E = trace.leaf(g, "E", (3, 3), ("T", "T"), source_row=0)
    L = np.tril(E)
    assert [(op.kind, op.part, op.shape) for op in g.ops] == [("where", "where", (3, 3))]
    np.testing.assert_array_equal(L.dist, E.dist + 1)
    for k in (1, -1):
        with pytest.raises(TypeError, match=r"^trace: np\.tril is not traced"):
            np.tril(E, k=k)


def test_a_field_names_a_term_it_cannot_hold_and_keeps_a_small_one_dense():
    from harness.analysis.field import Field
    with pytest.raises(ValueError) as e:
        Field((2, 3), [np.zeros((1, 2, 3), np.float32)], "min")
    assert str(e.value) == "trace: a term of shape (1, 2, 3) has more axes than (2, 3)"
    with pytest.raises(ValueError) as e:
        Field((2, 3), [np.zeros((3, 1), np.float32)], "min")
    assert str(e.value) == "trace: a term of shape (3, 1) does not broadcast to (2, 3)"
    # one term narrower than a small field, or several: one dense array of the field's shape;
    # a term of fewer axes lines up on the right, as NumPy broadcasts; float64 becomes float32
    for terms in ([np.arange(3.0)], [np.zeros((2, 1)), np.arange(3.0)[None, :]],
                  [np.ones((2, 3)), np.arange(3.0)]):
        f = Field((2, 3), terms, "min")
        assert [(t.shape, t.dtype) for t in f.terms] == [((2, 3), np.float32)]
        np.testing.assert_array_equal(f.terms[0], np.minimum.reduce(
            [np.broadcast_to(t, (2, 3)) for t in terms]))
    one = Field((2, 3), [np.ones((2, 3), np.int32)], "max")        # one full term: itself
    assert one.terms[0].shape == (2, 3) and one.terms[0].dtype == np.int32


def test_a_field_of_exactly_dense_max_elements_is_one_dense_array_and_one_more_is_not():
    from harness.analysis.field import DENSE_MAX, Field
    for n, dense in ((256, True), (257, False)):                 # 256^2 = DENSE_MAX
        r = np.arange(n, dtype=np.float32)[:, None]
        c = np.arange(n, dtype=np.float32)[None, :]
        for f in (Field((n, n), [r, c], "min"),
                  Field.combine([Field((n, 1), [r], "min"), Field((1, n), [c], "min")], (n, n), "min")):
            assert [t.shape for t in f.terms] == ([(n, n)] if dense else [(n, 1), (1, n)]), n
    assert 256 * 256 == DENSE_MAX
    # one narrower field combined into a small shape: broadcast to it, one dense array
    one = Field.combine([Field((3, 1), [np.arange(3.0)[:, None]], "min")], (3, 4), "min")
    assert [t.shape for t in one.terms] == [(3, 4)]
    np.testing.assert_array_equal(one.terms[0], np.broadcast_to(np.arange(3.0)[:, None], (3, 4)))


# ----------------------------------------------------------------------------- views and reductions --torch needs

def test_transpose_broadcast_reshape_kept_and_reduce_axes_give_the_dense_arrays_values():
    """The ops harness.torchmodel.interp adds, each against numpy on the dense depths."""
    g = trace.Graph()
    x = trace.leaf(g, "X", (2, 3, 4), ("B", "T", "d"), source_row=0)
    y = np.tanh(x @ np.ones((4, 5)))                      # depths that vary by row: 2 ops
    p = y.transpose(2, 0, 1)
    assert p.shape == (5, 2, 3) and p.axes == ("?", "B", "T")
    np.testing.assert_array_equal(p.dist, np.transpose(y.dist, (2, 0, 1)))
    np.testing.assert_array_equal(p.sdepth, np.transpose(y.sdepth, (2, 0, 1)))
    assert y.transpose().shape == (5, 3, 2)
    with pytest.raises(ValueError, match="not a permutation"):
        y.transpose(0, 0, 1)
    b = y[:, :1].broadcast_to((7, 2, 3, 5))
    np.testing.assert_array_equal(b.dist, np.broadcast_to(y.dist[:, :1], (7, 2, 3, 5)))
    with pytest.raises(ValueError):
        y.broadcast_to((2, 4, 5))
    r = y.reshape_kept((1, 2, 1, 3, 5))
    np.testing.assert_array_equal(r.dist, y.dist.reshape(1, 2, 1, 3, 5))
    for axes, keep in (([0], True), ([1], False), ([0, 2], False), ([0, 1, 2], True)):
        s = y.reduce_axes("sum", axes, keepdims=keep)
        # one op over the n elements of the axes: a tree of ceil(log2 n) levels
        n = int(np.prod([y.shape[a] for a in axes]))
        np.testing.assert_array_equal(s.dist, y.dist.min(axis=tuple(axes), keepdims=keep) + 1)
        np.testing.assert_array_equal(s.sdepth, y.sdepth.max(axis=tuple(axes), keepdims=keep)
                                      + trace.clog2(n))
        assert g.ops[-1].inner == n and g.ops[-1].kind == "sum"
        assert s.shape == np.sum(np.zeros(y.shape), axis=tuple(axes), keepdims=keep).shape


def test_reshape_kept_keeps_a_large_grids_terms_and_its_values(monkeypatch):
    """A (1, h, T, T) grid of row and column terms viewed as (h, T, T) stays two vectors a head,
    and its values are the dense reshape's."""
    import harness.analysis.field as F
    monkeypatch.setattr(F, "DENSE_MAX", 16)
    g = trace.Graph()
    T = 9
    q = trace.leaf(g, "Q", (1, 2, T, 3), ("?", "?", "T", "?"), source_row=0)
    k = trace.leaf(g, "K", (1, 2, 3, T), ("?", "?", "?", "T"))
    E = q @ k                                             # (1, 2, T, T)
    assert len(E._dist.terms) == 2
    v = E.reshape_kept((2, T, T))
    assert all(t.size < 2 * T * T for t in v._dist.terms)
    np.testing.assert_array_equal(v.dist, E.dist.reshape(2, T, T))
    np.testing.assert_array_equal(v.sdepth, E.sdepth.reshape(2, T, T))
    u = v.reshape_kept((2, 1, T, T))                      # a one-wide axis added
    np.testing.assert_array_equal(u.dist, E.dist.reshape(2, 1, T, T))
    w = E.reshape_kept((2 * T, T))                        # regroups the last two: dense
    np.testing.assert_array_equal(w.dist, E.dist.reshape(2 * T, T))
