"""Exact bounds on the normaliser Z, and the shells they settle: pure integer arithmetic.

Most records never need Z = C_{R-1} + P_R (Pi - pi(B_{R-1})) in full.  The engine knows
C_0 .. C_h exactly (from the shells it explored or the profile table's row) and bounds the rest:
from above with an upper row (a far-mass row of engine/cluster_balls.py or a landmark row of
engine/landmarks.py: ``z_high_by_row``, or ``z_high_by_tail`` with the row's ``row_tail`` kept),
from below with a floor (the table rows of the source's neighbours: ``z_low_by_floor``).
``decide_one`` is the core's rule (``mechanism.sampler.choose_shell``; docs/spec.md,
"Sampling") under such bounds, and ``decide_all`` the same rule for many records at once, one
bisection each.  Both answer only where every Z between the bounds gives the same shell, so a
loose bound costs exploring, never a different output (docs/performance.md, "Deciding the
shell, stage by stage").

Nothing here reads the graph or a stream: engine/bound_sources.py and engine/fast.py pass the
integers in.
"""

from __future__ import annotations

from bisect import bisect_left

import numpy as np

from ..mechanism.sampler import ExploredShells, decide_below
from ..mechanism.stream import BLOCK_BITS, LazyUniform

__all__ = [
    "UNDECIDED",
    "decide_all",
    "decide_one",
    "row_tail",
    "z_high_by_row",
    "z_high_by_tail",
    "z_low_by_floor",
]

UNDECIDED = -1  # placeholder shell in ``decide_all``'s answer; never a real shell


def z_high_by_row(
    cumulative: list[int],
    explored: int,
    bound: np.ndarray,
    powers: tuple[int, ...],
    radius: int,
    total_prior: int,
) -> int | None:
    """Upper bound on Z from an upper row ``bound`` (Q[j] >= pi(B_j): a landmark row of
    engine/landmarks.py or a far-mass row of engine/cluster_balls.py), or None if unusable.

    ``cumulative`` is C_0 .. C_h and ``explored`` is E = pi(B_h), with h < R - 1.  A node
    outside B_h is at least h + 1 hops from x, and at least j hops if it lies outside the
    region counted by Q[j - 1]; weights do not increase with distance, so the unexplored
    part of Z is at most
    P_{h+1} (Q[h+1] - E) + sum_{j=h+2}^{R-1} P_j (Q[j] - Q[j-1]) + P_R (Pi - Q[R-1]).
    Every coefficient is checked non-negative; a row failing that is not used.  Only the j
    where Q changes contribute (Q is constant once the landmark squares cover everything, and
    a far-mass row past its depth).
    """
    h = len(cumulative) - 1
    tail = row_tail(bound, h + 2, powers, radius, total_prior)
    return z_high_by_tail(cumulative, explored, int(bound[h + 1]), tail, powers)


def row_tail(
    bound: np.ndarray, start: int, powers: tuple[int, ...], radius: int, total_prior: int
) -> int | None:
    """The part of ``z_high_by_row``'s bound that depends on the row alone, for h = start - 2:
    sum_{j=start}^{R-1} P_j (Q[j] - Q[j-1]) + P_R (Pi - Q[R-1]); None if some Q[j] < Q[j-1]
    (j >= start) or Q[R-1] > Pi, which make the row unusable.  The same for every source
    sharing the row, so the sampler keeps it by cluster (``BoundSources.far_z_high``)."""
    rows = bound[start - 1 : radius].tolist()  # Q[start-1] .. Q[R-1] as Python integers
    previous, last = rows[0], rows[-1]
    if last > total_prior:
        return None
    z = 0
    for j, q in enumerate(rows[1:], start=start):
        step = q - previous  # Q[j] - Q[j-1]
        if step < 0:
            return None
        if step:
            z += powers[j] * step
        previous = q
    return z + powers[radius] * (total_prior - last)


def z_high_by_tail(
    cumulative: list[int], explored: int, first: int, tail: int | None, powers: tuple[int, ...]
) -> int | None:
    """``z_high_by_row`` from Q[h+1] (``first``) and the row's ``row_tail`` past it (None for an
    unusable row): C_h + P_{h+1} (Q[h+1] - E) + tail, or None if Q[h+1] < E."""
    if tail is None or first < explored:
        return None
    h = len(cumulative) - 1
    return cumulative[h] + powers[h + 1] * (first - explored) + tail


def z_low_by_floor(
    cumulative: list[int],
    explored: int,
    floor: np.ndarray,
    powers: tuple[int, ...],
    radius: int,
    total_prior: int,
) -> int:
    """Lower bound on Z from a floor F (``ShellSearch.ball_floor``: F[j] <= pi(B_j) for
    h < j < R), once shells 0 .. h are known (``cumulative`` = C_0 .. C_h, ``explored`` =
    E_h = pi(B_h)).

    Z = C_h + sum_{j=h+1}^{R-1} P_j (E_j - E_{j-1}) + P_R (Pi - E_{R-1}) with E_j = pi(B_j);
    summed by parts this is C_h - P_{h+1} E_h + sum_{j=h+1}^{R-1} (P_j - P_{j+1}) E_j
    + P_R Pi, non-decreasing in every E_j (j > h) because the weights P do not increase.  So
    any L_j <= E_j in their place gives a lower bound; here L_h = E_h and
    L_j = min(max(L_{j-1}, F[j]), Pi) <= E_j (by induction: E_j >= E_{j-1}, F[j] and
    Pi >= E_j).  With F all zero this is the core's z_low, C_h + P_R (Pi - E_h).

    Unrolled, L_j = min(max(E_h, F[h+1], .., F[j]), Pi): a running maximum, capped.  Numpy
    finds the L_j (all within [0, max(E_h, Pi)], so int64 is exact) and the few j where L
    grows (the floor rises for FLOOR_HOPS past the table, then stays); only those terms are
    multiplied, in Python integers.
    """
    h = len(cumulative) - 1
    z = cumulative[h]
    values = np.asarray(floor[h + 1 : radius], dtype=np.int64)
    if values.size == 0:
        return z + powers[radius] * (total_prior - explored)
    lows = np.minimum(np.maximum.accumulate(np.maximum(values, explored)), total_prior)
    known = explored
    grows = np.flatnonzero(lows[1:] != lows[:-1]) + 1  # (np.diff's prepend copies: slower)
    for k in ([0] if lows[0] != explored else []) + grows.tolist():
        value = int(lows[k])
        z += powers[h + 1 + k] * (value - known)
        known = value
    return z + powers[radius] * (total_prior - known)


def decide_one(
    walk: ExploredShells, uniform: LazyUniform, z_low: int, z_high: int, radius: int
) -> int | None:
    """The shell choose_shell would return, if bounds z_low <= Z <= z_high settle it; else None.

    The output is the smallest i < R with U * Z < C_i, or the tail (docs/spec.md, "Sampling").
    ``decide_below`` is True only if U < C_i / Z for every admissible Z, and False only if
    U >= C_i / Z for every one; C is non-decreasing, so the first True after a run of False is
    that smallest i.  Any None means the bounds are too loose to tell.
    """
    h = walk.depth - 1
    for i in range(h + 1):
        verdict = decide_below(uniform, walk.cumulative[i], z_low, z_high)
        if verdict is None:
            return None
        if verdict:
            return i
    return radius if h == radius - 1 else None


def decide_all(
    cumulative: list[int], blocks: list[int], z_low: int, z_high: int, radius: int
) -> tuple[list[int], list[int]]:
    """``decide_one`` for many records at once, from the first 256 bits u of each U.

    Returns (shells, undecided): ``undecided`` lists, in increasing order, the records r for
    which ``decide_one`` has no answer (there ``shells[r]`` is ``UNDECIDED``, for the caller to
    replace); every other ``shells[r]`` is ``decide_one``'s answer.

    With U in [u / 2**256, (u + 1) / 2**256): ``decide_below`` at i is True iff
    C_i * 2**256 >= (u + 1) * z_high, i.e. C_i >= t = ceil((u + 1) * z_high / 2**256), and False
    iff C_i <= f = floor(u * z_low / 2**256).  C is non-decreasing, so the first True is at
    i = bisect_left(C, t), and every earlier verdict is False exactly when C_{i-1} <= f; that is
    ``decide_one``'s answer (None where it has none), found with two products and one bisection
    instead of one ``decide_below`` per shell.  All integer arithmetic.
    """
    h = len(cumulative) - 1
    top = 1 << BLOCK_BITS
    tail = radius if h == radius - 1 else UNDECIDED  # past C_h: the tail once Z is exact
    shells: list[int] = []
    undecided: list[int] = []
    for r, u in enumerate(blocks):
        i = bisect_left(cumulative, -(-(u + 1) * z_high // top), 0, h + 1)
        if i == 0 or cumulative[i - 1] <= (u * z_low) >> BLOCK_BITS:
            shell = i if i <= h else tail
        else:
            shell = UNDECIDED
        if shell == UNDECIDED:
            undecided.append(r)
        shells.append(shell)
    return shells, undecided
