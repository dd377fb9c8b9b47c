"""Every column the lesson measurements write (``lesson_checks``, ``lessons``, ``figure1``),
intervals included, against an answer found another way: a closed form, a conservation law
(the value and score routes sum to the whole gradient; the attention and recurrence routes to
dl/dx), or a brute-force twin at a small size that redraws the same numbers and computes them
in plain loops and central differences, never through the kernel under test."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from harness.analysis import figure1 as f1
from harness.analysis import lesson_checks as lc
from harness.analysis import lessons
from harness.infra.config import LessonConfig


def softmax(e):
    """One row's softmax, in a loop."""
    z = [math.exp(x - max(e)) for x in e]
    return np.array([x / sum(z) for x in z])


def rows_softmax(E):
    return np.array([softmax(list(e)) for e in E])


def fd(f, x, step=1e-6):
    """Central differences of the scalar f at x, one entry at a time."""
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[idx] += step
        xm[idx] -= step
        g[idx] = (f(xp) - f(xm)) / (2 * step)
    return g


def interval(v):
    """mean and mean -+ 1.96 standard errors, by their definitions."""
    n = len(v)
    m = sum(v) / n
    se = math.sqrt(sum((x - m) ** 2 for x in v) / (n - 1) / n)
    return m, m - 1.96 * se, m + 1.96 * se


def quantile(v, q):
    """The linearly interpolated quantile (NumPy's default), from the sorted draws."""
    s = sorted(v)
    pos = q * (len(s) - 1)
    lo = int(math.floor(pos))
    return s[lo] + (pos - lo) * (s[min(lo + 1, len(s) - 1)] - s[lo])


def _draw(rng, t_y=lc.T_Y, t_x=lc.T_X, d_s=lc.D_H, d_h=lc.D_H, d_a=lc.D_A):
    """The draws of ``lesson_checks._additive_draw``, in its order."""
    return (rng.normal(size=(t_y, d_s)) * 0.6, rng.normal(size=(t_x, d_h)) * 0.6,
            rng.normal(size=(d_a, d_s)) * 0.5, rng.normal(size=(d_a, d_h)) * 0.5,
            rng.normal(size=d_a) * 0.5)


def scores(S, H, Wsa, Wha, va, nl=np.tanh):
    """e_ij = va . nl(Wsa s_i + Wha h_j), pair by pair."""
    return np.array([[float(va @ nl(Wsa @ s + Wha @ h)) for h in H] for s in S])


def context_loss(S, Wsa, Wha, va, G):
    """l(H) = sum_i G_i . c_i with c_i = sum_j alpha_ij h_j."""
    return lambda H: float((G * (rows_softmax(scores(S, H, Wsa, Wha, va)) @ H)).sum())


# ============================================================================ additive attention

def test_additive_bias_against_loops():
    got = lc.additive_bias(draws=3, seed=5)
    rng = np.random.default_rng(5)
    want = []
    for n in range(3):
        S, H, Wsa, Wha, va = _draw(rng)
        E = scores(S, H, Wsa, Wha, va)
        alpha = rows_softmax(E)
        for added, b in (("per-row constant", rng.normal(size=(lc.T_Y, 1)) * 3),
                         ("per-column constant", rng.normal(size=(1, lc.T_X)) * 3)):
            want.append((n, added, np.abs(rows_softmax(E + b) - alpha).max()))
    assert list(zip(got.draw, got.added)) == [w[:2] for w in want]
    np.testing.assert_allclose(got.max_abs_change, [w[2] for w in want], rtol=0, atol=1e-13)
    assert (got[got.added == "per-column constant"].max_abs_change > 1e-3).all()


def test_additive_widths_params_are_the_closed_form_and_the_backward_agrees():
    widths = ((2, 5), (3, 3), (4, 1))
    w = lc.additive_widths(widths=widths)
    assert list(zip(w.d_s, w.d_h)) == list(widths) and (w.d_a == lc.D_A).all()
    assert list(w.params) == [lc.D_A * (d_s + d_h + 1) for d_s, d_h in widths]
    eq = w[w.d_s == w.d_h]
    assert len(eq) == 1 and (eq.params == 2 * lc.D_A * eq.d_h + lc.D_A).all()
    # the error of central differences with step 1e-6: rounding ~1e-10, never zero, never 1e-6
    assert (w.fd_rel_err > 0).all() and (w.fd_rel_err < 1e-7).all()


def test_score_gradient_rows_against_the_closed_form_gradient():
    got = lc.score_gradient_rows(draws=2, seed=3)
    rng = np.random.default_rng(3)
    for n in range(2):
        S, H, Wsa, Wha, va = _draw(rng)
        G = rng.normal(size=(lc.T_Y, lc.D_H))
        alpha = rows_softmax(scores(S, H, Wsa, Wha, va))
        C = alpha @ H
        # dl/de_ij = alpha_ij G_i . (h_j - c_i), loop by loop: each row sums to zero exactly
        dE = np.array([[alpha[i, j] * G[i] @ (H[j] - C[i]) for j in range(lc.T_X)]
                       for i in range(lc.T_Y)])
        r = got.iloc[n]
        assert r.draw == n
        assert r.max_abs_entry == pytest.approx(np.abs(dE).max(), rel=1e-7)
        assert r.max_abs_row_sum < 1e-8 and r.formula_err < 1e-8
        assert r.max_abs_row_sum >= abs(dE.sum(axis=1)).max()      # rounding above exact zero


def _encoder_twin(draws, T_x, d, rho, seed):
    """``encoder_routes`` by central differences: the whole dl/dx_j through the encoder, the
    attention route with only x_j's own step moved (the later states held), the recurrence
    route the difference (the routes sum to the total), and the summed dl/dH sent to h_T."""
    rng = np.random.default_rng(seed)
    logs = {r: [] for r in ("attention", "recurrence", "last state")}
    for _ in range(draws):
        Qm, _ = np.linalg.qr(rng.normal(size=(d, d)))
        W_hh = rho * Qm
        W_xh = rng.normal(size=(d, d)) / math.sqrt(d)
        X = rng.normal(size=(T_x, d))
        S, _, Wsa, Wha, va = _draw(rng, t_x=T_x, d_s=d, d_h=d)
        G = rng.normal(size=(lc.T_Y, d))

        def encode(X):
            h, H = np.zeros(d), []
            for x in X:
                h = np.tanh(W_xh @ x + W_hh @ h)
                H.append(h)
            return np.array(H)

        loss = context_loss(S, Wsa, Wha, va, G)
        H = encode(X)
        total = fd(lambda X_: loss(encode(X_)), X)
        own = np.zeros_like(X)
        for j in range(T_x):
            prev = H[j - 1] if j else np.zeros(d)

            def moved(xj, j=j, prev=prev):
                H_ = H.copy()
                H_[j] = np.tanh(W_xh @ xj + W_hh @ prev)
                return loss(H_)
            own[j] = fd(moved, X[j])
        dH = fd(loss, H)
        summed = dH.sum(axis=0)
        last = fd(lambda X_: float(summed @ encode(X_)[-1]), X)
        for route, g in (("attention", own), ("recurrence", total - own), ("last state", last)):
            # the last position's recurrence route is zero: the kernel's floor, 1e-300
            logs[route].append([math.log10(np.linalg.norm(row) + 1e-300) for row in g])
    return {r: np.array(v) for r, v in logs.items()}


def test_encoder_routes_every_column_against_central_differences():
    draws, T_x, d, rho = 4, 5, 3, 0.9
    got = lc.encoder_routes(draws=draws, T_x=T_x, d=d, rho=rho, seed=2)
    twin = _encoder_twin(draws, T_x, d, rho, seed=2)
    assert list(got.columns) == ["distance", "route", "mean_log10_norm", "log10_lo", "log10_hi",
                                 "w_hh_products", "draws"]
    want = []
    for route in ("attention", "last state", "recurrence"):                 # sorted by route
        for dist in range(T_x):
            if route == "recurrence" and dist == 0:
                continue
            m, lo, hi = interval(list(twin[route][:, T_x - 1 - dist]))
            whh = {"attention": 0, "recurrence": 1, "last state": dist}[route]
            want.append((dist, route, m, lo, hi, whh, draws))
    assert len(got) == len(want) == 3 * T_x - 1
    for g, w in zip(got.itertuples(index=False), want):
        assert (g.distance, g.route, g.w_hh_products, g.draws) == (w[0], w[1], w[5], w[6])
        # central differences: 1e-9 of each norm, 1e-8 in log10
        assert (g.mean_log10_norm, g.log10_lo, g.log10_hi) == pytest.approx(w[2:5], abs=1e-7)
    # the last state at distance 0 is the whole attention gradient sent to h_T alone: the
    # attention route there plus the other states' share, never less than the route's own
    assert (got.log10_lo < got.mean_log10_norm).all() and (got.mean_log10_norm < got.log10_hi).all()


def test_additive_cost_at_the_report_sizes_is_the_closed_form():
    c = lc.additive_cost().set_index(["T_y", "T_x", "score"])
    for T_y, T_x in lc.COST_SIZES:
        a, g = c.loc[(T_y, T_x, "additive")], c.loc[(T_y, T_x, "dot product")]
        assert (a.d, a.d_a) == (64, 64)
        assert a.projection_rows == g.projection_rows == T_y + T_x
        assert (a.pair_vectors, a.tanh_evaluations) == (T_y * T_x, T_y * T_x * 64)
        assert (g.pair_vectors, g.tanh_evaluations) == (0, 0)
        assert (a.grid_matrix_products, g.grid_matrix_products) == (0, 1)
        assert a.macs == g.macs == (T_y + T_x) * 64 * 64 + T_y * T_x * 64


def test_additive_timing_reads_the_rounds_medians_and_their_paired_ratio(monkeypatch):
    """A timer that returns fixed rounds: the additive call 3 times the dot grid in every round,
    so the medians are the rounds' medians and every resampled ratio is 3 (the interval too);
    with rounds whose ratios differ the interval lies within their range."""
    def fake(ratios):
        def time_interleaved(fns, rounds, min_sample_s, seed=0):
            dot = np.linspace(1.0, 2.0, rounds) ** 2
            return {"additive": dot * ratios(rounds), "dot": dot}, {k: 1 for k in fns}
        return time_interleaved

    monkeypatch.setattr(lc.timing, "time_interleaved", fake(lambda n: np.full(n, 3.0)))
    t = lc.additive_timing(T=4, d=3, rounds=7).iloc[0]
    dot = np.linspace(1.0, 2.0, 7) ** 2
    assert (t.T_y, t.T_x, t.d, t.d_a, t.rounds) == (4, 4, 3, 3, 7)
    assert t.dot_s == sorted(dot)[3] and t.additive_s == pytest.approx(3 * sorted(dot)[3])
    assert (t.ratio, t.ratio_lo, t.ratio_hi) == pytest.approx((3.0, 3.0, 3.0), rel=1e-12)
    spread = np.array([2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0])
    monkeypatch.setattr(lc.timing, "time_interleaved", fake(lambda n: spread))
    t = lc.additive_timing(T=4, d=3, rounds=7).iloc[0]
    assert t.ratio == pytest.approx(np.median(dot * spread) / np.median(dot))
    assert spread.min() <= t.ratio_lo < t.ratio < t.ratio_hi <= spread.max()


# ============================================================================ goodbye to recurrence

def test_recurrence_halves_at_the_report_lengths_is_the_closed_form():
    h = lc.recurrence_halves(T_values=(50, 200), d=4).set_index(["T", "part"])
    for T in (50, 200):
        assert tuple(h.loc[(T, "input"), ["d", "products", "rows", "chain"]]) == (4, 1, T, 1)
        assert tuple(h.loc[(T, "recurrence"), ["d", "products", "rows", "chain"]]) == (4, T, T, T)


def test_kv_shuffle_against_loops():
    draws, T, d = 3, 4, 5
    got = lc.kv_shuffle(draws=draws, T=T, d=d, seed=1)
    rng = np.random.default_rng(1)
    want = []
    for n in range(draws):
        X = rng.normal(size=(T, d))
        Wq, Wk, Wv = (rng.normal(size=(d, d)) / math.sqrt(d) for _ in range(3))
        Q, K, V = X @ Wq, X @ Wk, X @ Wv
        P = rng.permutation(T)
        while (P == np.arange(T)).all():
            P = rng.permutation(T)

        def mix(Q, K, V):
            return np.array([softmax([q @ k / math.sqrt(d) for k in K]) @ V for q in Q])
        Y = mix(Q, K, V)
        out = np.abs(Y).max()
        want += [(n, "K and V together", 0.0, out),
                 (n, "K alone", np.abs(mix(Q, K[P], V) - Y).max(), out),
                 (n, "X, output unshuffled", 0.0, out)]
    assert list(zip(got.draw, got.shuffled)) == [w[:2] for w in want]
    np.testing.assert_allclose(got.max_abs_change, [w[2] for w in want], rtol=0, atol=1e-13)
    np.testing.assert_allclose(got.max_abs_output, [w[3] for w in want], rtol=1e-13)


# ============================================================================ self-attention

def test_unprojected_symmetry_and_unequal_lengths_against_loops():
    s = lc.unprojected_symmetry(draws=3, T=4, d=5, seed=2)
    rng = np.random.default_rng(2)
    for n in range(3):
        X = rng.normal(size=(4, 5))
        X *= rng.uniform(0.5, 3.0, size=(4, 1)) / np.linalg.norm(X, axis=1, keepdims=True)
        A = rows_softmax([[x @ y for y in X] for x in X])
        assert s.score_asymmetry[n] == 0.0
        assert s.weight_asymmetry[n] == pytest.approx(np.abs(A - A.T).max(), rel=1e-12)
    u = lc.unequal_lengths(draws=12, T=5, d=4, seed=3)
    rng = np.random.default_rng(3)
    for n in range(12):
        X = rng.normal(size=(5, 4))
        r = rng.uniform(1.0, 3.0, size=5)
        X *= (r / np.linalg.norm(X, axis=1))[:, None]
        A = rows_softmax([[x @ y for y in X] for x in X])
        longest = int(np.argmax(r))
        others = [i for i in range(5) if i != longest]
        assert u.rows[n] == 4
        assert u.rows_max_on_longest[n] == sum(int(np.argmax(A[i])) == longest for i in others)
        assert u.rows_max_on_diagonal[n] == sum(int(np.argmax(A[i])) == i for i in others)
    assert 0 < u.rows_max_on_longest.sum() < u.rows.sum()          # the draws tell them apart


def test_softmax_jacobian_every_column_against_the_explicit_jacobians():
    cfg = LessonConfig(draws=5, d_k_values=(4, 16))
    j = lc.softmax_jacobian(cfg).set_index(["d_k", "scaled"])
    rng = np.random.default_rng(cfg.seed)
    Q, K = rng.normal(size=(5, 6, 16)), rng.normal(size=(5, 6, 16))
    for dk in (4, 16):
        for scaled in (False, True):
            norms = []
            for n in range(5):
                E = Q[n, :, :dk] @ K[n, :, :dk].T / (math.sqrt(dk) if scaled else 1.0)
                norms.append(np.mean([np.linalg.norm(np.diag(a) - np.outer(a, a))
                                      for a in rows_softmax(E)]))
            m, lo, hi = interval([math.log10(x) for x in norms])
            r = j.loc[(dk, scaled)]
            assert r.draws == 5
            assert r.median_norm == pytest.approx(sorted(norms)[2], rel=1e-12)
            assert (r.mean_log10_norm, r.log10_lo, r.log10_hi) == pytest.approx((m, lo, hi),
                                                                                 abs=1e-12)


def test_self_attention_shapes_against_the_closed_form():
    s = lc.self_attention_shapes(T_values=(3, 7), d_model=5, d_k=2, d_v=4)
    assert list(s["T"]) == list(s.map_rows) == list(s.map_cols) == list(s.output_rows) == [3, 7]
    assert (s.params == 5 * 2 + 5 * 2 + 5 * 4).all()
    assert (s.row_sum_err < 1e-15).all()


# ============================================================================ lessons.py

def _twin_maps(config):
    """``self_attention_maps``' weights by loops: softmax(r^2 x_i . x_j) unprojected, and
    softmax((x_i Wq) . (x_j Wk) / sqrt(d)) projected."""
    rng = np.random.default_rng(config.seed)
    X = rng.normal(size=(len(lessons.SENTENCE), config.d_model))
    X = X / np.linalg.norm(X, axis=1, keepdims=True)
    rng = np.random.default_rng(config.seed + 1)
    d = config.d_model
    Wq, Wk, _ = (rng.normal(size=(d, d)) / np.sqrt(d) for _ in range(3))
    maps = {f"no projections, length {r:g}": rows_softmax([[r * r * (x @ y) for y in X] for x in X])
            for r in config.token_lengths}
    r = config.token_lengths[0]
    maps[f"with projections, length {r:g}"] = rows_softmax(
        [[(r * x @ Wq) @ (r * y @ Wk) / math.sqrt(d) for y in X] for x in X])
    return maps


def test_self_attention_maps_and_diagonal_share_against_loops():
    cfg = LessonConfig()
    m = lessons.self_attention_maps(cfg)
    twin = _twin_maps(cfg)
    assert list(m.setting.unique()) == list(twin)
    for setting, A in twin.items():
        g = m[m.setting == setting]
        assert list(zip(g.i, g.j)) == [(i, j) for i in range(6) for j in range(6)]
        assert list(g["query"]) == [q for q in lessons.SENTENCE for _ in range(6)]
        assert list(g["key"]) == list(lessons.SENTENCE) * 6
        np.testing.assert_allclose(g.weight, A.ravel(), rtol=1e-12, atol=1e-15)
    share = lessons.diagonal_share(m).set_index("setting")
    for setting, A in twin.items():
        r = share.loc[setting]
        assert r.rows == 6
        assert r.rows_max_on_diagonal == sum(int(np.argmax(A[i])) == i for i in range(6))
        assert r.mean_self_weight == pytest.approx(np.trace(A) / 6, rel=1e-12)


def test_row_max_vs_dk_every_column_from_the_draws():
    cfg = LessonConfig(draws=40, d_k_values=(8, 64))
    x = lessons.row_max_draws(cfg)             # each draw checked by loops in test_lessons.py
    r = lessons.row_max_vs_dk(cfg)
    assert list(zip(r.d_k, r.scaled)) == [(8, False), (8, True), (64, False), (64, True)]
    for row in r.itertuples():
        v = list(x[:, (8, 64).index(row.d_k), int(row.scaled)])
        m, lo, hi = interval(v)
        assert row.draws == 40
        assert (row.row_max, row.mean_lo, row.mean_hi) == pytest.approx((m, lo, hi), rel=1e-12)
        assert (row.band_lo, row.band_hi) == pytest.approx((quantile(v, 0.025),
                                                            quantile(v, 0.975)), rel=1e-12)
    p = lessons.lesson_draw_percentiles(cfg)
    assert list(zip(p.d_k, p.scaled)) == [(8, False), (8, True)]    # 512 is not among d_k
    for row in p.itertuples():
        v = x[:, 0, int(row.scaled)]
        assert row.lesson_row_max == lessons.LESSON_ROW_MAX[(8, row.scaled)]
        assert row.percentile == 100 * sum(a < row.lesson_row_max for a in v) / 40
        assert row.mean_row_max == pytest.approx(sum(v) / 40, rel=1e-12)


def test_additive_maps_against_loops():
    a = lessons.additive_maps()
    S, H, Wsa, Wha, va, _ = lessons.lesson_additive_inputs()
    for setting, nl in (("tanh", np.tanh), ("no tanh", lambda z: z)):
        A = rows_softmax(scores(S, H, Wsa, Wha, va, nl))
        g = a[a.setting == setting]
        assert list(zip(g.i, g.j)) == [(i, j) for i in range(8) for j in range(6)]
        np.testing.assert_allclose(g.weight, A.ravel(), rtol=1e-12)
        assert (g.uniform == 1 / 6).all()


def _routes_twin(va_scale):
    """The two routes by which dl/dH arrives: the value route in closed form (h_j as a term of
    c_i: sum_i alpha_ij G_i) and the score route as what central differences of the lesson's
    loss leave over (the two sum to the whole gradient)."""
    S, H, Wsa, Wha, va, G = lessons.lesson_additive_inputs(va_scale)
    alpha = rows_softmax(scores(S, H, Wsa, Wha, va))
    value = np.array([sum(alpha[i, j] * G[i] for i in range(len(S))) for j in range(len(H))])
    total = fd(context_loss(S, Wsa, Wha, va, G), H)
    return alpha, value, total - value, total


def test_additive_routes_sum_to_the_whole_gradient_at_every_va_scale():
    r = lessons.lesson_additive_routes((0.5, 2.0))
    assert list(r.va_scale) == [0.5, 2.0]
    for row in r.itertuples():
        alpha, value, score, _ = _routes_twin(row.va_scale)
        assert row.value_norm == pytest.approx(np.linalg.norm(value), rel=1e-12)
        assert row.score_norm == pytest.approx(np.linalg.norm(score), rel=1e-7)
        assert row.value_over_score == pytest.approx(row.value_norm / row.score_norm, rel=1e-15)
        assert row.row_max == pytest.approx(alpha.max(axis=1).mean(), rel=1e-12)
    with pytest.raises(ValueError, match="va_scales"):
        lessons.lesson_additive_routes((0.5, 0.0))


def test_additive_figures_every_column_against_the_twin():
    f = lessons.lesson_additive_figures().iloc[0]
    alpha, value, score, total = _routes_twin(0.5)
    S, H, Wsa, Wha, va, _ = lessons.lesson_additive_inputs(0.5)
    assert f.params == 2 * 4 * 5 + 4 == 44
    assert f.mean_row_max == pytest.approx(alpha.max(axis=1).mean(), rel=1e-12)
    assert f.uniform == 1 / 6
    lin = rows_softmax(scores(S, H, Wsa, Wha, va, lambda z: z))
    assert f.no_tanh_row_spread == pytest.approx(np.ptp(lin, axis=0).max(), abs=1e-15)
    assert f.value_norm == pytest.approx(np.linalg.norm(value), rel=1e-12)
    assert f.score_norm == pytest.approx(np.linalg.norm(score), rel=1e-7)
    assert f.value_over_score == pytest.approx(f.value_norm / f.score_norm, rel=1e-15)
    # each route alone misses the other: its error is the other route's largest entry
    assert f.fd_err_value == pytest.approx(np.abs(score).max(), abs=1e-8)
    assert f.fd_err_score == pytest.approx(np.abs(value).max(), abs=1e-8)
    assert f.fd_err_both < 1e-8


# ============================================================================ figure 1

# per output row i of a box: how many rows of each input it reads (the closed forms)
def _reads(key, name, i, sz=f1.SIZES):
    if key == "encoder_attention":
        return sz.S
    if key == "decoder_masked_attention":
        return i + 1                                   # the mask: keys 0..i
    if key == "decoder_cross_attention" and name == "memory":
        return sz.S
    return 1


def _numeric_reach(box, name, r, sz=f1.SIZES, seed=0):
    """The box on numbers: the output rows that change when input ``name``'s row r moves."""
    rng = np.random.default_rng(seed)
    w = f1.box_weights(box, sz, rng)
    xs = {n: rng.normal(size=f1.input_shape(box, n, sz)) for n in box.inputs}
    y = box.run(w, sz, *xs.values())
    moved = dict(xs)
    moved[name] = xs[name].copy()
    moved[name][r] += rng.normal(size=xs[name].shape[1])
    return tuple(int(i) for i in np.flatnonzero((box.run(w, sz, *moved.values()) != y).any(axis=1)))


def test_every_box_lets_each_output_reach_the_rows_the_closed_form_says():
    sz = f1.SIZES
    table = f1.box_table().set_index("key")
    for box in f1.BOXES:
        most = 0
        for name in box.inputs:
            n_in = f1.input_shape(box, name)[0]
            n_out = sz.S if box.stack == "encoder" else sz.T
            reads = [0] * n_out
            for r in range(n_in):
                _, y = f1.trace_box(box, name, r)
                reached = f1.reached_rows(y)
                assert reached == _numeric_reach(box, name, r), (box.key, name, r)
                for i in reached:
                    reads[i] += 1
                most = max(most, len(reached))
            assert reads == [_reads(box.key, name, i) for i in range(n_out)], (box.key, name)
        assert table.loc[box.key, "rows_reached"] == most, box.key
    # the masked attention's first row reaches every later one; the cross-attention's memory
    assert table.loc["decoder_masked_attention", "rows_reached"] == sz.T
    assert table.loc["decoder_cross_attention", "rows_reached"] == sz.T
    assert table.loc["encoder_attention", "rows_reached"] == sz.S


def test_box_table_columns_against_the_figure_and_the_closed_forms():
    sz = f1.SIZES
    t = f1.box_table().set_index("key")
    d, f, S, T, V = sz.d, sz.d_ff, sz.S, sz.T, sz.vocab
    assert list(t.order) == list(range(1, 17))
    assert list(t.inputs) == [", ".join(b.inputs) for b in f1.BOXES]
    assert list(t.layers) == [sz.layers if b.in_layer else 1 for b in f1.BOXES]
    # multiplications (products and elementwise multiplies) summed over the box's layers:
    # 4 S d^2 + 2 S^2 d for self-attention, the mask keeping the grid's and the mix's
    # T (T + 1) / 2 pairs; 2 T d^2 + 2 S d^2 + 2 T S d for the cross-attention; 2 rows d d_ff
    # for the feed forward; one-hot rows times the table, then times sqrt(d), for the
    # embeddings; 2 rows d for a norm (its scale and its gain); none for the positional
    # encodings' sum and the softmax's exp and division
    N = sz.layers
    closed = {"input_embedding": S * V * d + S * d, "encoder_positions": 0,
              "encoder_attention": N * (4 * S * d * d + 2 * S * S * d),
              "encoder_norm1": N * 2 * S * d, "encoder_feed_forward": N * 2 * S * d * f,
              "encoder_norm2": N * 2 * S * d,
              "output_embedding": T * V * d + T * d, "decoder_positions": 0,
              "decoder_masked_attention": N * (4 * T * d * d + T * (T + 1) * d),
              "decoder_norm1": N * 2 * T * d,
              "decoder_cross_attention": N * (2 * T * d * d + 2 * S * d * d + 2 * T * S * d),
              "decoder_norm2": N * 2 * T * d, "decoder_feed_forward": N * 2 * T * d * f,
              "decoder_norm3": N * 2 * T * d, "linear": T * d * V, "softmax": 0}
    assert t.macs.to_dict() == closed
    assert (t.ops > 0).all()
    # the figure's operations are the boxes', each traced alone times its layers
    assert t.ops.sum() == len(f1.trace_figure1().graph.ops)


def test_output_reach_counts_are_the_mask():
    reach = f1.output_reach()
    T = f1.SIZES.T
    assert list(zip(reach.input, reach.position)) == (
        [("source", r) for r in range(f1.SIZES.S)] + [("target", r) for r in range(T)])
    want = [T] * f1.SIZES.S + [T - r for r in range(T)]
    assert list(reach.n_reached) == want == [len(r) for r in reach.reached]


def test_cost_over_heads_parameters_are_the_closed_form():
    frame = f1.cost_over_heads(8, 16, heads=(1, 4, 16))
    d = 16
    assert (frame.parameters == 4 * d * d + 4 * d).all()
    assert (frame.projections == 3 * 8 * d * d).all() and (frame.out_projection == 8 * d * d).all()
    assert list(frame["T"]) == [8] * 3 and list(frame.d) == [16] * 3
