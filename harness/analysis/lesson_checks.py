"""The lessons' smaller claims, each measured on the harness's kernels or tracer.

One function per claim family, each returning a tidy DataFrame (one row per
observation) that the report writes as a CSV and ``harness.analysis.claims``
judges. A random experiment is a distribution over ``draws`` draws from
``np.random.default_rng(seed)``.

Additive attention (the Bahdanau lesson):

* ``additive_bias``: a per-row constant added to the scores (an output bias)
  changes no weight; a per-column one does.
* ``additive_widths``: the decoder's and encoder's widths may differ, and the
  backward still agrees with central differences.
* ``score_gradient_rows``: each row of dl/de sums to zero, measured by central
  differences of the loss in the scores (not by the lesson's formula).
* ``encoder_routes``: a tanh-RNN encoder under the alignment; dl/dx_j split into
  the attention route (through h_j alone, no W_hh) and the recurrence route
  (through h_{j+1}, ...), against the distance T_x - j.
* ``additive_cost`` / ``additive_timing``: T_x + T_y projections but T_x T_y d_a
  tanh evaluations and no large product (traced), timed against a dot-product
  grid of the same size.

Goodbye to recurrence: ``recurrence_halves`` (the traced RNN's input products
in one stage, the recurrent ones in a chain of T) and ``kv_shuffle`` (shuffling
K and V together changes no output).

Self-attention: ``unprojected_symmetry`` (the score grid is symmetric, the
weights are not), ``unequal_lengths`` (does the longest vector take the row?)
and ``softmax_jacobian`` (the softmax's Jacobian against d_k, scaled and not).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from harness.analysis import depth, trace
from harness.infra import timing
from harness.infra.config import LessonConfig
from harness.kernels import attention
from harness.kernels import rnn as rnn_kernel
from harness.kernels.blas import matmul
from harness.models import reference

DEFAULT = LessonConfig()
DRAWS = 200                 # draws of the cheap experiments below (the d_k one uses config.draws)
T_Y, T_X, D_H, D_A = 8, 6, 5, 4      # the additive lesson's example sizes


def _additive_draw(rng, t_y=T_Y, t_x=T_X, d_s=D_H, d_h=D_H, d_a=D_A):
    """Random states and weights at the lesson's scales (states 0.6, weights 0.5)."""
    return (rng.normal(size=(t_y, d_s)) * 0.6, rng.normal(size=(t_x, d_h)) * 0.6,
            rng.normal(size=(d_a, d_s)) * 0.5, rng.normal(size=(d_a, d_h)) * 0.5,
            rng.normal(size=d_a) * 0.5)


def _scores(S, H, Wsa, Wha, va):
    """e_ij = va . tanh(Wsa s_i + Wha h_j), the lesson's NumPy (not the kernel)."""
    return np.tanh((S @ Wsa.T)[:, None, :] + (H @ Wha.T)[None, :, :]) @ va


# ----------------------------------------------------------------------------- additive attention

def additive_bias(draws=DRAWS, seed=0):
    """A bias b added to every score of a row (the output neuron's bias) against one added per
    column, over ``draws`` draws. Columns: draw, added ('per-row constant' or 'per-column
    constant'), max_abs_change (the largest change of a weight against the kernel's alpha)."""
    rng = np.random.default_rng(seed)
    rows = []
    for n in range(draws):
        S, H, Wsa, Wha, va = _additive_draw(rng)
        alpha = attention.alignment(S, H, Wsa, Wha, va)
        E = _scores(S, H, Wsa, Wha, va)
        for added, b in (("per-row constant", rng.normal(size=(T_Y, 1)) * 3),
                         ("per-column constant", rng.normal(size=(1, T_X)) * 3)):
            rows.append({"draw": n, "added": added,
                         "max_abs_change": float(np.abs(reference.softmax_rows(E + b)
                                                        - alpha).max())})
    return pd.DataFrame(rows)


WIDTHS = ((5, 5), (3, 8), (8, 3), (1, 6))     # (d_s, d_h): equal, and each wider


def additive_widths(widths=WIDTHS, seed=0, step=1e-6):
    """The alignment's backward at decoder width d_s and encoder width d_h against central
    differences of l = sum_i dC_i . c_i. Columns: d_s, d_h, d_a, params (2 d_a d_h + d_a when
    d_s = d_h; d_a (d_s + d_h + 1) in general), fd_rel_err (largest error over dS, dH, dWsa,
    dWha, dva, relative to the largest gradient entry)."""
    rows = []
    for d_s, d_h in widths:
        rng = np.random.default_rng([seed, d_s, d_h])
        S, H, Wsa, Wha, va = args = _additive_draw(rng, d_s=d_s, d_h=d_h)
        dC = rng.normal(size=(T_Y, d_h))
        g = attention.alignment_backward(*args, dC)
        nums = []
        for x in args:
            num = np.zeros_like(x)
            for idx in np.ndindex(x.shape):
                old = x[idx]
                vals = []
                for s in (step, -step):
                    x[idx] = old + s
                    vals.append(float((dC * (attention.alignment(S, H, Wsa, Wha, va) @ H)).sum()))
                x[idx] = old
                num[idx] = (vals[0] - vals[1]) / (2 * step)
            nums.append(num)
        scale = max(np.abs(n).max() for n in nums)
        err = max(float(np.abs(getattr(g, k) - n).max()) / scale
                  for k, n in zip(("dS", "dH", "dWsa", "dWha", "dva"), nums))
        rows.append({"d_s": d_s, "d_h": d_h, "d_a": D_A, "params": Wsa.size + Wha.size + va.size,
                     "fd_rel_err": err})
    return pd.DataFrame(rows)


def score_gradient_rows(draws=DRAWS, seed=0, step=1e-6):
    """dl/de_ij by central differences of l(E) = sum_i G_i . (softmax(E)_i H), at the scores of
    a random draw. Columns: draw, max_abs_row_sum (largest |sum_j dl/de_ij| over rows),
    max_abs_entry (largest |dl/de_ij|), formula_err (largest difference from the lesson's
    alpha_ij G_i . (h_j - c_i))."""
    rng = np.random.default_rng(seed)
    rows = []
    for n in range(draws):
        S, H, Wsa, Wha, va = _additive_draw(rng)
        G = rng.normal(size=(T_Y, D_H))
        E = _scores(S, H, Wsa, Wha, va)
        dE = np.empty_like(E)
        for i, j in np.ndindex(E.shape):
            vals = []
            for s in (step, -step):
                Ep = E.copy()
                Ep[i, j] += s
                vals.append(float((G * (reference.softmax_rows(Ep) @ H)).sum()))
            dE[i, j] = (vals[0] - vals[1]) / (2 * step)
        alpha = attention.alignment(S, H, Wsa, Wha, va)
        C = alpha @ H
        formula = alpha * (G @ H.T - (G * C).sum(axis=1, keepdims=True))
        rows.append({"draw": n, "max_abs_row_sum": float(np.abs(dE.sum(axis=1)).max()),
                     "max_abs_entry": float(np.abs(dE).max()),
                     "formula_err": float(np.abs(dE - formula).max())})
    return pd.DataFrame(rows)


ENCODER_T, ENCODER_D, ENCODER_RHO = 40, 8, 0.9


def encoder_routes(draws=DRAWS, T_x=ENCODER_T, d=ENCODER_D, rho=ENCODER_RHO, seed=0):
    """A tanh-RNN encoder h_j = tanh(W_hh h_{j-1} + W_xh x_j) (W_hh orthogonal times rho),
    the additive alignment over its states and a toy loss l = sum_i G_i . c_i. dl/dx_j is
    split into the attention route (dl/dh_j from the alignment alone, back through x_j's own
    step: no W_hh) and the recurrence route (the rest, which reaches h_j through h_{j+1} and
    crosses W_hh at least once); beside them, the gradient through the last state h_{T_x}
    alone (what a decoder reading only the summary would send back).

    Columns: distance (T_x - j), route ('attention', 'recurrence', 'last state'),
    mean_log10_norm (over draws, of ||dl/dx_j|| by that route), log10_lo / log10_hi (its
    95 % interval, +- 1.96 standard errors), w_hh_products (the W_hh factors on the route:
    0 for the attention route, at least 1 for the recurrence route, T_x - j for the last
    state), draws.
    """
    rng = np.random.default_rng(seed)
    logs = {r: np.empty((draws, T_x)) for r in ("attention", "recurrence", "last state")}
    for n in range(draws):
        Qm, _ = np.linalg.qr(rng.normal(size=(d, d)))
        W_hh = rho * Qm
        W_xh = rng.normal(size=(d, d)) / math.sqrt(d)
        X = rng.normal(size=(T_x, d))
        H = rnn_kernel.forward(X, W_xh, W_hh)                       # (T_x, d)
        S, _, Wsa, Wha, va = _additive_draw(rng, t_x=T_x, d_s=d, d_h=d)
        G = rng.normal(size=(T_Y, d))
        dH = attention.alignment_backward(S, H, Wsa, Wha, va, G).dH    # both attention routes
        total = rnn_kernel.backward(X, H, W_xh, W_hh, dH).dX
        own = ((1.0 - H ** 2) * dH) @ W_xh                             # x_j's own step only
        last = np.zeros_like(H)
        last[-1] = dH[-1] + dH[:-1].sum(axis=0)        # the same total sent to h_{T_x} alone
        via_last = rnn_kernel.backward(X, H, W_xh, W_hh, last).dX
        for route, g in (("attention", own), ("recurrence", total - own), ("last state", via_last)):
            logs[route][n] = np.log10(np.linalg.norm(g, axis=1) + 1e-300)
    rows = []
    for route, L in logs.items():
        for j in range(T_x):
            dist = T_x - 1 - j                 # row j is position j + 1: distance T_x - (j + 1)
            if route == "recurrence" and dist == 0:
                continue                       # the last position has no later state
            v = L[:, j]
            half = 1.96 * v.std(ddof=1) / math.sqrt(v.size)
            rows.append({"distance": dist, "route": route, "mean_log10_norm": float(v.mean()),
                         "log10_lo": float(v.mean() - half), "log10_hi": float(v.mean() + half),
                         "w_hh_products": {"attention": 0, "recurrence": 1,
                                           "last state": dist}[route],
                         "draws": draws})
    return pd.DataFrame(rows).sort_values(["route", "distance"], ignore_index=True)


def _additive_trace(T_y, T_x, d, d_a):
    """The lesson's additive scores, traced: one op list with parts named after the weights."""
    g = trace.Graph(weight_parts={"Wsa": "Wsa", "Wha": "Wha", "va": "va"}, seq_axis_label="T_x")
    S = trace.leaf(g, "S", (T_y, d), ("T_y", "d_s"))
    H = trace.leaf(g, "H", (T_x, d), ("T_x", "d_h"), source_row=0)
    Wsa = trace.leaf(g, "Wsa", (d_a, d), ("d_a", "d_s"))
    Wha = trace.leaf(g, "Wha", (d_a, d), ("d_a", "d_h"))
    va = trace.leaf(g, "va", (d_a, 1), ("d_a", "1"))
    Ps, Ph = S @ Wsa.T, H @ Wha.T                                 # (T_y, d_a), (T_x, d_a)
    np.tanh(Ps.reshape((T_y, 1, d_a)) + Ph.reshape((1, T_x, d_a))) @ va
    return g


def _dot_trace(T_y, T_x, d, d_a):
    """A multiplicative grid of the same size, traced: (Wsa s_i) . (Wha h_j) for every pair,
    the whole grid one matrix product of the two projections."""
    g = trace.Graph(weight_parts={"Wsa": "Wsa", "Wha": "Wha"}, seq_axis_label="T_x")
    S = trace.leaf(g, "S", (T_y, d), ("T_y", "d_s"))
    H = trace.leaf(g, "H", (T_x, d), ("T_x", "d_h"), source_row=0)
    Wsa = trace.leaf(g, "Wsa", (d_a, d), ("d_a", "d_s"))
    Wha = trace.leaf(g, "Wha", (d_a, d), ("d_a", "d_h"))
    (S @ Wsa.T) @ (H @ Wha.T).T                                   # (T_y, T_x)
    return g


COST_SIZES = ((8, 6), (20, 20), (60, 60))      # (T_y, T_x): the lesson's example, and 60 by 60


def additive_cost(sizes=COST_SIZES, d=64, d_a=64):
    """Traced, per (T_y, T_x): the projections (rows of Wsa s_i and Wha h_j), the tanh
    evaluations, the d_a-wide vectors built pair by pair, and the matrix products whose
    output is the T_y x T_x grid, for the additive scores and for a dot-product grid of the
    same size. Columns: T_y, T_x, d, d_a, score ('additive' or 'dot product'),
    projection_rows, tanh_evaluations, pair_vectors, grid_matrix_products (products of two
    matrices whose output is the whole grid: the additive scores' read va . tanh(p_ij) is
    T_y T_x separate dot products of d_a terms instead), macs (every multiplication)."""
    rows = []
    for T_y, T_x in sizes:
        for score, g in (("additive", _additive_trace(T_y, T_x, d, d_a)),
                         ("dot product", _dot_trace(T_y, T_x, d, d_a))):
            rows.append({
                "T_y": T_y, "T_x": T_x, "d": d, "d_a": d_a, "score": score,
                "projection_rows": sum(op.shape[0] for op in g.ops
                                       if op.kind == "matmul" and op.part in ("Wsa", "Wha")),
                "tanh_evaluations": sum(op.numel for op in g.ops if op.kind == "tanh"),
                "pair_vectors": sum(op.numel // op.shape[-1] for op in g.ops
                                    if op.kind == "add" and op.shape[:2] == (T_y, T_x)),
                "grid_matrix_products": sum(op.kind == "matmul" and op.shape == (T_y, T_x)
                                            for op in g.ops),
                "macs": sum(op.macs for op in g.ops)})
    return pd.DataFrame(rows)


TIMING_T, TIMING_D = 60, 64        # "una frase de sesenta tokens traducida a sesenta"


def additive_timing(T=TIMING_T, d=TIMING_D, rounds=9, min_sample_s=0.02, seed=0):
    """The additive alignment (``attention.alignment``) against a dot-product grid of the same
    size (softmax((S Wsa^T)(H Wha^T)^T), its products through BLAS), timed in interleaved
    rounds. One row: T_y, T_x, d, d_a, additive_s and dot_s (median seconds per call),
    ratio (additive / dot), ratio_lo / ratio_hi (95 % interval from paired resampling of the
    rounds), rounds."""
    rng = np.random.default_rng(seed)
    S, H, Wsa, Wha, va = _additive_draw(rng, t_y=T, t_x=T, d_s=d, d_h=d, d_a=d)

    def dot():
        return reference.softmax_rows(matmul(matmul(S, Wsa.T), matmul(H, Wha.T).T))

    samples, _ = timing.time_interleaved(
        {"additive": lambda: attention.alignment(S, H, Wsa, Wha, va), "dot": dot},
        rounds, min_sample_s, seed=seed)
    ratio, lo, hi = timing.paired_ratio(samples["additive"], samples["dot"], seed)
    return pd.DataFrame([{"T_y": T, "T_x": T, "d": d, "d_a": d,
                          "additive_s": float(np.median(samples["additive"])),
                          "dot_s": float(np.median(samples["dot"])),
                          "ratio": ratio, "ratio_lo": lo, "ratio_hi": hi, "rounds": rounds}])


# ----------------------------------------------------------------------------- goodbye to recurrence

def _chain(g, part):
    """The longest chain of ``part``'s products that must run one after another."""
    chain = []
    for op in g.ops:
        before = max((chain[i] for i, _ in op.deps), default=0)
        chain.append(before + (op.kind == "matmul" and op.part == part))
    return max(chain)


def recurrence_halves(T_values=(50, 200, 800), d=16):
    """The traced RNN's two products per step: W_xh x_t (part 'input') and W_hh h_{t-1} (part
    'recurrence'). Columns: T, d, part, products (matrix products the trace makes for that
    part), rows (vectors multiplied, over all products), chain (the longest run of that part's
    products that wait on one another)."""
    rows = []
    for T in T_values:
        g = depth.trace_model("rnn", T, d).graph
        for part in ("input", "recurrence"):
            ops = [op for op in g.ops if op.kind == "matmul" and op.part == part]
            rows.append({"T": T, "d": d, "part": part, "products": len(ops),
                         "rows": sum(op.numel // op.shape[-1] for op in ops),
                         "chain": _chain(g, part)})
    return pd.DataFrame(rows)


KV_T, KV_D = 6, 16


def kv_shuffle(draws=DRAWS, T=KV_T, d=KV_D, seed=0):
    """Self-attention's output Y = softmax(Q K^T / sqrt(d)) V with the rows of K and V shuffled
    by one permutation, K alone shuffled, and X shuffled (Y compared with Y's rows shuffled the
    same way). Columns: draw, shuffled ('K and V together', 'K alone', 'X, output unshuffled'),
    max_abs_change (largest |Y' - Y|, or |Y(PX) - P Y(X)|), max_abs_output."""
    rng = np.random.default_rng(seed)
    rows = []
    for n in range(draws):
        X = rng.normal(size=(T, d))
        Wq, Wk, Wv = (rng.normal(size=(d, d)) / math.sqrt(d) for _ in range(3))
        Q, K, V = X @ Wq, X @ Wk, X @ Wv
        P = rng.permutation(T)
        while (P == np.arange(T)).all():
            P = rng.permutation(T)

        def mix(Q, K, V):
            return reference.softmax_rows(Q @ K.T / math.sqrt(d)) @ V

        Y = mix(Q, K, V)
        Yx, _ = attention.forward(X[P], Wq, Wk, Wv)
        for what, change in (("K and V together", mix(Q, K[P], V[P]) - Y),
                             ("K alone", mix(Q, K[P], V) - Y),
                             ("X, output unshuffled", Yx - Y[P])):
            rows.append({"draw": n, "shuffled": what, "max_abs_change": float(np.abs(change).max()),
                         "max_abs_output": float(np.abs(Y).max())})
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- self-attention

def unprojected_symmetry(draws=DRAWS, T=6, d=16, seed=0):
    """Q = K = V = X (no projections, the bare dot product): the score grid X X^T and the
    weights A = softmax(X X^T), for tokens of random lengths (0.5 to 3). Columns: draw,
    score_asymmetry (max |E - E^T|), weight_asymmetry (max |A - A^T|)."""
    rng = np.random.default_rng(seed)
    rows = []
    for n in range(draws):
        X = rng.normal(size=(T, d))
        X *= rng.uniform(0.5, 3.0, size=(T, 1)) / np.linalg.norm(X, axis=1, keepdims=True)
        _, A = attention.forward(X, scale=False)
        E = matmul(X, X.T)
        rows.append({"draw": n, "score_asymmetry": float(np.abs(E - E.T).max()),
                     "weight_asymmetry": float(np.abs(A - A.T).max())})
    return pd.DataFrame(rows)


LENGTHS = (1.0, 3.0)       # token lengths drawn uniformly between the lesson's 1 and 3


def unequal_lengths(draws=DRAWS, T=6, d=DEFAULT.d_model, lengths=LENGTHS, seed=0):
    """Unprojected self-attention over tokens of unequal lengths (uniform between
    ``lengths``), random directions. Columns: draw, rows (the T - 1 rows other than the longest
    token's own), rows_max_on_longest (of those, rows whose largest weight is the longest
    token's), rows_max_on_diagonal (of those, rows whose largest weight is their own)."""
    rng = np.random.default_rng(seed)
    rows = []
    for n in range(draws):
        X = rng.normal(size=(T, d))
        r = rng.uniform(*lengths, size=T)
        X *= (r / np.linalg.norm(X, axis=1))[:, None]
        _, A = attention.forward(X, scale=False)
        top, longest = A.argmax(axis=1), int(r.argmax())
        others = np.arange(T) != longest
        rows.append({"draw": n, "rows": T - 1,
                     "rows_max_on_longest": int((top[others] == longest).sum()),
                     "rows_max_on_diagonal": int((top[others] == np.arange(T)[others]).sum())})
    return pd.DataFrame(rows)


def softmax_jacobian(config=DEFAULT):
    """The size of the row softmax's Jacobian d alpha_i / d e_i (Frobenius norm, mean over the
    rows of a draw) on the d_k experiment's draws (``lessons.row_max_draws``' Q and K), scaled
    by 1/sqrt(d_k) and not. ||J||_F^2 = sum a^2 - 2 sum a^3 + (sum a^2)^2 for J = diag(a) - a a^T.

    Columns: d_k, scaled, median_norm, mean_log10_norm, log10_lo / log10_hi (its 95 %
    interval, +- 1.96 standard errors), draws.
    """
    T = 6
    rng = np.random.default_rng(config.seed)
    d_max = max(config.d_k_values)
    Q = rng.normal(size=(config.draws, T, d_max))
    K = rng.normal(size=(config.draws, T, d_max))
    rows = []
    for d_k in config.d_k_values:
        E = np.einsum("nik,njk->nij", Q[..., :d_k], K[..., :d_k])
        for scaled, div in ((False, 1.0), (True, math.sqrt(d_k))):
            a = reference.softmax_rows(E / div)
            s2 = (a ** 2).sum(axis=-1)
            norm = np.sqrt(np.maximum(s2 - 2 * (a ** 3).sum(axis=-1) + s2 ** 2, 0.0)).mean(axis=-1)
            v = np.log10(norm + 1e-300)
            half = 1.96 * v.std(ddof=1) / math.sqrt(v.size)
            rows.append({"d_k": d_k, "scaled": scaled, "median_norm": float(np.median(norm)),
                         "mean_log10_norm": float(v.mean()), "log10_lo": float(v.mean() - half),
                         "log10_hi": float(v.mean() + half), "draws": int(v.size)})
    return pd.DataFrame(rows)


def self_attention_shapes(T_values=(6, 9), d_model=DEFAULT.d_model, d_k=4, d_v=3, seed=0):
    """The self-attention layer at two lengths with the same three matrices ("cambia T a 9").
    Columns: T, map_rows, map_cols, output_rows, params (the sizes of dWq, dWk, dWv from the
    kernel's backward), row_sum_err (largest |sum_j alpha_ij - 1|)."""
    rng = np.random.default_rng(seed)
    Wq, Wk = (rng.normal(size=(d_model, d_k)) for _ in range(2))
    Wv = rng.normal(size=(d_model, d_v))
    rows = []
    for T in T_values:
        X = rng.normal(size=(T, d_model))
        Y, A = attention.forward(X, Wq, Wk, Wv)
        g = attention.backward(X, Wq, Wk, Wv, A, np.ones_like(Y))
        rows.append({"T": T, "map_rows": A.shape[0], "map_cols": A.shape[1],
                     "output_rows": Y.shape[0], "params": g.dWq.size + g.dWk.size + g.dWv.size,
                     "row_sum_err": float(np.abs(A.sum(axis=1) - 1).max())})
    return pd.DataFrame(rows)
