"""One operation of a traced computation (``harness.analysis.trace``): its kind, output shape,
inner length and dependencies, hence its multiplications and its levels of unit tasks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

REDUCTIONS = {"sum", "max"}
MULTIPLYING = {"matmul", "mul"}      # the ops whose multiplications are counted (Op.macs)


def clog2(n):
    """Depth of a balanced binary tree over n leaves: ceil(log2 n), 0 for n = 1."""
    return 0 if n <= 1 else int(math.ceil(math.log2(n)))


def tree_levels(n):
    """Combines per level when n values are summed as a balanced tree (sums to n - 1)."""
    sizes, c = [], int(n)
    while c > 1:
        sizes.append(c // 2)
        c -= c // 2
    return sizes


@dataclass(slots=True)
class Op:
    id: int
    kind: str                    # matmul, add, ..., sum, max
    part: str                    # which part of the model (see Graph.part_of)
    shape: tuple                 # output shape
    inner: int                   # k of a matmul, n of a reduction, 1 otherwise
    deps: list                   # [(op id, row)], row = -1 for the whole output
    op_depth: int = 0            # longest chain of ops ending here (this op included)
    split: bool = False          # some consumer reads single rows of the output

    @property
    def numel(self):
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    @property
    def rows(self):
        """Independent row tasks the op is cut into when a consumer reads single rows."""
        return self.shape[-2] if (self.split and len(self.shape) >= 2) else 1

    @property
    def macs(self):
        """Multiplications: a matrix product's multiply-adds, an elementwise product's elements;
        0 for other ops."""
        if self.kind == "matmul":
            return self.numel * self.inner
        return self.numel if self.kind in MULTIPLYING else 0

    def levels(self, grain):
        """Unit tasks per level of the whole op, under ``grain`` ('scalar' or 'element').

        scalar: each multiply, add, compare, exp... is one task; a sum of n terms
        is a balanced tree of ceil(log2 n) levels.
        element: one processor computes one output element; a dot product of k
        terms is k sequential multiply-adds, a row reduction n - 1 combines.
        """
        N = self.numel
        if self.kind == "matmul":
            if grain == "scalar":
                return [N * self.inner] + [N * c for c in tree_levels(self.inner)]
            return [N] * self.inner
        if self.kind in REDUCTIONS:
            if grain == "scalar":
                return [N * c for c in tree_levels(self.inner)]
            return [N] * (self.inner - 1)
        return [N]
