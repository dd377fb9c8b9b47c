"""Plain NumPy twins of harness.kernels.transformer: one sequence at a time, one head at a
time, float64 whatever the input dtype, the weights stored, and each backward written out
op by op next to its forward. Slow and obviously right.

params use torch's state_dict keys, as the kernels do.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import erf

EPS = 1e-5


# ------------------------------------------------------------------ pieces

def layer_norm(x, gamma, beta):
    """x (T, d) -> (y, cache)."""
    mu = x.mean(axis=1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=1, keepdims=True)
    xhat = (x - mu) / np.sqrt(var + EPS)
    return xhat * gamma + beta, (xhat, 1.0 / np.sqrt(var + EPS), gamma)


def layer_norm_backward(dy, cache):
    xhat, rstd, gamma = cache
    d = xhat.shape[1]
    g = dy * gamma                                        # d xhat
    dx = rstd * (g - g.sum(axis=1, keepdims=True) / d - xhat * (g * xhat).sum(axis=1, keepdims=True) / d)
    return dx, (dy * xhat).sum(axis=0), dy.sum(axis=0)


def activation(h, name):
    if name == "relu":
        return np.maximum(h, 0.0)
    return 0.5 * h * (1.0 + erf(h / math.sqrt(2.0)))


def activation_grad(h, name):
    if name == "relu":
        return (h > 0.0).astype(np.float64)
    return 0.5 * (1.0 + erf(h / math.sqrt(2.0))) + h * np.exp(-0.5 * h * h) / math.sqrt(2.0 * math.pi)


def softmax_rows(S):
    E = np.exp(S - S.max(axis=1, keepdims=True))
    return E / E.sum(axis=1, keepdims=True)


def attention(xq, xkv, W, b, Wo, bo, heads, causal):
    """Multi-head attention of one sequence: xq (T, d) queries, xkv (S, d) keys and values."""
    d = xq.shape[1]
    d_k = d // heads
    Q = xq @ W[:d].T + b[:d]
    K = xkv @ W[d:2 * d].T + b[d:2 * d]
    V = xkv @ W[2 * d:].T + b[2 * d:]
    O = np.zeros_like(Q)
    weights = []
    for h in range(heads):
        c = slice(h * d_k, (h + 1) * d_k)
        S = Q[:, c] @ K[:, c].T / math.sqrt(d_k)
        if causal:
            S = np.where(np.tri(S.shape[0], S.shape[1], dtype=bool), S, -np.inf)
        A = softmax_rows(S)
        O[:, c] = A @ V[:, c]
        weights.append(A)
    return O @ Wo.T + bo, (xq, xkv, W, Wo, Q, K, V, O, weights)


def attention_backward(dZ, cache):
    xq, xkv, W, Wo, Q, K, V, O, weights = cache
    d = xq.shape[1]
    d_k = d // len(weights)
    dWo, dbo = dZ.T @ O, dZ.sum(axis=0)
    dO = dZ @ Wo
    dQ, dK, dV = np.zeros_like(Q), np.zeros_like(K), np.zeros_like(V)
    for h, A in enumerate(weights):
        c = slice(h * d_k, (h + 1) * d_k)
        dV[:, c] = A.T @ dO[:, c]
        dA = dO[:, c] @ V[:, c].T
        dS = A * (dA - (A * dA).sum(axis=1, keepdims=True)) / math.sqrt(d_k)   # softmax
        dQ[:, c] = dS @ K[:, c]
        dK[:, c] = dS.T @ Q[:, c]
    dW = np.concatenate([dQ.T @ xq, dK.T @ xkv, dV.T @ xkv])
    db = np.concatenate([dQ.sum(axis=0), dK.sum(axis=0), dV.sum(axis=0)])
    dxq = dQ @ W[:d]
    dxkv = dK @ W[d:2 * d] + dV @ W[2 * d:]
    return dxq, dxkv, dW, db, dWo, dbo


def feedforward(x, W1, b1, W2, b2, act):
    h = x @ W1.T + b1
    a = activation(h, act)
    return a @ W2.T + b2, (x, W1, W2, h, a, act)


def feedforward_backward(dF, cache):
    x, W1, W2, h, a, act = cache
    dW2, db2 = dF.T @ a, dF.sum(axis=0)
    dh = (dF @ W2) * activation_grad(h, act)
    return dh @ W1, dh.T @ x, dh.sum(axis=0), dW2, db2


# ------------------------------------------------------------------ layers

ENCODER = [("self_attn", "norm1"), ("linear", "norm2")]
DECODER = [("self_attn", "norm1"), ("multihead_attn", "norm2"), ("linear", "norm3")]


def _sublayer(name, x, memory, p, heads, act, causal):
    if name == "linear":
        return feedforward(x, p["linear1.weight"], p["linear1.bias"], p["linear2.weight"],
                           p["linear2.bias"], act)
    cross = name == "multihead_attn"
    return attention(x, memory if cross else x, p[name + ".in_proj_weight"],
                     p[name + ".in_proj_bias"], p[name + ".out_proj.weight"],
                     p[name + ".out_proj.bias"], heads, causal and not cross)


def _sequence_forward(stages, x, memory, p, heads, norm_first, act, causal):
    caches = []
    for name, norm in stages:
        g, b = p[norm + ".weight"], p[norm + ".bias"]
        if norm_first:                                   # x + F(LN(x))
            xn, ln = layer_norm(x, g, b)
            z, sub = _sublayer(name, xn, memory, p, heads, act, causal)
            x = x + z
        else:                                            # LN(x + F(x))
            z, sub = _sublayer(name, x, memory, p, heads, act, causal)
            x, ln = layer_norm(x + z, g, b)
        caches.append((ln, sub))
    return x, caches


def _sequence_backward(stages, dy, caches, norm_first, grads):
    dmemory = 0.0
    for (name, norm), (ln, sub) in zip(reversed(stages), reversed(caches)):
        if norm_first:
            dz = dy
        else:
            dz, dg, db = layer_norm_backward(dy, ln)
            grads[norm + ".weight"] += dg
            grads[norm + ".bias"] += db
        if name == "linear":
            dx_sub, dW1, db1, dW2, db2 = feedforward_backward(dz, sub)
            for k, g in zip(("linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias"),
                            (dW1, db1, dW2, db2)):
                grads[k] += g
        else:
            dxq, dxkv, dW, db_, dWo, dbo = attention_backward(dz, sub)
            for k, g in zip(("in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"),
                            (dW, db_, dWo, dbo)):
                grads[name + "." + k] += g
            if name == "multihead_attn":
                dmemory = dmemory + dxkv
                dx_sub = dxq
            else:
                dx_sub = dxq + dxkv                      # self-attention: x gives Q, K and V
        if norm_first:                                   # x_out = x + F(LN(x))
            dxn, dg, db = layer_norm_backward(dx_sub, ln)
            grads[norm + ".weight"] += dg
            grads[norm + ".bias"] += db
            dy = dy + dxn
        else:                                            # x_out = LN(x + F(x))
            dy = dz + dx_sub
    return dy, dmemory


def _batched(X):
    X = np.asarray(X, dtype=np.float64)
    return X if X.ndim == 3 else X[None]


def _params(params):
    return {k: np.asarray(v, dtype=np.float64) for k, v in params.items()}


def layer(stages, X, memory, params, heads, norm_first=False, activation="relu", causal=False):
    """Y like X, float64."""
    p = _params(params)
    X3 = _batched(X)
    M3 = _batched(memory) if memory is not None else [None] * len(X3)
    Y = np.stack([_sequence_forward(stages, x, m, p, heads, norm_first, activation, causal)[0]
                  for x, m in zip(X3, M3)])
    return Y.reshape(np.shape(X))


def layer_backward(stages, X, memory, params, heads, dY, norm_first=False, activation="relu",
                   causal=False):
    """Gradients of sum(Y * dY): params' keys (those the stages use), "X" and "memory"."""
    p = _params(params)
    X3, dY3 = _batched(X), _batched(dY)
    M3 = _batched(memory) if memory is not None else [None] * len(X3)
    grads = {k: np.zeros_like(v) for k, v in p.items()}
    dX, dM = [], []
    for x, m, dy in zip(X3, M3, dY3):
        _, caches = _sequence_forward(stages, x, m, p, heads, norm_first, activation, causal)
        dx, dm = _sequence_backward(stages, dy, caches, norm_first, grads)
        dX.append(dx)
        dM.append(dm)
    grads["X"] = np.stack(dX).reshape(np.shape(X))
    if memory is not None:
        grads["memory"] = np.stack(dM).reshape(np.shape(memory))
    return grads


def encoder_layer(X, params, heads, norm_first=False, activation="relu", causal=False):
    return layer(ENCODER, X, None, params, heads, norm_first, activation, causal)


def encoder_layer_backward(X, params, heads, dY, norm_first=False, activation="relu", causal=False):
    return layer_backward(ENCODER, X, None, params, heads, dY, norm_first, activation, causal)


def decoder_layer(X, memory, params, heads, norm_first=False, activation="relu", causal=True):
    return layer(DECODER, X, memory, params, heads, norm_first, activation, causal)


def decoder_layer_backward(X, memory, params, heads, dY, norm_first=False, activation="relu",
                           causal=True):
    return layer_backward(DECODER, X, memory, params, heads, dY, norm_first, activation, causal)


def gelu(h):
    """GELU(h) and GELU'(h), float64, from scipy's erf."""
    h = np.asarray(h, dtype=np.float64)
    return activation(h, "gelu"), activation_grad(h, "gelu")
