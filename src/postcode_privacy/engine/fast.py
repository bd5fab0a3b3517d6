"""Exact draws for all the records that share one true postcode, on the compiled shell search.

For a group of records with the same true node x, :meth:`FastSampler.sample_group` computes the
same outputs as ``mechanism.sampler.sample`` does for each record alone:

1. Each record's shell uniform U is read from its keyed stream (``LazyUniform``, first block).
2. The shell of each record is decided exactly, with integers, by the core's ``decide_below``
   rule against bounds z_low <= Z <= z_high on the normaliser (``decide_all``).  The bounds
   come, in this order, from
   a. a bracket kept for this source by an earlier batch of the release (``Bracket``);
   b. the ball-mass profile table (engine/profiles.py), which gives C_0 .. C_D exactly without
      exploring, D being the table's depth, with the core's bound beyond D, then with the
      tighter bound of the upper rows (the far-mass row of engine/cluster_balls.py and, where
      they are built, the landmark rows; the smallest bound wins), then with a tighter lower
      bound too, from the floor the table rows of the locations within ``FLOOR_HOPS`` give
      (``z_low_by_floor``);
   c. exploring on from there until a floating-point estimate of every decision looks settled
      (``ShellSearch.explore_guided``; the float only sets how far to explore), with the
      core's or an upper row's bound (engine/landmarks.py, engine/cluster_balls.py) beyond the
      depth reached, and the floor's; records these bounds do not settle go to the core's own
      ``choose_shell``, which explores further one shell at a time until its exact
      comparisons decide.
   Each step is used only if it settles every record of the group, so a loose bound costs
   time, never a different output.
3. Within the chosen shell the member draw J is the core's ``uniform_int`` on the "member"
   sub-stream, and the node is picked by cumulative prior in node order, as ``pick_in_shell``.
   The search explores only as far as the deepest chosen shell for that.
4. A tail draw (rare at the default radius) explores the whole ball and uses the core's
   ``pick_in_tail``.

A group of one record (every record of a file of distinct postcodes) whose shell step 2b
settles, short of the floor, and is not the tail takes step 3 (exploring, the guard on the
explored balls, the pick) in one compiled call (``_sample_one``, ``ShellSearch.draw_one``); a
run of such groups (``sample_each``) takes step 2b in one compiled call for them all, with the
same integers (engine/alone.py), and step 3 in another (``ShellSearch.draw_each``).

Nothing is kept between groups except the fixed-size buffers of the search and the brackets.

Why every output equals the core's: docs/performance.md, "Why the outputs are identical" and
"Deciding the shell, stage by stage".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from itertools import accumulate
from operator import mul
from typing import NamedTuple

import numpy as np

from ..mechanism.mechanism import Mechanism
from ..mechanism.sampler import MEMBER, SHELL, choose_shell, pick_in_tail
from ..mechanism.stream import BLOCK_BITS, LazyUniform, StreamContext, SubjectStream
from .alone import AloneDecider, table_readable
from .bounds import (
    UNDECIDED,
    decide_all,
    row_tail,
    z_high_by_row,
    z_high_by_tail,
    z_low_by_floor,
)
from .landmarks import GraphTables, graph_tables
from .profiles import BallProfiles
from .search import ShellSearch, ball_disagreement
from .shared_shells import WORD, SharedShells

__all__ = ["Bracket", "Brackets", "FastSampler", "wants_bracket"]

_TOP_BITS = 64  # bits of U handed to the float estimate
BRACKET_MIN_RECORDS = 16  # a source this frequent in one batch is kept for later batches
BRACKET_SOURCES = 16_384  # at most this many sources kept (a few kilobytes each)
_NONE = np.zeros(0, dtype=np.int64)  # a row not given to ``ball_disagreement`` (checks none)
# Location shells whose table rows give the floor under the far mass (``_ball_floor``): at
# eps = 0.5, 12 hops (about 1,400 locations) settle about 40% of the records the rows leave
# undecided; 4 and 8 hops settle fewer, 16 barely more (docs/performance.md, "Deciding the
# shell, stage by stage").
FLOOR_HOPS = 12
# A shared sweep decides the records the bounds leave undecided, in ``sample_groups``, by
# exploring their sources this many hops past the profile table (never fewer than FLOOR_HOPS:
# see ``_deciding_depth``), where the radius is at most DECIDING_RADIUS and that depth is
# short of R - 1 (on the national graph 58 <= R <= 120, eps from about 0.47 to 0.98): at
# smaller eps too few are settled there for the sweep to pay (docs/performance.md, "Shared
# sweeps").
DECIDING_HOPS = 12
DECIDING_RADIUS = 120
# Records alone at their postcode are decided and drawn together (``sample_each``) from this
# many in a run; below it, one by one costs no more than the arrays.
ALONE_MIN = 8
# Above this size of P_0 the limb arithmetic of engine/alone.py is not used (its cost grows
# with the square of the digits; the national graph's powers have about 120 bits).
ALONE_MAX_POWER_BITS = 1024


class Bracket(NamedTuple):
    """Valid bounds on one source's Z at depth h, kept across batches (``_brackets_for``)."""

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


def _guard(
    masses: np.ndarray,
    n_shells: int,
    table_row: np.ndarray | None,
    floor: np.ndarray | None,
    far_row: np.ndarray | None,
    sampler: FastSampler,
) -> None:
    """Stop if the explored balls disagree with the table row, the floor or the far-mass row
    the group was decided with (``FastSampler._check_explored`` says why)."""
    if table_row is None and floor is None and far_row is None:
        return
    found = ball_disagreement(
        masses,
        n_shells,
        _NONE if table_row is None else table_row,
        _NONE if floor is None else floor,
        _NONE if far_row is None else far_row,
    )
    _refuse_disagreement(found, sampler)


def _refuse_disagreement(found: int, sampler: FastSampler) -> None:
    """Stop with the error for what ``ball_disagreement`` found (nothing for 0)."""
    if found == 1:
        raise RuntimeError(
            "the ball-mass profiles disagree with the graph; delete the cached profiles"
        )
    if found == 2:
        raise RuntimeError(
            "the far-mass rows disagree with the graph; delete the cached "
            f"clusters-{sampler.graph.sha256[:32]}-* files in the cache directory"
        )


def _member_value(
    context: StreamContext, subject_id: str, label: str, n: int, first_block: int
) -> int:
    """The record's ``uniform_int(n, MEMBER)``, its first block already read: attempt 0 keeps
    the top bit_length(n - 1) bits of block 0; only a rejected attempt needs the stream."""
    if n < 1:
        raise ValueError("n must be positive")  # as uniform_int; C rules it out
    drop = BLOCK_BITS - (n - 1).bit_length()
    value = first_block >> drop if n > 1 else 0
    attempt = 0
    while value >= n:  # rejected: attempt c reads block c, as uniform_int does
        attempt += 1
        value = context.block_int(subject_id, label, MEMBER, attempt) >> drop
    return value


class _Group:
    """The records of one true postcode being sampled: their stream context, node, identifiers,
    label and first shell blocks, and the keyed streams opened for the few that need more."""

    __slots__ = ("context", "node", "subject_ids", "label", "shell_blocks", "_streams")

    def __init__(
        self,
        context: StreamContext,
        node: int,
        subject_ids: Sequence[str],
        label: str,
        shell_blocks: list[int],
    ):
        self.context, self.node, self.subject_ids = context, node, subject_ids
        self.label, self.shell_blocks = label, shell_blocks
        self._streams: dict[int, SubjectStream] = {}

    def stream(self, r: int) -> SubjectStream:
        """Record r's keyed stream (opened once)."""
        stream = self._streams.get(r)
        if stream is None:
            stream = self._streams[r] = self.context.for_subject(self.subject_ids[r], self.label)
        return stream


class _Decided(NamedTuple):
    """A group whose shells are decided, and what drawing its members needs."""

    group: _Group
    shells: list[int]
    member_blocks: list[int]
    table_row: np.ndarray | None  # what the guard checks the explored balls against
    floor: np.ndarray | None
    far_row: np.ndarray | None
    table_masses: list[int] | None  # node-shell masses 0 .. D from the table, if read
    pending: list[int]  # records left undecided (``FastSampler._decide`` with ``defer``)


class FastSampler:
    """Fast exact sampling for one mechanism; holds one shell search's buffers (not thread-safe).

    ``tables`` (per-graph arrays, see ``engine/landmarks.py``) may be passed in so that worker
    processes share one copy; ``landmarks`` chooses whether the landmark bound is used (it is
    built on first use, once per graph); ``profiles`` is the table of engine/profiles.py, or
    None to explore from shell 0 every time; ``floor`` whether its rows also give the floor
    under the far mass (``_ball_floor``); ``along_map`` whether the search reads the graph
    numbered along the map (engine/layout.py, built once per graph).  None of these changes
    an output.
    """

    def __init__(
        self,
        mechanism: Mechanism,
        tables: GraphTables | None = None,
        landmarks: bool = False,
        profiles: BallProfiles | None = None,
        brackets: Brackets | None = None,
        floor: bool = True,
        along_map: bool = False,
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
        if profiles is not None and profiles.graph_sha256 != graph.sha256:
            raise ValueError("the ball-mass profiles belong to another graph")
        self.profiles = profiles
        # Far-mass rows come with the profile table when it has them (engine/cluster_balls.py).
        self.far = profiles.far if profiles is not None else None
        if self.far is not None and self.far.graph_sha256 != graph.sha256:
            raise ValueError("the far-mass rows belong to another graph")
        layout = tables.search_layout(along_map)
        self.search = ShellSearch(graph, self.radius, tables.loc_mass, layout)
        # Brackets on Z by source, shared by the caller across batches of one release (see
        # _brackets_for); kept_brackets lists those added here, for worker processes
        # to hand back.
        self.brackets = brackets
        self.kept_brackets: list[tuple[int, Bracket]] = []
        self._profile_row: np.ndarray | None = None  # the group's table row, if one was read
        self._far_row: np.ndarray | None = None  # the group's far-mass row, if one was read
        self._floor: np.ndarray | None = None  # the group's floor, if one was made
        self._table_masses: list[int] | None = None  # the group's shell masses from the table
        self._shared: SharedShells | None = None  # buffers of the shared sweeps, made on use
        self._alone: AloneDecider | None = None  # records alone (``sample_each``), made on use
        # row_tail of each far-mass row by (cluster, start), None for an unusable row
        self._far_tails: dict[tuple[int, int], int | None] = {}
        # The table whose rows give the floor (``_ball_floor``); ``floor=False`` goes without,
        # for measuring what it buys (docs/performance.md).
        self._table = np.asarray(profiles.cumulative) if profiles is not None and floor else None
        self.stats = {
            "groups": 0,
            "records": 0,
            "shells_explored": 0,
            "locations_explored": 0,
            "fallbacks": 0,
            "tail": 0,
            "bracket_hits": 0,
            "profile_hits": 0,  # settled by the table with the core's bound past it
            "row_hits": 0,  # settled by the table with an upper row's bound past it
            "floor_hits": 0,  # settled by the table, the rows and the floor past it
            "shared_groups": 0,  # drawn by a shared sweep (``sample_groups``)
            "swept_to_decide": 0,  # groups a shared sweep explored to decide
            "decided_by_sweep": 0,  # and those it decided
        }

    def _bounds(
        self,
        cumulative: list[int],
        explored: int,
        bound: np.ndarray | None,
        floor: np.ndarray | None = None,
    ) -> tuple[int, int]:
        """z_low <= Z <= z_high once shells 0 .. h are known (``cumulative`` = C_0 .. C_h,
        ``explored`` = their mass): the core's z_low, or the floor's (``z_low_by_floor``) when a
        ``floor`` is given, and the smaller of the core's z_high and the one from the upper
        row ``bound`` (all are valid bounds)."""
        radius, powers, total = self.radius, self.powers, self.total_prior
        h = len(cumulative) - 1
        z_low = cumulative[h] + powers[radius] * (total - explored)
        if h == radius - 1:
            return z_low, z_low
        if floor is not None:
            z_low = max(z_low, z_low_by_floor(cumulative, explored, floor, powers, radius, total))
        z_high = cumulative[h] + powers[h + 1] * (total - explored)
        if bound is not None:
            from_row = z_high_by_row(cumulative, explored, bound, powers, radius, total)
            if from_row is not None and from_row < z_high:
                z_high = from_row
        return z_low, z_high

    def _profile_shells(self, node: int) -> tuple[list[int], list[int]]:
        """Masses of shells 0 .. D and C_0 .. C_D, D = min(profile depth, R - 1), read from the
        profile table (engine/profiles.py) without exploring.

        The table gives pi(B_k(x)) exactly for k <= D, so these are the masses and the C that
        the exact path has after exploring shells 0 .. D.  Precondition: ``self.profiles``.
        """
        profiles = self.profiles
        assert profiles is not None
        depth = min(profiles.depth, self.radius - 1)
        location = int(self.graph.node_location[node])
        masses = profiles.shell_masses(location, int(self.graph.prior[node]), depth)
        return masses, list(accumulate(map(mul, self.powers, masses)))

    def _upper_rows(self, node: int) -> np.ndarray | None:
        """Rows Q with Q[j] >= pi(B_j(x)) for the true node x, j < R, non-decreasing: the
        landmark rows (engine/landmarks.py) and the far-mass row of x's cluster
        (engine/cluster_balls.py), whichever are in use; None if neither is.  The far-mass
        row is also kept for this group, for ``_check_explored``."""
        location = int(self.graph.node_location[node])
        rows = []
        if self.landmarks is not None:
            rows.append(self.landmarks.bounds_for(location, self.radius))
        if self.far is not None:
            self._far_row = self.far.upper_row(location, self.radius)
            rows.append(self._far_row[np.newaxis, :])
        return np.concatenate(rows) if rows else None

    def _rows_z_high(self, node: int, cumulative: list[int], explored: int) -> int | None:
        """The smallest upper bound on Z from the rows of ``_upper_rows`` once shells 0 .. h
        are known, or None."""
        if len(cumulative) >= self.radius:
            return None
        location = int(self.graph.node_location[node])
        bounds = []
        if self.landmarks is not None:
            for row in self.landmarks.bounds_for(location, self.radius):
                bounds.append(
                    z_high_by_row(
                        cumulative, explored, row, self.powers, self.radius, self.total_prior
                    )
                )
        if self.far is not None:
            bounds.append(self._far_z_high(location, cumulative, explored))
        usable = [z for z in bounds if z is not None]
        return min(usable) if usable else None

    def _far_z_high(self, location: int, cumulative: list[int], explored: int) -> int | None:
        """``z_high_by_row`` from the far-mass row of the location's cluster (kept for this group,
        for ``_check_explored``).  The row's own part of the bound (``row_tail``) is the same
        for every source of the cluster at the same depth, so it is kept by cluster: a few
        megabytes at most for all the clusters, one Python sum of about R terms saved a
        source."""
        far, radius, total = self.far, self.radius, self.total_prior
        assert far is not None
        cluster, start = int(far.cluster_of[location]), len(cumulative) + 1
        self._far_row = far.balls[cluster]  # Q[j] to the rows' depth (the total prior past it)
        if (cluster, start) in self._far_tails:
            tail = self._far_tails[cluster, start]
        else:
            row = far.upper_row(location, radius)
            tail = self._far_tails[cluster, start] = row_tail(
                row, start, self.powers, radius, total
            )
        first = int(self._far_row[start - 1]) if start - 1 <= far.depth else total  # Q[h+1]
        return z_high_by_tail(cumulative, explored, first, tail, self.powers)

    def _ball_floor(self) -> np.ndarray | None:
        """The floor under the source's balls (``ShellSearch.ball_floor``) from the table rows
        of the locations within ``FLOOR_HOPS`` (explored for it), kept for this group; None
        without a table or with ``floor=False``.  Precondition: the search has started at the
        group's node."""
        if self._table is None:
            return None
        search = self.search
        search.explore_to(FLOOR_HOPS + 1)
        self._floor = search.ball_floor(self._table, search.n_shells - 1, self.radius)
        return self._floor

    def _brackets_for(self, node: int, with_floor: bool = True) -> Iterator[tuple[str, Bracket]]:
        """Bounds on this source's Z, cheapest first: a bracket kept by an earlier batch (it
        depends only on the graph, the radius and the powers, so it stays valid), then the
        profile table's C_0 .. C_D with the core's bound beyond D, then the same with the
        upper rows' bound (dearer to compute, so only for what is left), then, ``with_floor``,
        that with the floor's lower bound (which explores ``FLOOR_HOPS`` shells: the search
        must have started at ``node``; none of the others touches the search)."""
        if self.brackets is not None:
            kept = self.brackets.get(node)
            if kept is not None:
                yield "bracket_hits", kept
        if self.profiles is None:
            return
        masses, cumulative = self._profile_shells(node)
        self._table_masses = masses
        self._profile_row = self.profiles.ball_row(int(self.graph.node_location[node]))
        explored = sum(masses)
        z_low, z_high = self._bounds(cumulative, explored, None)
        yield "profile_hits", Bracket(cumulative, z_low, z_high)
        tighter = self._rows_z_high(node, cumulative, explored)
        if tighter is not None and tighter < z_high:
            z_high = tighter
            yield "row_hits", Bracket(cumulative, z_low, z_high)
        if not with_floor or len(cumulative) >= self.radius:  # (then Z is exact)
            return
        floor = self._ball_floor()
        if floor is not None:
            powers, radius, total = self.powers, self.radius, self.total_prior
            raised = z_low_by_floor(cumulative, explored, floor, powers, radius, total)
            if raised > z_low:
                yield "floor_hits", Bracket(cumulative, raised, z_high)

    def _forget_group_rows(self) -> None:
        """A new group: none of the rows the guard checks, nor the table's masses, is read yet."""
        self._profile_row = None
        self._far_row = None
        self._floor = None
        self._table_masses = None

    def _decide_shells(self, group: _Group, defer: bool = False) -> tuple[list[int], list[int]]:
        """Every record's shell: from the brackets of ``_brackets_for`` while they settle
        records, then by exploring for those still undecided (``_decide_by_exploring``);
        with ``defer``, those are left undecided instead.  Returns the shells (``UNDECIDED``
        for a record left so) and the records left undecided."""
        blocks = group.shell_blocks
        shells = [UNDECIDED] * len(blocks)
        pending = list(range(len(blocks)))
        for stat, bracket in self._brackets_for(group.node):
            decided, undecided = decide_all(
                bracket.cumulative,
                [blocks[r] for r in pending],
                bracket.z_low,
                bracket.z_high,
                self.radius,
            )
            still = []
            for r, shell in zip(pending, decided):
                if shell == UNDECIDED:
                    still.append(r)
                else:
                    shells[r] = shell
            self.stats[stat] += len(pending) - len(still)
            pending = still
            if not pending:
                return shells, []
        if defer:
            return shells, pending
        self._decide_by_exploring(group, shells, pending)
        return shells, []

    def _check_explored(self) -> None:
        """The shells the search explored must have the masses the profile table gave, balls
        no heavier than the far-mass row allowed and none lighter than the floor promised: a
        cheap guard against tables that disagree with the graph (they would change outputs;
        the floor reads the table rows of the source's neighbours, which the first check
        does not see)."""
        search = self.search
        _guard(search.masses, search.n_shells, self._profile_row, self._floor, self._far_row, self)

    def _decide_by_exploring(self, group: _Group, shells: list[int], pending: list[int]) -> None:
        """The shells of records ``pending`` (into ``shells``) by exploring as far as a float
        estimate says, then deciding exactly; records the bounds do not settle go to the core's
        ``choose_shell``, which explores on one shell at a time."""
        search, node = self.search, group.node
        radius, powers, total = self.radius, self.powers, self.total_prior
        rows = self._upper_rows(node)
        shift = BLOCK_BITS - _TOP_BITS
        mine = [group.shell_blocks[r] for r in pending]
        estimate = np.array([u >> shift for u in mine], dtype=np.uint64) * 2.0**-_TOP_BITS
        floor = self._floor
        best = search.explore_guided(estimate, self.power_ratios, radius, total, rows, floor)
        walk = _CompiledWalk(search, powers)
        # explore_guided names a row (best >= 0) only when it was given rows
        bound = rows[best] if rows is not None and best >= 0 else None
        z_low, z_high = self._bounds(walk.cumulative, walk.explored_mass, bound, floor)
        decided, undecided = decide_all(walk.cumulative, mine, z_low, z_high, radius)
        for r, shell in zip(pending, decided):
            shells[r] = shell
        for i in undecided:  # the bounds do not settle it: the core decides, exploring on
            r = pending[i]
            self.stats["fallbacks"] += 1
            uniform = LazyUniform(group.stream(r), SHELL)
            shells[r] = choose_shell(walk, uniform, radius, powers, total)
        brackets = self.brackets
        if brackets is not None and len(group.subject_ids) >= BRACKET_MIN_RECORDS:
            # Keep C and the bounds at the depth reached, for later groups at this node; a
            # deeper (tighter) bracket replaces a kept one, so misses become rarer.
            if wants_bracket(brackets, node, walk.depth):
                walk.sync()
                z_low, z_high = self._bounds(walk.cumulative, walk.explored_mass, bound, floor)
                entry = Bracket(list(walk.cumulative), z_low, z_high)
                brackets[node] = entry
                self.kept_brackets.append((node, entry))

    @staticmethod
    def _member_draw(group: _Group, r: int, n: int, first_block: int) -> int:
        """Record r's ``uniform_int(n, MEMBER)`` (``_member_value``)."""
        return _member_value(group.context, group.subject_ids[r], group.label, n, first_block)

    def sample_group(
        self, context: StreamContext, node: int, subject_ids: Sequence[str]
    ) -> list[int]:
        """Output node for each (canonical) subject identifier whose true node is ``node``.

        Precondition: ``context`` was made by ``mechanism.stream_context`` and the identifiers
        are already canonical (``canonical_subject_id``), as ``Mechanism._draw`` makes them.
        """
        if len(subject_ids) == 1 and self.profiles is not None:
            out = self._sample_one(context, node, subject_ids[0])
            if out >= 0:
                return [out]
        return self._draw_alone(self._decide(context, node, subject_ids))

    def sample_each(
        self, context: StreamContext, groups: Sequence[tuple[int, Sequence[str]]]
    ) -> list[list[int]]:
        """``sample_group`` of each ``(node, subject_ids)``, in order, with the same outputs.

        The records alone at their postcode (groups of one, the usual group of a file of
        distinct postcodes) are decided together by one compiled call (engine/alone.py: the
        decision ``_sample_one`` makes from the profile table and the far-mass row) and drawn
        by another (``ShellSearch.draw_each``: ``draw_one``'s exploring, guard and pick);
        any record those leave unsettled, and every other group, goes to ``sample_group``.
        A source with a bracket kept by an earlier batch goes there too, so the statistics
        say what settled it, as they would without this path.
        """
        outputs: list[list[int] | None] = [None] * len(groups)
        decider = self._alone_decider()
        if decider is not None:
            brackets = self.brackets or {}
            # A node met twice here (the pieces of a split group) goes to ``sample_group``
            # too: a bracket kept by its first piece must settle the next, as it would there.
            seen = Counter(node for node, _ in groups)
            alone = [
                i
                for i, (node, subject_ids) in enumerate(groups)
                if len(subject_ids) == 1 and node not in brackets and seen[node] == 1
            ]
            if len(alone) >= ALONE_MIN:
                nodes = [groups[i][0] for i in alone]
                subject_ids = [groups[i][1][0] for i in alone]
                try:
                    drawn = self._sample_alone(context, decider, nodes, subject_ids)
                except RuntimeError:  # a table or rows that disagree with the graph: one by
                    # one in the groups' order, so the error names what the first record met
                    return [self.sample_group(context, v, ids) for v, ids in groups]
                for i, out in zip(alone, drawn):
                    if out >= 0:
                        outputs[i] = [out]
        return [
            out if out is not None else self.sample_group(context, node, subject_ids)
            for out, (node, subject_ids) in zip(outputs, groups)
        ]

    def _alone_decider(self) -> AloneDecider | None:
        """The compiled decision of engine/alone.py for this mechanism (made once), or None
        without a profile table, with a table it cannot read as ``BallProfiles`` describes it
        (made by hand: the Python path says what is wrong), or where the powers are too large
        for it to pay."""
        profiles = self.profiles
        if self._alone is None and profiles is not None:
            if table_readable(profiles) and self.powers[0].bit_length() <= ALONE_MAX_POWER_BITS:
                self._alone = AloneDecider(self.powers, self.radius, profiles, self.far, self.graph)
        return self._alone

    def load_alone_kernels(self) -> None:
        """Load (or compile) ``sample_each``'s compiled calls now, with no records: a caller
        about to fork workers does this once for them all to inherit."""
        decider = self._alone_decider()
        if decider is None:
            return
        nothing = np.zeros(0, dtype=np.int64)
        decider.decide(nothing, b"", b"")
        self._draw_decided(decider, nothing, nothing, nothing, np.zeros(0, dtype=np.bool_))

    def _draw_decided(
        self,
        decider: AloneDecider,
        nodes: np.ndarray,
        shells: np.ndarray,
        draws: np.ndarray,
        by_row: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """``ShellSearch.draw_each`` of records the decider settled, guarded by the table and
        the rows the decisions read (a record's far-mass row where ``by_row``); stops at a
        disagreement. Returns (nodes drawn, shells explored each, locations explored)."""
        balls, cluster_of = decider.guard_rows()
        picked, explored, locations, status = self.search.draw_each(
            nodes,
            shells,
            draws,
            decider.table,
            self.graph.node_location,
            balls,
            cluster_of,
            by_row,
        )
        _refuse_disagreement(status, self)
        return picked, explored, locations

    def _sample_alone(
        self,
        context: StreamContext,
        decider: AloneDecider,
        nodes: list[int],
        subject_ids: list[str],
    ) -> list[int]:
        """The output node of each record alone at ``nodes[r]``, or -1 where the compiled
        decision leaves it for ``sample_group``; ``_sample_one``'s steps, batched: the first
        blocks, the decision, the member draw (whose rejected first attempts, about a
        quarter, read their next blocks here, as ``_member_value`` does), the guarded pick."""
        node_array = np.array(nodes, dtype=np.int64)
        labels = self.graph.labels_of(node_array)
        shell_blocks, member_blocks = context.first_block_bytes(
            subject_ids, labels, (SHELL, MEMBER)
        )
        shells, stages, sizes, draws = decider.decide(node_array, shell_blocks, member_blocks)
        for r in np.flatnonzero((shells >= 0) & (draws < 0)).tolist():
            first = int.from_bytes(member_blocks[32 * r : 32 * r + 32], "big")
            draws[r] = _member_value(context, subject_ids[r], labels[r], int(sizes[r]), first)
        settled = np.flatnonzero(shells >= 0)
        by_row = stages[settled] == 2  # the far-mass row settled it: the guard checks that row
        picked, explored, locations = self._draw_decided(
            decider, node_array[settled], shells[settled], draws[settled], by_row
        )
        out = np.full(len(nodes), -1, dtype=np.int64)
        out[settled] = picked
        stats = self.stats
        stats["row_hits"] += int(by_row.sum())
        stats["profile_hits"] += int(settled.size - by_row.sum())
        stats["groups"] += int(settled.size)
        stats["records"] += int(settled.size)
        stats["shells_explored"] += int(explored.sum())
        stats["locations_explored"] += locations
        return out.tolist()

    def _sample_one(self, context: StreamContext, node: int, subject_id: str) -> int:
        """``sample_group`` for one record, if the profile table settles its shell with the
        core's bound past the table or an upper row's (the brackets of ``_brackets_for``
        short of the floor) and the shell is not the tail: the record's output node, drawn and
        guarded by one compiled call (``ShellSearch.draw_one``).  Otherwise -1, before that
        call (the search is as it was; the far-mass row kept for the group may not be), for
        ``_decide`` and ``_draw_alone`` to draw it from the start.

        The same output as theirs: the same exact decision (any valid bounds that settle it
        give the one shell ``decide_below`` defines), the same member draw on the shell's
        mass (the table's, which the guard then finds equal to the explored one), and the
        same pick, after the same guard on the explored balls.
        """
        radius = self.radius
        label = self.graph.label(node)
        block, member_block = context.first_blocks_of(subject_id, label, (SHELL, MEMBER))
        self._forget_group_rows()
        for stat, bracket in self._brackets_for(node, with_floor=False):
            (shell,), undecided = decide_all(
                bracket.cumulative, [block], bracket.z_low, bracket.z_high, radius
            )
            if not undecided:
                decided_by = stat  # counted once drawn: a record handed back is counted there
                break
        else:
            return -1
        masses, table_row = self._table_masses, self._profile_row
        # Decided by a kept bracket, before the table was read, or the tail (past the table's
        # masses, drawn from the whole ball): ``_draw_alone`` draws it.
        if masses is None or table_row is None or shell >= len(masses):
            return -1
        draw = _member_value(context, subject_id, label, masses[shell], member_block)
        # The guard checks the rows the decision read, as ``_check_explored`` does.
        far_row = _NONE if self._far_row is None else self._far_row
        search = self.search
        out, disagreement = search.draw_one(node, shell, draw, table_row, _NONE, far_row)
        _refuse_disagreement(disagreement, self)
        stats = self.stats
        stats[decided_by] += 1
        stats["groups"] += 1
        stats["records"] += 1
        stats["shells_explored"] += search.n_shells
        stats["locations_explored"] += search.locations_explored
        return out

    def sample_groups(
        self,
        context: StreamContext,
        groups: Sequence[tuple[int, Sequence[str]]],
        decide_together: bool = False,
    ) -> list[list[int]]:
        """``sample_group`` of each ``(node, subject_ids)``, the same outputs; the groups whose
        shells the bounds settle within the profile table's depth are drawn together, up to
        64 at a time, by one shared sweep (engine/shared_shells.py), and with
        ``decide_together`` the records the bounds leave undecided are decided together too
        (``_decide_swept``).  Either pays only when the postcodes are neighbours: consecutive
        groups of a dense batch, in node order or along the map (engine/batch.py says how
        dense)."""
        outputs: list[list[int]] = [[] for _ in groups]
        waiting: list[tuple[int, _Decided]] = []  # decided, to draw in a shared sweep
        undecided: list[tuple[int, _Decided]] = []  # to decide in a shared sweep
        depth = self._deciding_depth() if decide_together else None
        for i, (node, subject_ids) in enumerate(groups):
            decided = self._decide(context, node, subject_ids, defer=depth is not None)
            if decided.pending:
                undecided.append((i, decided))
                if len(undecided) == WORD:
                    waiting = self._decide_swept(undecided, depth, waiting, outputs)
                    undecided = []
            elif self._can_share(decided):
                waiting.append((i, decided))
            else:
                outputs[i] = self._draw_alone(decided)
            if len(waiting) >= WORD:
                self._draw_shared(waiting[:WORD], outputs)
                waiting = waiting[WORD:]
        if undecided:
            waiting = self._decide_swept(undecided, depth, waiting, outputs)
        while waiting:
            self._draw_shared(waiting[:WORD], outputs)
            waiting = waiting[WORD:]
        return outputs

    def _deciding_depth(self) -> int | None:
        """How deep a shared sweep explores the records the table, the rows and the floor
        leave undecided (``_decide_swept``), or None to explore for them one group at a time:
        ``DECIDING_HOPS`` past the table, where that is within ``DECIDING_RADIUS`` and short
        of R - 1.

        Never fewer than ``FLOOR_HOPS`` past the table: the sweep's guard then sees every ball
        the floor's exploration saw and every depth the floor reaches (its own hops plus the
        table's), so no far-mass row or floor value a decision used beyond them goes unchecked
        where exploring for one group would have checked it (a review found a row too light
        past a shallower sweep changing an output)."""
        if self.profiles is None or self.radius > DECIDING_RADIUS:
            return None
        depth = self.profiles.depth + max(DECIDING_HOPS, FLOOR_HOPS)
        return depth if depth < self.radius - 1 else None

    def _decide_swept(
        self,
        undecided: list[tuple[int, _Decided]],
        depth: int | None,
        waiting: list[tuple[int, _Decided]],
        outputs: list[list[int]],
    ) -> list[tuple[int, _Decided]]:
        """Decide the pending records of up to 64 groups from one shared sweep of their
        sources to ``depth`` hops: with shells 0 .. depth exact, the core's bounds, the
        upper rows' (``_rows_z_high``) and the floor's settle most of them.  Groups now
        decided join ``waiting`` (returned); the rest are decided and drawn alone, exploring
        as ``sample_group`` does.  The sweep's balls are guarded like any explored ones
        before a decision uses them."""
        assert depth is not None
        count = len(undecided)
        empty = np.zeros(0, dtype=np.int64)
        _, masses, _ = self._sweeps().pick(
            np.array([d.group.node for _, d in undecided], dtype=np.int64),
            np.full(count, depth + 1, dtype=np.int64),
            np.zeros(count + 1, dtype=np.int64),
            empty,
            empty,
        )
        radius, powers = self.radius, self.powers
        for b, (i, decided) in enumerate(undecided):
            group, shells = decided.group, list(decided.shells)
            row = masses[b]
            _guard(row, depth + 1, decided.table_row, decided.floor, decided.far_row, self)
            shell_masses = row.tolist()
            cumulative = list(accumulate(map(mul, powers, shell_masses)))
            explored = sum(shell_masses)
            z_low, z_high = self._bounds(cumulative, explored, None, decided.floor)
            tighter = self._rows_z_high(group.node, cumulative, explored)
            if tighter is not None and tighter < z_high:
                z_high = tighter
            pending = decided.pending
            settled, still = decide_all(
                cumulative,
                [group.shell_blocks[r] for r in pending],
                z_low,
                z_high,
                radius,
            )
            for r, shell in zip(pending, settled):
                shells[r] = shell
            self.stats["swept_to_decide"] += 1
            if still:  # as sample_group: explore for them, then draw alone
                self.search.start(group.node)
                self._floor, self._far_row = decided.floor, decided.far_row
                # (``decide_all`` left their shells ``UNDECIDED``)
                self._decide_by_exploring(group, shells, [pending[k] for k in still])
                outputs[i] = self._draw_alone(decided._replace(shells=shells, pending=[]))
                continue
            self.stats["decided_by_sweep"] += 1
            now = decided._replace(shells=shells, pending=[], table_masses=shell_masses)
            if self._can_share(now):
                waiting.append((i, now))
            else:
                outputs[i] = self._draw_alone(now)
        return waiting

    def _decide(
        self, context: StreamContext, node: int, subject_ids: Sequence[str], defer: bool = False
    ) -> _Decided:
        """Every record's shell (steps 1 and 2 of the module docstring), with what the drawing
        needs: the member sub-streams' first blocks and the rows the guard checks against.
        With ``defer``, records the bounds of step 2b leave undecided stay so (``pending``),
        for a shared sweep to decide (``_decide_swept``)."""
        label = self.graph.label(node)
        # The first block of the shell and member sub-streams of every record: all that most
        # records ever read (LazyUniform's first block; uniform_int's first attempt).
        shell_blocks, member_blocks = context.first_blocks(subject_ids, label, (SHELL, MEMBER))
        self.search.start(node)
        group = _Group(context, node, subject_ids, label, shell_blocks)
        self._forget_group_rows()
        shells, pending = self._decide_shells(group, defer)
        return _Decided(
            group,
            shells,
            member_blocks,
            self._profile_row,
            self._floor,
            self._far_row,
            self._table_masses,
            pending,
        )

    def _draw_alone(self, decided: _Decided) -> list[int]:
        """Steps 3 and 4 of the module docstring for one group, on the search ``_decide``
        started at its node."""
        group, shells, member_blocks = decided.group, decided.shells, decided.member_blocks
        self._profile_row, self._floor, self._far_row = (
            decided.table_row,
            decided.floor,
            decided.far_row,
        )
        search = self.search
        if search.source != group.node:  # decided by a shared sweep: explore from the start
            search.start(group.node)
        radius, total = self.radius, self.total_prior
        # The within-shell draws need every chosen shell explored.
        search.explore_to(min(max(shells), radius - 1) + 1)
        self._check_explored()

        out = [0] * len(shells)
        inner = [r for r, h in enumerate(shells) if h < radius]
        if len(shells) == 1 and inner:  # one record (distinct postcodes): no arrays needed
            n = int(search.masses[shells[0]])
            out[0] = search.pick_one(shells[0], self._member_draw(group, 0, n, member_blocks[0]))
        elif inner:
            masses = search.masses
            picked_shells = np.array([shells[r] for r in inner], dtype=np.int64)
            draws = np.empty(len(inner), dtype=np.int64)
            for t, r in enumerate(inner):
                draws[t] = self._member_draw(group, r, int(masses[shells[r]]), member_blocks[r])
            for r, y in zip(inner, search.pick(picked_shells, draws).tolist()):
                out[r] = y
        if len(inner) < len(shells):
            search.explore_to(radius)
            ball = search.ball()
            prior_cumsum = self.graph.prior_cumsum
            for r, h in enumerate(shells):
                if h == radius:
                    out[r] = pick_in_tail(group.stream(r), ball, prior_cumsum, total)
                    self.stats["tail"] += 1

        stats = self.stats
        stats["groups"] += 1
        stats["records"] += len(shells)
        stats["shells_explored"] += search.n_shells
        stats["locations_explored"] += search.locations_explored
        return out

    def _sweeps(self) -> SharedShells:
        """The shared sweeps' buffers (made on first use: only dense batches need them)."""
        if self._shared is None:
            # read the graph as the search does (along the map, where it does)
            self._shared = SharedShells(self.graph, self.search.loc_mass, self.search.layout)
        return self._shared

    def _can_share(self, decided: _Decided) -> bool:
        """Whether a shared sweep can draw this group: every shell decided within the table's
        depth (so the member draws can use the table's shell masses, which the guard then
        checks against the sweep's), and deeper than the search has already explored (else
        drawing alone costs nothing more)."""
        deepest = max(decided.shells)
        search = self.search
        explored = search.n_shells if search.source == decided.group.node else 0
        return (
            decided.table_masses is not None
            and deepest < len(decided.table_masses)
            and deepest < self.radius
            and deepest >= explored
        )

    def _draw_shared(self, waiting: list[tuple[int, _Decided]], outputs: list[list[int]]) -> None:
        """Steps 3 and 4 of the module docstring for up to 64 groups in one shared sweep
        (``SharedShells.pick``), into ``outputs``; every group is guarded as ``_draw_alone``
        guards it, on the masses the sweep found, before any output is kept."""
        sources, n_shells, req_ptr, req_shell, req_draw, req_record = [], [], [0], [], [], []
        for _, decided in waiting:
            group, shells, known = decided.group, decided.shells, decided.table_masses
            assert known is not None  # _can_share
            requests = sorted(
                (h, self._member_draw(group, r, known[h], decided.member_blocks[r]), r)
                for r, h in enumerate(shells)
            )
            sources.append(group.node)
            n_shells.append(max(shells) + 1)
            req_shell += [h for h, _, _ in requests]
            req_draw += [d for _, d, _ in requests]
            req_record += [r for _, _, r in requests]
            req_ptr.append(len(req_shell))
        found, swept, bad = self._sweeps().pick(
            np.array(sources, dtype=np.int64),
            np.array(n_shells, dtype=np.int64),
            np.array(req_ptr, dtype=np.int64),
            np.array(req_shell, dtype=np.int64),
            np.array(req_draw, dtype=np.int64),
        )
        for b, (_, decided) in enumerate(waiting):
            _guard(swept[b], n_shells[b], decided.table_row, decided.floor, decided.far_row, self)
        if bad >= 0:  # the guard found nothing, yet a draw fell outside its shell
            raise RuntimeError("the shared sweep disagrees with the profile table")
        picked = found.tolist()
        stats = self.stats
        for b, (i, decided) in enumerate(waiting):
            out = [0] * len(decided.shells)
            for k in range(req_ptr[b], req_ptr[b + 1]):
                out[req_record[k]] = picked[k]
            outputs[i] = out
            stats["records"] += len(out)
        stats["groups"] += len(waiting)
        stats["shared_groups"] += len(waiting)
        stats["shells_explored"] += sum(n_shells)
