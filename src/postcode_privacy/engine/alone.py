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
  ``BallProfiles.shell_masses`` reads them; z_low and z_high are ``FastSampler._bounds``'
  (the core's), then, if those do not settle, z_high is the far-mass row's
  (``fast._z_high_from`` with ``fast._row_tail``) where it is smaller, with the same checks
  that make a row unusable;
* the decision is ``fast._decide_all``'s: with U in [u / 2**256, (u + 1) / 2**256), the shell is
  the first i with C_i >= ceil((u + 1) z_high / 2**256), provided i = 0 or
  C_{i-1} <= floor(u z_low / 2**256); otherwise the record is undecided here;
* any valid bounds that settle a record give the one shell the core defines, so a record
  settled here has the shell ``_sample_one`` gives it, and the member draw's first attempt is
  ``fast._member_value``'s (the top bit_length(n - 1) bits of the "member" block).

Limb arithmetic: a number is a uint64 array whose entries are 32-bit digits, least significant
first, so a digit product plus two digits never exceeds 2**64 - 1.  The widths are fixed per
mechanism from P_0 and the total prior (``_widths``), with room for every sum made here; a
carry out of the top digit is reported, never dropped, and the record is handed back.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .cluster_balls import ClusterBalls
from .profiles import BallProfiles

__all__ = ["AloneDecider", "UNSETTLED"]

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


def _value(digits: np.ndarray) -> int:
    """The integer whose 32-bit digits (least significant first) are ``digits``."""
    return sum(int(d) << (32 * k) for k, d in enumerate(digits.tolist()))


def _widths(powers: tuple[int, ...], total_prior: int) -> tuple[int, int]:
    """Digits of the powers, and of every other number: C_h, the bounds on Z and the row's
    tail are each at most 4 P_0 Pi (docs/performance.md, "Records alone"), and the digits
    allow for twice that."""
    power_width = -(-powers[0].bit_length() // 32)
    width = -(-(powers[0].bit_length() + max(total_prior, 1).bit_length() + 4) // 32) + 1
    return power_width, width


@njit(cache=True)
def _add_mul_digit(acc, a, m, shift):  # pragma: no cover - compiled
    """acc += a * m * 2**(32 shift) for a digit m (< 2**32); False if a carry leaves acc."""
    if m == _ZERO:
        return True
    carry = _ZERO
    n = acc.size
    for k in range(a.size):
        if k + shift >= n:
            if a[k] != _ZERO or carry != _ZERO:
                return False
            continue
        t = acc[k + shift] + a[k] * m + carry
        acc[k + shift] = t & _MASK
        carry = t >> _SHIFT
    k = a.size + shift
    while carry != _ZERO:
        if k >= n:
            return False
        t = acc[k] + carry
        acc[k] = t & _MASK
        carry = t >> _SHIFT
        k += 1
    return True


@njit(cache=True)
def _add_mul(acc, a, m):  # pragma: no cover - compiled
    """acc += a * m for 0 <= m < 2**63; False if a carry leaves acc."""
    low = np.uint64(m & 0xFFFFFFFF)
    high = np.uint64(m >> 32)
    return _add_mul_digit(acc, a, low, 0) and _add_mul_digit(acc, a, high, 1)


@njit(cache=True)
def _add(acc, a):  # pragma: no cover - compiled
    """acc += a (a no wider than acc); False if a carry leaves acc."""
    carry = _ZERO
    for k in range(acc.size):
        t = acc[k] + carry
        if k < a.size:
            t += a[k]
        acc[k] = t & _MASK
        carry = t >> _SHIFT
    return carry == _ZERO


@njit(cache=True)
def _compare(a, b):  # pragma: no cover - compiled
    """-1, 0 or 1 as a < b, a == b or a > b (either may be the wider)."""
    for k in range(max(a.size, b.size) - 1, -1, -1):
        x = a[k] if k < a.size else _ZERO
        y = b[k] if k < b.size else _ZERO
        if x != y:
            return -1 if x < y else 1
    return 0


@njit(cache=True)
def _multiply(out, a, b):  # pragma: no cover - compiled
    """out = a * b (out at least as wide as a and b together; schoolbook)."""
    out[:] = _ZERO
    for i in range(a.size):
        if a[i] == _ZERO:
            continue
        carry = _ZERO
        for j in range(b.size):
            t = out[i + j] + a[i] * b[j] + carry
            out[i + j] = t & _MASK
            carry = t >> _SHIFT
        k = i + b.size
        while carry != _ZERO:
            t = out[k] + carry
            out[k] = t & _MASK
            carry = t >> _SHIFT
            k += 1


@njit(cache=True)
def _decide(cumulative, depth, z_low, z_high, u, u_next, product, radius):  # pragma: no cover
    """``fast._decide_all`` for one record: its shell, or ``UNSETTLED``.

    The first i <= depth with C_i >= t = ceil(u_next z_high / 2**256) (u_next = u + 1), if
    i = 0 or C_{i-1} <= floor(u z_low / 2**256); past C_depth the tail once Z is exact
    (depth = R - 1).  ``product`` is scratch, 8 digits wider than z."""
    _multiply(product, u_next, z_high)
    threshold = product[_U_DIGITS:]
    rounded_up = False
    for k in range(_U_DIGITS):
        if product[k] != _ZERO:
            rounded_up = True
            break
    if rounded_up:  # the ceiling: add one (cannot leave the digits: see _widths)
        for k in range(threshold.size):
            t = threshold[k] + _ONE
            threshold[k] = t & _MASK
            if (t >> _SHIFT) == _ZERO:
                break
    low, high = 0, depth + 1  # bisect_left(C, threshold)
    while low < high:
        middle = (low + high) // 2
        if _compare(cumulative[middle], threshold) < 0:
            low = middle + 1
        else:
            high = middle
    i = low
    if i > 0:
        _multiply(product, u, z_low)
        if _compare(cumulative[i - 1], product[_U_DIGITS:]) > 0:
            return -1
    if i <= depth:
        return i
    return radius if depth == radius - 1 else -1


@njit(cache=True)
def _row_tail(tail, balls, cluster, far_depth, start, radius, powers, total):  # pragma: no cover
    """``fast._row_tail`` of the cluster's far-mass row (Q[j] = balls[cluster, j] to the rows'
    depth, the total prior past it) into ``tail``: True, or False for an unusable row."""
    tail[:] = _ZERO
    previous = np.int64(balls[cluster, start - 1]) if start - 1 <= far_depth else total
    last = np.int64(balls[cluster, radius - 1]) if radius - 1 <= far_depth else total
    if last > total:
        return False
    for j in range(start, radius):
        q = np.int64(balls[cluster, j]) if j <= far_depth else total
        step = q - previous
        if step < 0:
            return False
        if step > 0 and not _add_mul(tail, powers[j], step):
            return False
        previous = q
    return _add_mul(tail, powers[radius], total - last)


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
    width,
    shells,
    stages,
    sizes,
    draws,
):  # pragma: no cover - compiled
    """The decision of ``AloneDecider.decide`` for each record r (true node ``nodes[r]``):
    ``shells[r]`` (``UNSETTLED`` if handed back), ``stages[r]`` (1: the core's bounds
    settled it, 2: the far-mass row's), ``sizes[r]`` = pi(S_shell) and ``draws[r]`` = the
    member draw's first attempt, -1 if rejected (the caller reads the next blocks).

    ``tails``/``tail_state`` keep each cluster's row tail (state 0: not yet computed, 1:
    usable, 2: unusable); ``balls`` has no rows when the far-mass rows are not in use."""
    n_records = nodes.size
    cumulative = np.zeros((depth + 1, width), dtype=np.uint64)
    masses = np.zeros(depth + 1, dtype=np.int64)
    z_low = np.zeros(width, dtype=np.uint64)
    z_high = np.zeros(width, dtype=np.uint64)
    from_row = np.zeros(width, dtype=np.uint64)
    product = np.zeros(width + _U_DIGITS + 1, dtype=np.uint64)
    u = np.zeros(_U_DIGITS + 1, dtype=np.uint64)
    u_next = np.zeros(_U_DIGITS + 1, dtype=np.uint64)
    have_rows = balls.shape[0] > 0
    for r in range(n_records):
        shells[r] = -1
        stages[r] = 0
        sizes[r] = 0
        draws[r] = -1
        node = nodes[r]
        location = node_location[node]
        # BallProfiles.shell_masses: shell 0 is the node, ball k >= 1 the location's
        masses[0] = prior[node]
        previous = masses[0]
        for k in range(1, depth + 1):
            ball = np.int64(table[location, k])
            masses[k] = ball - previous
            previous = ball
        explored = previous
        rest = total - explored
        ok = rest >= 0
        for k in range(depth + 1):
            if masses[k] < 0:
                ok = False
        if not ok:  # a table that disagrees with the graph: the Python path says so
            continue
        cumulative[0, :] = _ZERO
        ok = _add_mul(cumulative[0], powers[0], masses[0])
        for k in range(1, depth + 1):
            cumulative[k, :] = cumulative[k - 1]
            ok = ok and _add_mul(cumulative[k], powers[k], masses[k])
        # FastSampler._bounds with the core's bounds
        z_low[:] = cumulative[depth]
        ok = ok and _add_mul(z_low, powers[radius], rest)
        if depth == radius - 1:
            z_high[:] = z_low
        else:
            z_high[:] = cumulative[depth]
            ok = ok and _add_mul(z_high, powers[depth + 1], rest)
        if not ok:
            continue
        u[:_U_DIGITS] = u_digits[r]
        u[_U_DIGITS] = _ZERO
        u_next[:] = u
        for k in range(_U_DIGITS + 1):  # u + 1
            t = u_next[k] + _ONE
            u_next[k] = t & _MASK
            if (t >> _SHIFT) == _ZERO:
                break
        shell = _decide(cumulative, depth, z_low, z_high, u, u_next, product, radius)
        stage = 1
        if shell == -1 and depth < radius - 1 and have_rows:
            # fast._far_z_high: C_D + P_{D+1} (Q[D+1] - E) + the row's tail
            cluster = cluster_of[location]
            if tail_state[cluster] == 0:
                usable = _row_tail(
                    tails[cluster], balls, cluster, far_depth, depth + 2, radius, powers, total
                )
                tail_state[cluster] = 1 if usable else 2
            first = np.int64(balls[cluster, depth + 1]) if depth + 1 <= far_depth else total
            if tail_state[cluster] == 1 and first >= explored:
                from_row[:] = cumulative[depth]
                ok = _add_mul(from_row, powers[depth + 1], first - explored)
                ok = ok and _add(from_row, tails[cluster])
                if ok and _compare(from_row, z_high) < 0:
                    z_high[:] = from_row
                    shell = _decide(cumulative, depth, z_low, z_high, u, u_next, product, radius)
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


class AloneDecider:
    """Exact shell decisions for records alone at their postcode, for one mechanism and its
    profile table (and far-mass rows, if any); holds per-cluster tails between calls."""

    def __init__(self, powers: tuple[int, ...], radius: int, profiles: BallProfiles, graph):
        total = int(graph.total_prior)
        power_width, self.width = _widths(powers, total)
        self.powers = np.stack([_digits(p, power_width) for p in powers])
        self.radius = radius
        self.depth = min(profiles.depth, radius - 1)
        self.total = total
        self.table = profiles._rows
        self.node_location = graph.node_location
        self.prior = graph.prior
        far: ClusterBalls | None = profiles.far
        if far is not None:
            self.balls, self.cluster_of, self.far_depth = far.balls, far.cluster_of, far.depth
            n_clusters = far.balls.shape[0]
        else:
            self.balls = np.zeros((0, 1), dtype=np.int64)
            self.cluster_of = np.zeros(1, dtype=np.int64)
            self.far_depth = -1
            n_clusters = 0
        self.tails = np.zeros((max(n_clusters, 1), self.width), dtype=np.uint64)
        self.tail_state = np.zeros(max(n_clusters, 1), dtype=np.int8)

    def decide(
        self, nodes: np.ndarray, shell_blocks: bytes, member_blocks: bytes
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(shells, stages, sizes, draws) for records with true nodes ``nodes`` whose "shell"
        and "member" first blocks are joined in ``shell_blocks`` and ``member_blocks``
        (``StreamContext.first_block_bytes``); ``_decide_each`` says what each holds."""
        n = nodes.size
        # big-endian 32-bit words of each block, reversed: digits least significant first
        u_digits = np.frombuffer(shell_blocks, dtype=">u4").reshape(n, _U_DIGITS)[:, ::-1]
        u_digits = np.ascontiguousarray(u_digits, dtype=np.uint64)
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
            self.width,
            shells,
            stages,
            sizes,
            draws,
        )
        return shells, stages, sizes, draws
