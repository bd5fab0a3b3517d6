"""Exact draws for all the records that share one true postcode, on the compiled shell search.

For a group of records with the same true node x, :meth:`FastSampler.sample_group` computes the
same outputs as ``mechanism.sampler.sample`` does for each record alone:

1. Each record's shell uniform U is read from its keyed stream (``LazyUniform``, first block).
2. The compiled search explores shells from x until a floating-point estimate of every record's
   shell decision looks settled (``ShellSearch.explore_guided``).  This only sets how far to
   explore; no output depends on it.
3. The shell of each record is decided exactly, with integers, by the core's ``decide_below``
   against bounds z_low <= Z <= z_high valid at the depth reached (``_decide``).  z_high is the
   core's, or the landmark bound (engine/landmarks.py) when that is smaller.  If
   that does not settle a record, the core's own ``choose_shell`` takes over on the same walk
   and explores further (one shell at a time) until its exact comparisons decide.  A wrong
   estimate in step 2 therefore costs time, never a different output.
4. Within the chosen shell the member draw J is the core's ``uniform_int`` on the "member"
   sub-stream, and the node is picked by cumulative prior in node order, as ``pick_in_shell``.
5. A tail draw (rare at the default radius) explores the whole ball and uses the core's
   ``pick_in_tail``.

Shell explorations are shared by the records of a group; nothing is kept between groups except
the fixed-size buffers of the search.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from ..mechanism.mechanism import Mechanism
from ..mechanism.sampler import MEMBER, SHELL, choose_shell, decide_below, pick_in_tail
from ..mechanism.stream import BLOCK_BITS, LazyUniform, StreamContext, SubjectStream
from .landmarks import GraphTables, graph_tables
from .profiles import BallProfiles
from .search import ShellSearch

__all__ = ["Bracket", "Brackets", "FastSampler", "wants_bracket"]

_TOP_BITS = 64  # bits of U handed to the float estimate
BRACKET_MIN_RECORDS = 16  # a source this frequent in one batch is kept for later batches
BRACKET_SOURCES = 16_384  # at most this many sources kept (a few kilobytes each)
_UNDECIDED = -1  # placeholder shell in ``_decide_all``'s answer; never a real shell


class Bracket(NamedTuple):
    """Valid bounds on one source's Z at depth h, kept across batches (``_decide_from_bracket``)."""

    cumulative: list[int]  # C_0 .. C_h
    z_low: int
    z_high: int


Brackets = dict[int, Bracket]  # by source node


def wants_bracket(brackets: Brackets, node: int, depth: int) -> bool:
    """Whether a bracket of ``depth`` shells for ``node`` is worth keeping: it is deeper (so
    tighter) than the one kept, or none is kept and there is room for another source."""
    kept = brackets.get(node)
    if kept is None:
        return len(brackets) < BRACKET_SOURCES
    return depth > len(kept.cumulative)


class _CompiledWalk:
    """``sampler.ExploredShells`` (what ``choose_shell`` reads) over a ``ShellSearch``.

    ``cumulative[h]`` is C_h = sum_{g <= h} P_g * pi(S_g) as an exact integer, and
    ``explored_mass`` is pi(S_0) + ... + pi(S_{depth-1}), both for the shells the search has
    explored so far.
    """

    __slots__ = ("_search", "_powers", "cumulative", "explored_mass")

    def __init__(self, search: ShellSearch, powers: tuple[int, ...]):
        self._search, self._powers = search, powers
        self.cumulative: list[int] = []
        self.explored_mass = 0
        self.sync()

    @property
    def depth(self) -> int:
        return len(self.cumulative)

    def sync(self) -> None:
        """Extend the exact sums to every shell the search has explored."""
        masses = self._search.masses
        total = self.cumulative[-1] if self.cumulative else 0
        for h in range(len(self.cumulative), self._search.n_shells):
            mass = int(masses[h])
            total += self._powers[h] * mass
            self.cumulative.append(total)
            self.explored_mass += mass

    def explore(self) -> None:
        self._search.explore_to(self._search.n_shells + 1)
        self.sync()


def _z_high(
    walk: _CompiledWalk, bound: np.ndarray, powers: tuple[int, ...], radius: int, total_prior: int
) -> int | None:
    """Upper bound on Z from a landmark row ``bound`` (Q[j] >= pi(B_j)), or None if unusable.

    With h = depth - 1 < R - 1 and E = pi(B_h): a node outside B_h is at least h + 1 hops from
    x, and at least j hops if it lies outside the region counted by Q[j - 1]; weights do not
    increase with distance, so the unexplored part of Z is at most
    P_{h+1} (Q[h+1] - E) + sum_{j=h+2}^{R-1} P_j (Q[j] - Q[j-1]) + P_R (Pi - Q[R-1]).
    Every coefficient is checked non-negative; a row failing that is not used.  Only the j
    where Q changes contribute (Q is constant once the landmark squares cover everything).
    """
    h = walk.depth - 1
    explored = walk.explored_mass
    rows = bound[h + 1 : radius].tolist()  # Q[h+1] .. Q[R-1] as Python integers
    first, last = rows[0], rows[-1]
    if first < explored or last > total_prior:
        return None
    z = walk.cumulative[h] + powers[h + 1] * (first - explored)
    previous = first
    for j, q in enumerate(rows[1:], start=h + 2):
        step = q - previous  # Q[j] - Q[j-1]
        if step < 0:
            return None
        if step:
            z += powers[j] * step
        previous = q
    return z + powers[radius] * (total_prior - last)


def _z_low(
    walk: _CompiledWalk, low: np.ndarray, powers: tuple[int, ...], radius: int, total_prior: int
) -> int | None:
    """Lower bound on Z from a row ``low`` (L[j] <= pi(B_j) for j >= 1), or None if unusable.

    With h = depth - 1 < R - 1, E = pi(B_h) and a_j = max(L[j] - E, 0) <= pi(B_j) - E, the
    unexplored part of Z is sum_{j=h+1}^{R-1} P_j m_j + P_R m_R (m_j: unexplored mass at j hops,
    m_R: at R or more), which by summation by parts is
    sum_{j=h+1}^{R-1} (P_j - P_{j+1}) (pi(B_j) - E) + P_R (Pi - E).  The coefficients
    P_j - P_{j+1} are checked non-negative (the powers do not increase), so replacing
    pi(B_j) - E by a_j gives a lower bound.  Written by parts again, it needs P only where a
    changes: P_{h+1} a_{h+1} + sum_{j=h+2}^{R-1} P_j (a_j - a_{j-1}) - P_R a_{R-1}.
    """
    h = walk.depth - 1
    explored = walk.explored_mass
    a = np.maximum(low[h + 1 :] - explored, 0)  # a_{h+1} .. a_{R-1}, exact int64
    if int(a[-1]) > total_prior - explored:
        return None
    steps = np.diff(a)
    if steps.size and steps.min() < 0:
        return None
    z = walk.cumulative[h] + powers[radius] * (total_prior - explored)
    z += powers[h + 1] * int(a[0])
    for offset in np.flatnonzero(steps).tolist():
        z += powers[h + 2 + offset] * int(steps[offset])
    return z - powers[radius] * int(a[-1])


def _decide(
    walk: _CompiledWalk, uniform: LazyUniform, z_low: int, z_high: int, radius: int
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


def _decide_all(
    cumulative: list[int], blocks: list[int], z_low: int, z_high: int, radius: int
) -> tuple[list[int], list[int]]:
    """``_decide`` for many records at once, from the first 256 bits u of each U.

    Returns (shells, undecided): ``undecided`` lists, in increasing order, the records r for
    which ``_decide`` has no answer (there ``shells[r]`` is ``_UNDECIDED``, for the caller to
    replace); every other ``shells[r]`` is ``_decide``'s answer.

    With U in [u / 2**256, (u + 1) / 2**256): ``decide_below`` at i is True iff
    C_i * 2**256 >= (u + 1) * z_high, i.e. C_i >= t = ceil((u + 1) * z_high / 2**256), and False
    iff C_i <= f = floor(u * z_low / 2**256).  C is non-decreasing, so the first True is at
    i = bisect_left(C, t), and every earlier verdict is False exactly when C_{i-1} <= f; that is
    ``_decide``'s answer (None where it has none), found with two products and one bisection
    instead of one ``decide_below`` per shell.  All integer arithmetic.
    """
    h = len(cumulative) - 1
    top = 1 << BLOCK_BITS
    tail = radius if h == radius - 1 else _UNDECIDED  # past C_h: the tail once Z is exact
    shells: list[int] = []
    undecided: list[int] = []
    for r, u in enumerate(blocks):
        i = bisect_left(cumulative, -(-(u + 1) * z_high // top), 0, h + 1)
        if i == 0 or cumulative[i - 1] <= (u * z_low) >> BLOCK_BITS:
            shell = i if i <= h else tail
        else:
            shell = _UNDECIDED
        if shell == _UNDECIDED:
            undecided.append(r)
        shells.append(shell)
    return shells, undecided


class FastSampler:
    """Fast exact sampling for one mechanism; holds one shell search's buffers (not thread-safe).

    ``tables`` (per-graph arrays, see ``engine/landmarks.py``) may be passed in so that worker
    processes share one copy; ``landmarks`` chooses whether the landmark bound is used (it is
    built on first use, once per graph).
    """

    def __init__(
        self,
        mechanism: Mechanism,
        tables: GraphTables | None = None,
        landmarks: bool = False,
        profiles: BallProfiles | None = None,
        brackets: Brackets | None = None,
    ):
        self.mechanism = mechanism
        graph = mechanism.graph
        self.graph = graph
        self.radius = mechanism.radius
        self.powers = mechanism.powers
        self.total_prior = graph.total_prior
        p0 = self.powers[0]
        # P_h / P_0 as the nearest float (Python's int true division rounds correctly); used
        # only by the exploration estimate.
        self.power_ratios = np.array([p / p0 for p in self.powers], dtype=np.float64)
        if tables is None:
            tables = graph_tables(graph)
        self.landmarks = tables.ensure_landmarks() if landmarks else None
        self.profiles = profiles
        self._powers_decrease = all(a >= b for a, b in zip(self.powers, self.powers[1:]))
        self.search = ShellSearch(graph, self.radius, tables.loc_mass)
        # Brackets on Z by source, shared by the caller across batches of one release (see
        # _decide_from_bracket); kept_brackets lists those added here, for worker processes
        # to hand back.
        self.brackets = brackets
        self.kept_brackets: list[tuple[int, Bracket]] = []
        self.stats = {
            "groups": 0,
            "records": 0,
            "shells_explored": 0,
            "locations_explored": 0,
            "fallbacks": 0,
            "tail": 0,
            "bracket_hits": 0,
        }

    def _bounds(
        self, walk: _CompiledWalk, bound: np.ndarray | None, low: np.ndarray | None = None
    ) -> tuple[int, int]:
        """z_low <= Z <= z_high at the walk's depth: the larger of the core's z_low and the one
        from the lower row ``low`` (``_z_low``), and the smaller of the core's z_high and the
        one from the upper row ``bound`` (all are valid bounds)."""
        radius, powers, total = self.radius, self.powers, self.total_prior
        h = walk.depth - 1
        z_low = walk.cumulative[h] + powers[radius] * (total - walk.explored_mass)
        if h == radius - 1:
            return z_low, z_low
        if low is not None and self._powers_decrease:
            raised = _z_low(walk, low, powers, radius, total)
            if raised is not None and raised > z_low:
                z_low = raised
        z_high = walk.cumulative[h] + powers[h + 1] * (total - walk.explored_mass)
        if bound is not None:
            landmark = _z_high(walk, bound, powers, radius, total)
            if landmark is not None and landmark < z_high:
                z_high = landmark
        return z_low, z_high

    def _ball_bounds(self, location: int) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Candidate rows Q[j] >= pi(B_j(x)) and a row L[j] <= pi(B_j(x)) (j < R), or None.

        The profile rows (engine/profiles.py) are tight near x; landmark rows can be tighter far
        away, where the profile is cut at its depth.  The elementwise minimum of two valid
        non-decreasing upper bounds is again one, so each landmark row is also offered combined.
        """
        radius = self.radius
        rows = low = None
        if self.landmarks is not None:
            rows = self.landmarks.bounds_for(location, radius)
        if self.profiles is not None:
            near, low = self.profiles.rows(location, radius)
            if rows is None:
                rows = near.reshape(1, -1)
            else:
                rows = np.vstack([near.reshape(1, -1), np.minimum(rows, near)])
            low = low.reshape(1, -1)
        return rows, low

    def _decide_from_bracket(self, node: int, blocks: list[int]) -> list[int] | None:
        """Every record's shell from a kept bracket for ``node``, or None if one is undecided.

        A bracket (C_0 .. C_h, z_low, z_high) was valid bounds on this source's Z at depth h
        when it was kept, and stays so: it depends only on the graph, the radius and the
        powers, fixed for this sampler.  The search is then explored only as far as the
        deepest chosen shell, which the within-shell draws need.
        """
        if self.brackets is None:
            return None
        kept = self.brackets.get(node)
        if kept is None:
            return None
        shells, undecided = _decide_all(
            kept.cumulative, blocks, kept.z_low, kept.z_high, self.radius
        )
        if undecided:
            return None
        self.stats["bracket_hits"] += 1
        self.search.explore_to(min(max(shells), self.radius - 1) + 1)
        return shells

    def _keep_bracket(
        self,
        brackets: Brackets,
        node: int,
        walk: _CompiledWalk,
        bound: np.ndarray | None,
        low_row: np.ndarray | None,
    ) -> None:
        """Keep C and the bounds on Z at the depth reached, for later groups at ``node``; a
        deeper (tighter) bracket replaces a kept one, so misses become rarer batch by batch."""
        if not wants_bracket(brackets, node, walk.depth):
            return
        walk.sync()
        z_low, z_high = self._bounds(walk, bound, low_row)
        entry = Bracket(list(walk.cumulative), z_low, z_high)
        brackets[node] = entry
        self.kept_brackets.append((node, entry))

    def sample_group(
        self, context: StreamContext, node: int, subject_ids: Sequence[str]
    ) -> list[int]:
        """Output node for each (canonical) subject identifier whose true node is ``node``.

        Precondition: ``context`` was made by ``mechanism.stream_context`` and the identifiers
        are already canonical (``canonical_subject_id``), as ``Mechanism._draw`` makes them.
        """
        label = self.graph.label(node)
        # The first block of the shell and member sub-streams of every record: all that most
        # records ever read (LazyUniform's first block; uniform_int's first attempt).
        shell_blocks, member_blocks = context.first_blocks(subject_ids, label, (SHELL, MEMBER))

        search = self.search
        search.start(node)
        radius, powers, total = self.radius, self.powers, self.total_prior
        streams: dict[int, SubjectStream] = {}
        shells = self._decide_from_bracket(node, shell_blocks)
        if shells is None:
            rows, low = self._ball_bounds(int(self.graph.node_location[node]))
            shift = BLOCK_BITS - _TOP_BITS
            estimate = (
                np.array([u >> shift for u in shell_blocks], dtype=np.uint64) * 2.0**-_TOP_BITS
            )
            best = search.explore_guided(estimate, self.power_ratios, radius, total, rows, low)
            walk = _CompiledWalk(search, powers)
            # explore_guided names a row (best >= 0) only when it was given rows
            bound = rows[best] if rows is not None and best >= 0 else None
            low_row = None if low is None else low[0]
            z_low, z_high = self._bounds(walk, bound, low_row)
            shells, undecided = _decide_all(walk.cumulative, shell_blocks, z_low, z_high, radius)
            for r in undecided:  # the bounds do not settle it: the core decides, exploring on
                self.stats["fallbacks"] += 1
                streams[r] = context.for_subject(subject_ids[r], label)
                shells[r] = choose_shell(
                    walk, LazyUniform(streams[r], SHELL), radius, powers, total
                )
            if self.brackets is not None and len(subject_ids) >= BRACKET_MIN_RECORDS:
                self._keep_bracket(self.brackets, node, walk, bound, low_row)

        out = [0] * len(shells)
        inner = [r for r, h in enumerate(shells) if h < radius]
        if inner:
            masses = search.masses
            picked_shells = np.array([shells[r] for r in inner], dtype=np.int64)
            draws = np.empty(len(inner), dtype=np.int64)
            for t, r in enumerate(inner):
                n = int(masses[shells[r]])
                if n < 1:
                    raise ValueError("n must be positive")  # as uniform_int; C rules it out
                # uniform_int(n, MEMBER): attempt 0 keeps the top bit_length(n - 1) bits of
                # block 0; only a rejected attempt needs the stream itself.
                drop = BLOCK_BITS - (n - 1).bit_length()
                value = member_blocks[r] >> drop if n > 1 else 0
                attempt = 0
                while value >= n:  # rejected: attempt c reads block c, as uniform_int does
                    if r not in streams:
                        streams[r] = context.for_subject(subject_ids[r], label)
                    stream = streams[r]
                    attempt += 1
                    value = int.from_bytes(stream.block(MEMBER, 0, attempt), "big") >> drop
                draws[t] = value
            for r, y in zip(inner, search.pick(picked_shells, draws).tolist()):
                out[r] = y
        if len(inner) < len(shells):
            search.explore_to(radius)
            ball = search.ball()
            prior_cumsum = self.graph.prior_cumsum
            for r, h in enumerate(shells):
                if h == radius:
                    stream = streams.get(r) or context.for_subject(subject_ids[r], label)
                    out[r] = pick_in_tail(stream, ball, prior_cumsum, total)
                    self.stats["tail"] += 1

        stats = self.stats
        stats["groups"] += 1
        stats["records"] += len(shells)
        stats["shells_explored"] += search.n_shells
        stats["locations_explored"] += search.locations_explored
        return out
