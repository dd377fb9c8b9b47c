"""Linear attention in plain NumPy and in PyTorch: the forms the tracer runs and the peers
``harness compare`` times against ``harness.kernels.linear_attention``.

The model (decay None, normalised), with X (T, d_model) and the kernel's layout
Wq, Wk (d_k, d_model), Wv (d_v, d_model):

    S_t = S_{t-1} + phi(k_t) v_t^T,     z_t = z_{t-1} + phi(k_t),
    y_t = S_t^T phi(q_t) / (z_t . phi(q_t))

three ways, each a traced form written with ``harness.analysis.trace``'s operations:

* ``recurrent_forward``: the lines above, one step after another;
* ``parallel_forward``: Y = ((phi(Q) phi(K)^T ⊙ M) V) / rowsum(phi(Q) phi(K)^T ⊙ M), M causal;
* ``chunked_forward``: the masked product inside chunks of CHUNK rows, the state (S, z)
  carried from chunk to chunk.

phi(u) = elu(u) + 1 = max(u, 0) + exp(min(u, 0)), with min(u, 0) written -max(-u, 0): the
tracer has ``np.maximum`` and no comparison, and the kernel computes the same expression.

The peers take X (..., T, d_model): ``numpy_forward`` / ``numpy_backward`` (the chunked form
with every chunk at once, and with chunk=None the parallel form), ``torch_loop`` and
``torch_chunked`` (autograd), each made into compare's 4-tuple by ``numpy_peer`` and
``torch_peer``.
"""

from __future__ import annotations

import numpy as np

from harness.kernels import linear_attention as la
from harness.models import common_peers

CHUNK = la.CHUNK        # rows per chunk of the chunked form: the kernel's, so the form is its own


def phi(U):
    """elu(U) + 1, elementwise, with the tracer's operations."""
    return np.maximum(U, 0.0) + np.exp(-np.maximum(-U, 0.0))


def features(X, Wq, Wk, Wv):
    """phi(Q), phi(K), V: (..., T, d_k), (..., T, d_k), (..., T, d_v)."""
    return phi(X @ Wq.T), phi(X @ Wk.T), X @ Wv.T


def causal(n):
    """(n, n) bool: row t sees columns s <= t."""
    return np.tril(np.ones((n, n), dtype=bool))


# ------------------------------------------------------------------ traced forms, X (T, d_model)

def recurrent_forward(X, Wq, Wk, Wv):
    """The recurrence of the lesson, one step after another: T dependent state updates."""
    FQ, FK, V = features(X, Wq, Wk, Wv)
    S = np.zeros((Wk.shape[0], Wv.shape[0]))              # (d_k, d_v)
    z = np.zeros(Wk.shape[0])                             # (d_k,)
    ys = []
    for t in range(X.shape[-2]):
        fk = FK[t]
        S = S + fk[:, None] * V[t][None, :]              # S_t = S_{t-1} + phi(k_t) v_t^T: waits
        z = z + fk                                        # z_t = z_{t-1} + phi(k_t)
        fq = FQ[t]
        ys.append((fq @ S) / (fq @ z))                    # (d_v,)
    return (np.stack(ys, axis=-2),)                       # (T, d_v)


def parallel_forward(X, Wq, Wk, Wv):
    """Every pair at once: the masked (T, T) product, and its row sums as the normaliser."""
    FQ, FK, V = features(X, Wq, Wk, Wv)
    A = np.tril(FQ @ FK.T)                                # (T, T): phi(q_t) . phi(k_s), s <= t
    return ((A @ V) / A.sum(axis=-1, keepdims=True),)     # (T, d_v)


def chunked_forward(X, Wq, Wk, Wv, chunk=CHUNK):
    """The masked product inside each chunk; the state (S, z) of the chunks before it added
    through phi(q_t), and moved on past the chunk (the kernel's ``_chunked_pass``)."""
    FQ, FK, V = features(X, Wq, Wk, Wv)
    T = X.shape[-2]
    ys = []
    for j0 in range(0, T, chunk):
        j1 = min(j0 + chunk, T)
        q, k, v = FQ[j0:j1], FK[j0:j1], V[j0:j1]          # (n, d_k), (n, d_k), (n, d_v)
        A = np.where(causal(j1 - j0), q @ k.T, 0.0)       # (n, n): the pairs inside the chunk
        num, den = A @ v, A.sum(axis=-1, keepdims=True)   # (n, d_v), (n, 1)
        if j0 > 0:                                        # what came before, through the state
            num = num + q @ S
            den = den + q @ z
        ys.append(num / den)
        if j1 < T:                                        # the state at the chunk's end
            S_c, z_c = k.T @ v, k.T.sum(axis=-1, keepdims=True)   # (d_k, d_v), (d_k, 1)
            S, z = (S_c, z_c) if j0 == 0 else (S + S_c, z + z_c)
    return (np.concatenate(ys, axis=-2),)                 # (T, d_v)


# ------------------------------------------------------------------ counts

def chunk_sizes(T, chunk=CHUNK):
    """Rows of each chunk: chunk, chunk, ..., the rest."""
    return [min(chunk, T - j0) for j0 in range(0, T, chunk)]


def projection_macs(T, d, d_k, d_v):
    return T * d * (2 * d_k + d_v)


def recurrent_macs(T, d, d_k=None, d_v=None):
    """projections T d (2 d_k + d_v); ``mul``: the outer products phi(k_t) v_t^T, T d_k d_v;
    ``product``: the reads S_t^T phi(q_t) and z_t . phi(q_t), T d_k (d_v + 1)."""
    d_k = d if d_k is None else d_k
    d_v = d if d_v is None else d_v
    return {"projections": projection_macs(T, d, d_k, d_v), "mul": T * d_k * d_v,
            "product": T * d_k * (d_v + 1), "grid": 0, "mix": 0}


def parallel_macs(T, d, d_k=None, d_v=None):
    """projections; ``grid``: phi(Q) phi(K)^T, T^2 d_k; ``mix``: its product with V, T^2 d_v
    (the normaliser is its row sums: no product)."""
    d_k = d if d_k is None else d_k
    d_v = d if d_v is None else d_v
    return {"projections": projection_macs(T, d, d_k, d_v), "mul": 0, "product": 0,
            "grid": T * T * d_k, "mix": T * T * d_v}


def chunked_macs(T, d, d_k=None, d_v=None, chunk=CHUNK):
    """Over chunks of n rows: ``grid`` n^2 d_k; ``mix`` n^2 d_v and, but for the last chunk, the
    state's n d_k d_v (phi(K_c)^T V_c also sums over positions); ``product``, but for the first
    chunk, the reads of the state n d_k (d_v + 1)."""
    d_k = d if d_k is None else d_k
    d_v = d if d_v is None else d_v
    n = chunk_sizes(T, chunk)
    return {"projections": projection_macs(T, d, d_k, d_v), "mul": 0,
            "product": sum(n[1:]) * d_k * (d_v + 1),
            "grid": sum(m * m for m in n) * d_k,
            "mix": sum(m * m for m in n) * d_v + sum(n[:-1]) * d_k * d_v}


# ------------------------------------------------------------------ NumPy peer, X (..., T, d_model)

def _chunks(A, n, chunk, fill):
    """(..., T, w) -> (..., n, chunk, w), the last chunk padded with ``fill``."""
    T = A.shape[-2]
    pad = n * chunk - T
    if pad:
        tail = np.full(A.shape[:-2] + (pad, A.shape[-1]), fill, dtype=A.dtype)
        A = np.concatenate([A, tail], axis=-2)
    return A.reshape(A.shape[:-2] + (n, chunk, A.shape[-1]))


def _unchunk(A, T):
    """(..., n, chunk, w) -> (..., T, w)."""
    return A.reshape(A.shape[:-3] + (-1, A.shape[-1]))[..., :T, :]


def numpy_forward(X, Wq, Wk, Wv, chunk=CHUNK):
    """Y (..., T, d_v) and what ``numpy_backward`` needs: every chunk at once (the state
    entering each chunk an exclusive cumulative sum over chunks); ``chunk=None``: one chunk,
    the parallel form, T x T. The normaliser is a column of ones in V (v'_t = [v_t, 1])."""
    FQ, FK, V = features(X, Wq, Wk, Wv)
    T = X.shape[-2]
    C = T if chunk is None else chunk
    n = -(-T // C)
    V1 = np.concatenate([V, np.ones(V.shape[:-1] + (1,), dtype=V.dtype)], axis=-1)   # (..., T, w)
    q = _chunks(FQ, n, C, 1.0)                 # padded rows: phi(q) = 1, so their row sums are > 0
    k, v = _chunks(FK, n, C, 0.0), _chunks(V1, n, C, 0.0)    # padded rows add nothing
    A = (q @ np.swapaxes(k, -1, -2)) * causal(C)              # (..., n, C, C)
    KV = np.swapaxes(k, -1, -2) @ v                           # (..., n, d_k, w)
    S = np.zeros_like(KV)                                     # S'_j, entering chunk j
    np.cumsum(KV[..., :-1, :, :], axis=-3, out=S[..., 1:, :, :])
    O = _unchunk(A @ v + q @ S, T)                            # (..., T, w): [numerator, denominator]
    Y = O[..., :-1] / O[..., -1:]
    return Y, (FQ, FK, q, k, v, A, S, O)


def numpy_backward(X, Wq, Wk, Wv, kept, dY):
    """(dX, dWq, dWk, dWv) from ``numpy_forward``'s kept arrays and the upstream dY."""
    FQ, FK, q, k, v, A, S, O = kept
    T = X.shape[-2]
    n_t = O[..., -1:]                                          # (..., T, 1) denominators
    Y = O[..., :-1] / n_t
    dn = -(dY * Y).sum(axis=-1, keepdims=True) / n_t           # y = o / n
    dO = np.concatenate([dY / n_t, dn], axis=-1)
    do = _chunks(dO, A.shape[-3], A.shape[-1], 0.0)            # (..., n, C, w)
    dA = (do @ np.swapaxes(v, -1, -2)) * causal(A.shape[-1])   # O = A v + q S
    dS = np.swapaxes(q, -1, -2) @ do                           # (..., n, d_k, w)
    dKV = np.zeros_like(dS)                                    # S_j = sum_{i<j} KV_i
    np.cumsum(dS[..., :0:-1, :, :], axis=-3, out=dKV[..., -2::-1, :, :])
    dq = dA @ k + do @ np.swapaxes(S, -1, -2)
    dk = np.swapaxes(dA, -1, -2) @ q + v @ np.swapaxes(dKV, -1, -2)   # KV = k^T v
    dv = np.swapaxes(A, -1, -2) @ do + k @ dKV
    dQ = _unchunk(dq, T) * np.minimum(FQ, 1.0)                 # phi'(u) = 1 (u > 0), e^u = phi(u)
    dK = _unchunk(dk, T) * np.minimum(FK, 1.0)
    dV = _unchunk(dv, T)[..., :-1]
    dX = dQ @ Wq + dK @ Wk + dV @ Wv
    X2 = X.reshape(-1, X.shape[-1])
    return (dX, dQ.reshape(-1, dQ.shape[-1]).T @ X2, dK.reshape(-1, dK.shape[-1]).T @ X2,
            dV.reshape(-1, dV.shape[-1]).T @ X2)


def numpy_peer(X, W, dY, chunk=CHUNK):
    """compare's (forward, backward, outputs, forward+backward) of ``numpy_forward``."""
    Wq, Wk, Wv = W
    fwd = (lambda: numpy_forward(X, Wq, Wk, Wv, chunk))
    return common_peers.slots(
        fwd, lambda out: numpy_backward(X, Wq, Wk, Wv, out[1], dY), fwd())


# ------------------------------------------------------------------ PyTorch peers (autograd)

def _torch_features(torch, X, Wq, Wk, Wv):
    elu = torch.nn.functional.elu
    return elu(X @ Wq.T) + 1.0, elu(X @ Wk.T) + 1.0, X @ Wv.T


def torch_loop(torch, X, Wq, Wk, Wv):
    """The recurrence step by step, as a PyTorch user writes it; autograd keeps every S_t."""
    FQ, FK, V = _torch_features(torch, X, Wq, Wk, Wv)
    S = torch.zeros(X.shape[:-2] + (Wk.shape[0], Wv.shape[0]), dtype=X.dtype)
    z = torch.zeros(X.shape[:-2] + (Wk.shape[0],), dtype=X.dtype)
    ys = []
    # unbind, not FK[..., t, :]: each indexing's backward writes a whole (T, d_k) gradient
    for fq, fk, v in zip(FQ.unbind(-2), FK.unbind(-2), V.unbind(-2)):
        S = S + fk[..., :, None] * v[..., None, :]
        z = z + fk
        ys.append((fq[..., None, :] @ S)[..., 0, :] / (fq * z).sum(-1, keepdim=True))
    return torch.stack(ys, dim=-2)


def torch_chunked(torch, X, Wq, Wk, Wv, chunk=CHUNK):
    """``numpy_forward`` in PyTorch: every chunk at once, the states an exclusive cumsum;
    ``chunk=None``: the parallel form."""
    FQ, FK, V = _torch_features(torch, X, Wq, Wk, Wv)
    T = X.shape[-2]
    C = T if chunk is None else chunk
    n = -(-T // C)
    V1 = torch.cat([V, torch.ones(V.shape[:-1] + (1,), dtype=V.dtype)], dim=-1)

    def chunks(A, fill):
        pad = n * C - T
        if pad:
            tail = torch.full(A.shape[:-2] + (pad, A.shape[-1]), fill, dtype=A.dtype)
            A = torch.cat([A, tail], dim=-2)
        return A.reshape(A.shape[:-2] + (n, C, A.shape[-1]))

    q, k, v = chunks(FQ, 1.0), chunks(FK, 0.0), chunks(V1, 0.0)
    A = (q @ k.transpose(-1, -2)) * torch.from_numpy(causal(C)).to(X.dtype)
    KV = k.transpose(-1, -2) @ v
    S = torch.cat([torch.zeros_like(KV[..., :1, :, :]), torch.cumsum(KV, dim=-3)[..., :-1, :, :]],
                  dim=-3)
    O = (A @ v + q @ S).reshape(X.shape[:-2] + (n * C, V1.shape[-1]))[..., :T, :]
    return O[..., :-1] / O[..., -1:]


def torch_peer(run, X, W, dY, torch):
    """(forward, backward, outputs, forward+backward) of ``run(torch, X, Wq, Wk, Wv)``
    (``common_peers.autograd``), the weights' gradients computed too, as the kernel's."""
    Wt = [torch.from_numpy(w).clone().requires_grad_(True) for w in W]
    return common_peers.autograd(lambda x: run(torch, x, *Wt), X, dY, dY.shape, torch)


# ------------------------------------------------------------------ JAX peer (its VJP)

def jax_chunked(jax, X, Wq, Wk, Wv, chunk=CHUNK):
    """``numpy_forward`` in JAX: every chunk at once, the states an exclusive cumsum;
    ``chunk=None``: the parallel form. X (..., T, d_model) -> Y (..., T, d_v)."""
    jnp = jax.numpy
    FQ, FK, V = jax.nn.elu(X @ Wq.T) + 1.0, jax.nn.elu(X @ Wk.T) + 1.0, X @ Wv.T
    T = X.shape[-2]
    C = T if chunk is None else chunk
    n = -(-T // C)
    V1 = jnp.concatenate([V, jnp.ones(V.shape[:-1] + (1,), V.dtype)], axis=-1)      # (..., T, w)

    def chunks(A, fill):                        # (..., T, w) -> (..., n, C, w), padded with fill
        pad = [(0, 0)] * (A.ndim - 2) + [(0, n * C - T), (0, 0)]
        A = jnp.pad(A, pad, constant_values=fill)
        return A.reshape(A.shape[:-2] + (n, C, A.shape[-1]))

    q, k, v = chunks(FQ, 1.0), chunks(FK, 0.0), chunks(V1, 0.0)
    A = (q @ jnp.swapaxes(k, -1, -2)) * causal(C).astype(X.dtype)            # (..., n, C, C)
    KV = jnp.swapaxes(k, -1, -2) @ v                                          # (..., n, d_k, w)
    S = jnp.cumsum(KV, axis=-3) - KV                                          # entering chunk j
    O = (A @ v + q @ S).reshape(X.shape[:-2] + (n * C, V1.shape[-1]))[..., :T, :]
    return O[..., :-1] / O[..., -1:]


def jax_peer(X, W, dY, jax, chunk=CHUNK):
    """compare's (forward, backward, outputs, forward+backward) of ``jax_chunked``, jitted, its
    VJP giving the weights' gradients too, as the kernel's (``common_peers.jitted``)."""
    return common_peers.jitted(lambda x, *w: jax_chunked(jax, x, *w, chunk=chunk), X, W, dY, jax)
