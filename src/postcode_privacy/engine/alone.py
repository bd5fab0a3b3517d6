"""Exact shell decisions for many records alone at their postcode, in one compiled call.

In a file of distinct postcodes nearly every group is one record, and ``FastSampler._sample_one``
(engine/fast.py) spent most of its time in Python on a few dozen integer sums per record:
C_0 .. C_D from the profile table, the bounds on Z, the far-mass row's bound, the decision.
:class:`AloneDecider` does that step (step 2b of engine/fast.py, short of the floor) for a
whole run of such records in one compiled call, with the same integers written out in 32-bit
limbs, so no float is involved anywhere; the draws then follow in one more compiled call
(``ShellSearch.draw_each``).  A record this step does not settle is handed back for
``FastSampler.sample_group`` to draw as before.

Why the output is the same as ``_sample_one``'s (docs/performance.md, "Records alone"):

* C_h = sum_{g <= h} P_g * pi(S_g) with the shell masses read from the table row exactly as
  ``BallProfiles.shell_masses`` reads them; z_low and z_high are ``BoundSources.z_bounds``'
  (the core's), then, if those do not settle, z_high is the far-mass row's
  (``bounds.z_high_by_tail`` with ``bounds.row_tail``) where it is smaller, with the same checks
  that make a row unusable;
* the decision is ``bounds.decide_all``'s: with U in [u / 2**256, (u + 1) / 2**256), the shell is
  the first i with C_i >= ceil((u + 1) z_high / 2**256), provided i = 0 or
  C_{i-1} <= floor(u z_low / 2**256); otherwise the record is undecided here;
* any valid bounds that settle a record give the one shell the core defines, so a record
  settled here has the shell ``_sample_one`` gives it, and the member draw's first attempt is
  ``group.member_value``'s (the top bit_length(n - 1) bits of the "member" block).

Limb arithmetic: a number is a uint64 array whose entries are 32-bit digits, least significant
first, so a digit product plus two digits never exceeds 2**64 - 1.  The widths are fixed per
mechanism from P_0 and the total prior (``_widths``), with room for every sum made here; a
carry out of the top digit is reported, never dropped, and the record is handed back.
"""

from __future__ import annotations

import numpy as np

from .._numba import njit
from .cluster_balls import ClusterBalls
from .profiles import BallProfiles

__all__ = ["AloneDecider", "UNSETTLED", "table_readable"]

UNSETTLED = -1  # shell of a record handed back to ``FastSampler.sample_group``
_U_DIGITS = 8  # a 256-bit block of the keyed stream in 32-bit digits
_MASK = np.uint64(0xFFFFFFFF)
_SHIFT = np.uint64(32)
_ZERO = np.uint64(0)
_ONE = np.uint64(1)


def _digits(value: int, width: int) -> np.ndarray:
    """``value`` (0 <= value < 2**(32 width)) as ``width`` 32-bit digits, least significant first."""
    if value < 0 or value.bit_length() > 32 * width:
        raise ValueError("value does not fit the width")
    return np.array([(value >> (32 * k)) & 0xFFFFFFFF for k in range(width)], dtype=np.uint64)


def _widths(powers: tuple[int, ...], total_prior: int) -> tuple[int, int]:
    """Digits of the powers, and of every other number: C_h, the bounds on Z and the row's
    tail are each at most 2 P_0 Pi (docs/performance.md, "Records alone"), and the digits
    leave room for more than 16 P_0 Pi."""
    power_width = -(-powers[0].bit_length() // 32)
    width = -(-(powers[0].bit_length() + max(total_prior, 1).bit_length() + 4) // 32) + 1
    return power_width, width


# Rows of the scratch array of bounds in ``_decide_each``
_LOW, _HIGH, _FROM_ROW, _NOUGHT = 0, 1, 2, 3


@njit(cache=True)
def _set_sum(out, i, a, j, powers, h, m):  # pragma: no cover - compiled
    """out[i] = a[j] + powers[h] * m, for 0 <= m < 2**63; False if a carry would leave out's
    digits.  Numbers are rows of 32-bit digits (``powers`` narrower than ``out`` and ``a``,
    ``a`` as wide as ``out``); out[i] may be a[j] itself.  Each step adds at most a digit, a
    carry and a digit product: at most 2**64 - 1."""
    width, digits = out.shape[1], powers.shape[1]
    if digits >= width or m < 0:  # no room for the product's top digits (``_widths`` leaves
        return False  # it), or a mass from a table that disagrees with the graph
    low = np.uint64(m & 0xFFFFFFFF)
    carry = _ZERO
    for d in range(width):
        t = a[j, d] + carry
        if d < digits:
            t += powers[h, d] * low
        out[i, d] = t & _MASK
        carry = t >> _SHIFT
    if carry != _ZERO:
        return False
    high = np.uint64(m >> 32)
    if high == _ZERO:
        return True
    for d in range(1, width):  # + powers[h] * high, one digit up
        t = out[i, d] + carry
        if d - 1 < digits:
            t += powers[h, d - 1] * high
        out[i, d] = t & _MASK
        carry = t >> _SHIFT
    return carry == _ZERO


@njit(cache=True)
def _add_row(out, i, a, j):  # pragma: no cover - compiled
    """out[i] += a[j] (rows of equal width); False if a carry leaves the digits."""
    carry = _ZERO
    for d in range(out.shape[1]):
        t = out[i, d] + a[j, d] + carry
        out[i, d] = t & _MASK
        carry = t >> _SHIFT
    return carry == _ZERO


@njit(cache=True)
def _compare(a, i, b, j, shift):  # pragma: no cover - compiled
    """-1, 0 or 1 as a[i] is less than, equal to or more than the number whose digits are
    b[j, shift:] (that is, b[j] // 2**(32 shift)); either may be the wider."""
    a_width, b_width = a.shape[1], b.shape[1] - shift
    for d in range(max(a_width, b_width) - 1, -1, -1):
        x = a[i, d] if d < a_width else _ZERO
        y = b[j, d + shift] if d < b_width else _ZERO
        if x != y:
            return -1 if x < y else 1
    return 0


@njit(cache=True)
def _multiply(out, a, i, b, j):  # pragma: no cover - compiled
    """out[0] = a[i] * b[j] (out at least as wide as a and b together; schoolbook)."""
    b_width = b.shape[1]
    out[0, :] = _ZERO
    for x in range(a.shape[1]):
        digit = a[i, x]
        if digit == _ZERO:
            continue
        carry = _ZERO
        for y in range(b_width):
            t = out[0, x + y] + digit * b[j, y] + carry
            out[0, x + y] = t & _MASK
            carry = t >> _SHIFT
        k = x + b_width
        while carry != _ZERO:
            t = out[0, k] + carry
            out[0, k] = t & _MASK
            carry = t >> _SHIFT
            k += 1


@njit(cache=True)
def _decide(cumulative, depth, bounds, u, product, radius):  # pragma: no cover - compiled
    """``bounds.decide_all`` for one record: its shell, or ``UNSETTLED``.

    ``cumulative[0 .. depth]`` are C_0 .. C_depth, ``bounds[_LOW]`` and ``bounds[_HIGH]`` are
    z_low and z_high, ``u[0]`` is the block u and ``u[1]`` is u + 1; ``product`` is scratch
    (one row, 9 digits wider than the bounds).  The answer is the first i <= depth with
    C_i >= t = ceil((u + 1) z_high / 2**256), if i = 0 or C_{i-1} <= floor(u z_low / 2**256);
    past C_depth the tail once Z is exact (depth = R - 1)."""
    _multiply(product, u, 1, bounds, _HIGH)
    for k in range(_U_DIGITS):
        if product[0, k] != _ZERO:  # a remainder: the ceiling is one more
            for d in range(_U_DIGITS, product.shape[1]):
                t = product[0, d] + _ONE
                product[0, d] = t & _MASK
                if (t >> _SHIFT) == _ZERO:
                    break
            break
    low, high = 0, depth + 1  # bisect_left(C, t)
    while low < high:
        middle = (low + high) // 2
        if _compare(cumulative, middle, product, 0, _U_DIGITS) < 0:
            low = middle + 1
        else:
            high = middle
    i = low
    if i > 0:
        _multiply(product, u, 0, bounds, _LOW)
        if _compare(cumulative, i - 1, product, 0, _U_DIGITS) > 0:
            return UNSETTLED
    if i <= depth:
        return i
    return radius if depth == radius - 1 else UNSETTLED


@njit(cache=True)
def _row_tail(tails, cluster, balls, far_depth, start, radius, powers, total):  # pragma: no cover
    """``bounds.row_tail`` of the cluster's far-mass row (Q[j] = balls[cluster, j] to the rows'
    depth, the total prior past it) into ``tails[cluster]``: True, or False for an unusable
    row."""
    tails[cluster, :] = _ZERO
    # Every Q[j] read is checked to lie in [0, total] (so no difference below can wrap): a row
    # failing that is one ``bounds.row_tail`` refuses too, or gives a first Q[D+1] below the
    # explored mass, which ``bounds.z_high_by_tail`` refuses (a usable row is non-decreasing from
    # Q[D+1] >= 0 to Q[R-1] <= total).
    previous = np.int64(balls[cluster, start - 1]) if start - 1 <= far_depth else total
    last = np.int64(balls[cluster, radius - 1]) if radius - 1 <= far_depth else total
    if not (0 <= previous <= total and 0 <= last <= total):
        return False
    for j in range(start, radius):
        q = np.int64(balls[cluster, j]) if j <= far_depth else total
        if not 0 <= q <= total:
            return False
        step = q - previous  # both in [0, total]: no wrap
        if step < 0:
            return False
        if step > 0 and not _set_sum(tails, cluster, tails, cluster, powers, j, step):
            return False
        previous = q
    return _set_sum(tails, cluster, tails, cluster, powers, radius, total - last)


@njit(cache=True)
def _decide_each(
    nodes,
    node_location,
    prior,
    table,
    depth,
    radius,
    powers,
    total,
    u_digits,
    member_tops,
    balls,
    cluster_of,
    far_depth,
    tails,
    tail_state,
    shells,
    stages,
    sizes,
    draws,
):  # pragma: no cover - compiled
    """The decision of ``AloneDecider.decide`` for each record r (true node ``nodes[r]``):
    ``shells[r]`` (``UNSETTLED`` if handed back), ``stages[r]`` (1: the core's bounds
    settled it, 2: the far-mass row's), ``sizes[r]`` = pi(S_shell) and ``draws[r]`` = the
    member draw's first attempt, -1 if rejected (the caller reads the next blocks).

    ``u_digits[r]`` is the record's "shell" block in 9 digits (the top one 0); ``tails`` and
    ``tail_state`` keep each cluster's row tail (state 0: not yet computed, 1: usable, 2:
    unusable); ``balls`` has no rows when the far-mass rows are not in use."""
    width = tails.shape[1]
    cumulative = np.zeros((depth + 1, width), dtype=np.uint64)
    masses = np.zeros(depth + 1, dtype=np.int64)
    bounds = np.zeros((4, width), dtype=np.uint64)  # _LOW, _HIGH, _FROM_ROW, _NOUGHT (0)
    product = np.zeros((1, width + _U_DIGITS + 1), dtype=np.uint64)
    u = np.zeros((2, _U_DIGITS + 1), dtype=np.uint64)  # u and u + 1
    have_rows = balls.shape[0] > 0
    for r in range(nodes.size):
        shells[r] = UNSETTLED
        stages[r] = 0
        sizes[r] = 0
        draws[r] = -1
        node = nodes[r]
        location = node_location[node]
        # BallProfiles.shell_masses: shell 0 is the node, ball k >= 1 the location's
        masses[0] = prior[node]
        previous = masses[0]
        ok = previous >= 0
        for k in range(1, depth + 1):
            ball = np.int64(table[location, k])
            masses[k] = ball - previous
            ok = ok and masses[k] >= 0
            previous = ball
        explored = previous
        rest = total - explored
        if not ok or rest < 0:  # a table that disagrees with the graph: the Python path says so
            continue
        ok = _set_sum(cumulative, 0, bounds, _NOUGHT, powers, 0, masses[0])
        for k in range(1, depth + 1):
            ok = ok and _set_sum(cumulative, k, cumulative, k - 1, powers, k, masses[k])
        # BoundSources.z_bounds: the core's z_low, and its z_high (z_low once Z is exact)
        ok = ok and _set_sum(bounds, _LOW, cumulative, depth, powers, radius, rest)
        if depth == radius - 1:
            bounds[_HIGH, :] = bounds[_LOW]
        else:
            ok = ok and _set_sum(bounds, _HIGH, cumulative, depth, powers, depth + 1, rest)
        if not ok:
            continue
        carry = _ONE
        for d in range(_U_DIGITS + 1):
            value = u_digits[r, d]
            u[0, d] = value
            t = value + carry
            u[1, d] = t & _MASK
            carry = t >> _SHIFT
        shell = _decide(cumulative, depth, bounds, u, product, radius)
        stage = 1
        if shell == UNSETTLED and depth < radius - 1 and have_rows:
            # BoundSources.far_z_high: C_D + P_{D+1} (Q[D+1] - E) + the row's tail, if smaller
            cluster = cluster_of[location]
            if tail_state[cluster] == 0:
                usable = _row_tail(
                    tails, cluster, balls, far_depth, depth + 2, radius, powers, total
                )
                tail_state[cluster] = 1 if usable else 2
            first = np.int64(balls[cluster, depth + 1]) if depth + 1 <= far_depth else total
            if tail_state[cluster] == 1 and first >= explored:
                ok = _set_sum(
                    bounds, _FROM_ROW, cumulative, depth, powers, depth + 1, first - explored
                )
                ok = ok and _add_row(bounds, _FROM_ROW, tails, cluster)
                if ok and _compare(bounds, _FROM_ROW, bounds, _HIGH, 0) < 0:
                    bounds[_HIGH, :] = bounds[_FROM_ROW]
                    shell = _decide(cumulative, depth, bounds, u, product, radius)
                    stage = 2
        if shell < 0 or shell > depth:  # undecided, or the tail: handed back
            continue
        size = masses[shell]
        if size < 1:
            continue
        shells[r] = shell
        stages[r] = stage
        sizes[r] = size
        bits = 0  # bit_length(size - 1)
        while bits < 63 and (np.int64(1) << bits) <= size - 1:
            bits += 1
        draw = np.int64(0) if size == 1 else np.int64(member_tops[r] >> np.uint64(64 - bits))
        draws[r] = draw if draw < size else -1


def table_readable(profiles: BallProfiles) -> bool:
    """Whether the compiled decision can read the table as ``BallProfiles`` describes it:
    integers, with a column for every depth to ``profiles.depth``.  A table made otherwise (by
    hand) is left to the Python path, which says what is wrong."""
    rows = np.asarray(profiles.cumulative)
    return rows.ndim == 2 and rows.dtype.kind in "iu" and rows.shape[1] > profiles.depth


def _rows_readable(far: ClusterBalls, n_locations: int) -> bool:
    """Whether the compiled decision can read these rows as ``ClusterBalls`` describes them:
    integers, every location with a cluster, every cluster with a row reaching ``far.depth``.
    Rows made otherwise (by hand) are left to the Python path, which says what is wrong."""
    balls, cluster_of = far.balls, far.cluster_of
    return (
        balls.ndim == 2
        and balls.dtype.kind in "iu"
        and far.depth == balls.shape[1] - 1
        and cluster_of.dtype.kind in "iu"
        and cluster_of.shape == (n_locations,)
        and (n_locations == 0 or (cluster_of.min() >= 0 and cluster_of.max() < balls.shape[0]))
    )


class AloneDecider:
    """Exact shell decisions for records alone at their postcode, for one mechanism and its
    profile table (and far-mass rows, if any); holds per-cluster tails between calls."""

    def __init__(
        self,
        powers: tuple[int, ...],
        radius: int,
        profiles: BallProfiles,
        far: ClusterBalls | None,
        graph,
    ):
        total = int(graph.total_prior)
        power_width, self.width = _widths(powers, total)
        self.powers = np.stack([_digits(p, power_width) for p in powers])
        self.radius = radius
        self.depth = min(profiles.depth, radius - 1)
        self.total = total
        self.table = np.asarray(profiles.cumulative)
        self.node_location = graph.node_location
        self.prior = graph.prior
        if far is not None and _rows_readable(far, graph.n_locations):
            self.balls, self.cluster_of, self.far_depth = far.balls, far.cluster_of, far.depth
            n_clusters = far.balls.shape[0]
        else:  # no rows here (rows naming clusters they lack: the Python path raises on them)
            self.balls = np.zeros((0, 1), dtype=np.int64)
            self.cluster_of = np.zeros(1, dtype=np.int64)
            self.far_depth = -1
            n_clusters = 0
        self.tails = np.zeros((max(n_clusters, 1), self.width), dtype=np.uint64)
        self.tail_state = np.zeros(max(n_clusters, 1), dtype=np.int8)

    def guard_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """The far-mass rows and clusters ``ShellSearch.draw_each`` guards by: the ones the
        decisions read (one row of zeros when none, which no record is guarded by)."""
        if self.balls.shape[0]:
            return self.balls, self.cluster_of
        return np.zeros((1, 1), dtype=np.int64), self.cluster_of

    def decide(
        self, nodes: np.ndarray, shell_blocks: bytes, member_blocks: bytes
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(shells, stages, sizes, draws) for records with true nodes ``nodes`` whose "shell"
        and "member" first blocks are joined in ``shell_blocks`` and ``member_blocks``
        (``StreamContext.first_block_bytes``); ``_decide_each`` says what each holds."""
        n = nodes.size
        # big-endian 32-bit words of each block, reversed: digits least significant first
        u_digits = np.zeros((n, _U_DIGITS + 1), dtype=np.uint64)
        u_digits[:, :_U_DIGITS] = np.frombuffer(shell_blocks, dtype=">u4").reshape(n, _U_DIGITS)[
            :, ::-1
        ]
        member_tops = np.frombuffer(member_blocks, dtype=">u8").reshape(n, 4)[:, 0]
        member_tops = np.ascontiguousarray(member_tops, dtype=np.uint64)
        shells = np.empty(n, dtype=np.int64)
        stages = np.empty(n, dtype=np.int8)
        sizes = np.empty(n, dtype=np.int64)
        draws = np.empty(n, dtype=np.int64)
        _decide_each(
            np.ascontiguousarray(nodes, dtype=np.int64),
            self.node_location,
            self.prior,
            self.table,
            self.depth,
            self.radius,
            self.powers,
            self.total,
            u_digits,
            member_tops,
            self.balls,
            self.cluster_of,
            self.far_depth,
            self.tails,
            self.tail_state,
            shells,
            stages,
            sizes,
            draws,
        )
        return shells, stages, sizes, draws
