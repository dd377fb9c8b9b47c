"""Scratch buffers that live across calls.

A fresh large array costs its page faults on first touch, and on these machines
that is 1 to 2.5 ms per MiB: a 2048 x 2048 float64 scratch grid costs more to
fault in than to fill. Buffers the kernels use internally and never return are
therefore kept, one per name and thread, and reused while the shape and dtype
match. Arrays handed back to the caller are always fresh.
"""

from __future__ import annotations

import math
import threading

import numpy as np

_local = threading.local()


def buffer(name, shape, dtype):
    """An uninitialised array for internal use; the same memory as the last call's if it fits."""
    cache = getattr(_local, "buffers", None)
    if cache is None:
        cache = _local.buffers = {}
    size = math.prod(shape)                  # not np.prod: this is on every call's path
    flat = cache.get((name, dtype))
    if flat is None or flat.size < size:
        flat = cache[(name, dtype)] = np.empty(size, dtype=dtype)
    return flat[:size].reshape(shape)


def kept(name):
    """What ``keep(name, value)`` last kept in this thread (None if nothing, or after ``clear``)."""
    return getattr(_local, "kept", {}).get(name)


def keep(name, value):
    """Keep ``value`` under ``name`` for this thread, beside the buffers (``clear`` drops it)."""
    cache = getattr(_local, "kept", None)
    if cache is None:
        cache = _local.kept = {}
    cache[name] = value


def clear():
    """Drop every kept buffer and value (of this thread)."""
    _local.buffers = {}
    _local.kept = {}
