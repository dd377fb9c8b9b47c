"""Compiled kernels of the scheduler: the greedy list schedule and the levels of a task DAG.

They check nothing (``harness.analysis.schedule`` builds and checks their inputs) and
write their results into buffers the caller allocates: a Numba function that
returns a tuple can crash the process when a signal arrives during its return
(Numba 0.68), one that fills its arguments cannot.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def release(i, succ_ptr, succ_idx, indeg, stack, sp):
    # task i finished: push every successor whose last dependency this was
    for e in range(succ_ptr[i], succ_ptr[i + 1]):
        j = succ_idx[e]
        indeg[j] -= 1
        if indeg[j] == 0:
            stack[sp] = j
            sp += 1
    return sp


@njit(cache=True)
def greedy_schedule(level_ptr, level_size, succ_ptr, succ_idx, indeg0, prio, P, out):
    # level_ptr (n+1,), level_size (L,): task i runs levels level_ptr[i]..level_ptr[i+1]-1,
    # each a batch of unit tasks that may start when the previous level is done.
    # succ_ptr (n+1,), succ_idx (E,): task edges; ids are topological. prio (n,): bottom level.
    n = indeg0.shape[0]
    indeg = indeg0.copy()
    cur = level_ptr[:n].copy()
    rem = np.zeros(n, np.int64)
    active = np.empty(n, np.int64)        # ready tasks, highest priority first
    n_act = 0
    stack = np.empty(n, np.int64)         # tasks whose predecessors are all done
    sp = 0
    for i in range(n):
        if indeg[i] == 0:
            stack[sp] = i
            sp += 1
    steps = 0
    busy = 0
    done = 0
    while True:
        while sp > 0:
            sp -= 1
            i = stack[sp]
            if cur[i] == level_ptr[i + 1]:          # no levels (a reduction of one term)
                done += 1
                sp = release(i, succ_ptr, succ_idx, indeg, stack, sp)
                continue
            rem[i] = level_size[cur[i]]
            pos = n_act
            while pos > 0 and (prio[active[pos - 1]] < prio[i] or
                               (prio[active[pos - 1]] == prio[i] and active[pos - 1] > i)):
                active[pos] = active[pos - 1]
                pos -= 1
            active[pos] = i
            n_act += 1
        if n_act == 0:
            break
        first = active[0]
        if rem[first] > P:
            # the first task alone takes every processor until it fits in one step
            k = (rem[first] - 1) // P
            rem[first] -= k * P
            steps += k
            busy += k * P
            continue
        left = P                               # one step: greedy, in priority order
        m = 0
        while m < n_act and left > 0:
            i = active[m]
            a = rem[i] if rem[i] < left else left
            rem[i] -= a
            left -= a
            busy += a
            m += 1
        steps += 1
        w = 0
        for q in range(m):
            i = active[q]
            if rem[i] > 0:
                active[w] = i
                w += 1
                continue
            cur[i] += 1
            if cur[i] < level_ptr[i + 1]:      # next level is ready at the next step
                rem[i] = level_size[cur[i]]
                active[w] = i
                w += 1
                continue
            done += 1
            sp = release(i, succ_ptr, succ_idx, indeg, stack, sp)
        if w < m:
            for q in range(m, n_act):
                active[w + q - m] = active[q]
            n_act -= m - w
    out[0] = steps
    out[1] = busy
    out[2] = done


@njit(cache=True)
def span_and_priority(level_ptr, succ_ptr, succ_idx, finish, bottom):
    # ids are topological: relax forwards for finish levels, backwards for bottom levels
    n = level_ptr.shape[0] - 1
    start = np.zeros(n, np.int64)
    for i in range(n):
        finish[i] = start[i] + level_ptr[i + 1] - level_ptr[i]
        for e in range(succ_ptr[i], succ_ptr[i + 1]):
            j = succ_idx[e]
            if finish[i] > start[j]:
                start[j] = finish[i]
    for i in range(n - 1, -1, -1):
        b = 0
        for e in range(succ_ptr[i], succ_ptr[i + 1]):
            if bottom[succ_idx[e]] > b:
                b = bottom[succ_idx[e]]
        bottom[i] = b + level_ptr[i + 1] - level_ptr[i]
