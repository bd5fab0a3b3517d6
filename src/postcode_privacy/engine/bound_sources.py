"""Where the bounds on Z come from for the group being sampled, cheapest first.

For a true node x, ``BoundSources.brackets_for`` yields valid brackets z_low <= Z <= z_high
with C_0 .. C_h, in this order (stage by stage in docs/performance.md, "Deciding the shell,
stage by stage"):

1. a bracket kept for x by an earlier batch of the release (``Bracket``): it depends only on
   the graph, the radius and the powers, so it stays valid;
2. the ball-mass profile table (engine/profiles.py): C_0 .. C_D without exploring, with the
   core's bound beyond D;
3. the same, with the smallest upper bound from the upper rows (the far-mass row of x's
   cluster, engine/cluster_balls.py, and the landmark rows, engine/landmarks.py, where built);
4. the same, with the floor under the far mass that the table rows of the locations within
   ``FLOOR_HOPS`` give (``bounds.z_low_by_floor``).

Every bound here only ever narrows a valid bracket, so it changes how far the search explores,
never an output.  Each table, row or floor a decision used is also kept as the group's
(``table_row``, ``far_row``, ``floor``), so that ``check_explored`` can stop the release when
the balls explored for the draw disagree with them: a cheap guard against caches that
disagree with the graph.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import accumulate
from operator import mul
from typing import NamedTuple

import numpy as np

from ..mechanism.mechanism import Mechanism
from .bounds import row_tail, z_high_by_row, z_high_by_tail, z_low_by_floor
from .landmarks import LandmarkBounds
from .profiles import BallProfiles
from .search import ShellSearch, ball_disagreement

__all__ = [
    "FLOOR_HOPS",
    "BoundSources",
    "Bracket",
    "Brackets",
    "guard",
    "refuse_disagreement",
    "wants_bracket",
]

BRACKET_SOURCES = 16_384  # at most this many sources kept (a few kilobytes each)
NO_ROW = np.zeros(0, dtype=np.int64)  # a row not given to ``ball_disagreement`` (checks none)
# Location shells whose table rows give the floor under the far mass (``ball_floor``): at
# eps = 0.5, 12 hops (about 1,400 locations) settle about 40% of the records the rows leave
# undecided; 4 and 8 hops settle fewer, 16 barely more (docs/performance.md, "Deciding the
# shell, stage by stage").
FLOOR_HOPS = 12


class Bracket(NamedTuple):
    """Valid bounds on one source's Z at depth h, kept across batches (``brackets_for``)."""

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


def guard(
    masses: np.ndarray,
    n_shells: int,
    table_row: np.ndarray | None,
    floor: np.ndarray | None,
    far_row: np.ndarray | None,
    graph_sha256: str,
) -> None:
    """Stop if the explored balls disagree with the table row, the floor or the far-mass row
    a group was decided with (``BoundSources.check_explored`` says why)."""
    if table_row is None and floor is None and far_row is None:
        return
    found = ball_disagreement(
        masses,
        n_shells,
        NO_ROW if table_row is None else table_row,
        NO_ROW if floor is None else floor,
        NO_ROW if far_row is None else far_row,
    )
    refuse_disagreement(found, graph_sha256)


def refuse_disagreement(found: int, graph_sha256: str) -> None:
    """Stop with the error for what ``ball_disagreement`` found (nothing for 0)."""
    if found == 1:
        raise RuntimeError(
            "the ball-mass profiles disagree with the graph; delete the cached profiles"
        )
    if found == 2:
        raise RuntimeError(
            "the far-mass rows disagree with the graph; delete the cached "
            f"clusters-{graph_sha256[:32]}-* files in the cache directory"
        )


class BoundSources:
    """The bounds on Z of one mechanism's groups, and the rows the group being sampled was
    decided with.  One per ``FastSampler``; reads (and, for the floor, moves) its search.

    ``landmarks``, ``profiles`` (with its far-mass rows) and ``brackets`` may each be None;
    ``floor=False`` goes without the floor, to measure what it buys (docs/performance.md).
    """

    def __init__(
        self,
        mechanism: Mechanism,
        search: ShellSearch,
        landmarks: LandmarkBounds | None,
        profiles: BallProfiles | None,
        brackets: Brackets | None,
        floor: bool,
    ):
        graph = mechanism.graph
        self.graph = graph
        self.radius, self.powers, self.total_prior = (
            mechanism.radius,
            mechanism.powers,
            graph.total_prior,
        )
        self.search = search
        self.landmarks = landmarks
        if profiles is not None and profiles.graph_sha256 != graph.sha256:
            raise ValueError("the ball-mass profiles belong to another graph")
        self.profiles = profiles
        # Far-mass rows come with the profile table when it has them (engine/cluster_balls.py).
        self.far = profiles.far if profiles is not None else None
        if self.far is not None and self.far.graph_sha256 != graph.sha256:
            raise ValueError("the far-mass rows belong to another graph")
        # Brackets on Z by source, shared by the caller across batches of one release.
        self.brackets = brackets
        # The table whose rows give the floor (``ball_floor``), None without one.
        self._table = np.asarray(profiles.cumulative) if profiles is not None and floor else None
        # row_tail of each far-mass row by (cluster, start), None for an unusable row
        self._far_tails: dict[tuple[int, int], int | None] = {}
        self.forget_group_rows()

    def forget_group_rows(self) -> None:
        """A new group: none of the rows the guard checks, nor the table's masses, is read yet."""
        self.table_row: np.ndarray | None = None  # the group's table row, if one was read
        self.far_row: np.ndarray | None = None  # the group's far-mass row, if one was read
        self.floor: np.ndarray | None = None  # the group's floor, if one was made
        self.table_masses: list[int] | None = None  # the group's shell masses from the table

    def adopt_group_rows(
        self, table_row: np.ndarray | None, floor: np.ndarray | None, far_row: np.ndarray | None
    ) -> None:
        """The rows a group was decided with earlier, before it is drawn: the guard checks them."""
        self.table_row, self.floor, self.far_row = table_row, floor, far_row

    def z_bounds(
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

    def profile_shells(self, node: int) -> tuple[list[int], list[int]]:
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

    def upper_rows(self, node: int) -> np.ndarray | None:
        """Rows Q with Q[j] >= pi(B_j(x)) for the true node x, j < R, non-decreasing: the
        landmark rows (engine/landmarks.py) and the far-mass row of x's cluster
        (engine/cluster_balls.py), whichever are in use; None if neither is.  The far-mass
        row is also kept for this group, for ``check_explored``."""
        location = int(self.graph.node_location[node])
        rows = []
        if self.landmarks is not None:
            rows.append(self.landmarks.bounds_for(location, self.radius))
        if self.far is not None:
            self.far_row = self.far.upper_row(location, self.radius)
            rows.append(self.far_row[np.newaxis, :])
        return np.concatenate(rows) if rows else None

    def rows_z_high(self, node: int, cumulative: list[int], explored: int) -> int | None:
        """The smallest upper bound on Z from the rows of ``upper_rows`` once shells 0 .. h
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
            bounds.append(self.far_z_high(location, cumulative, explored))
        usable = [z for z in bounds if z is not None]
        return min(usable) if usable else None

    def far_z_high(self, location: int, cumulative: list[int], explored: int) -> int | None:
        """``z_high_by_row`` from the far-mass row of the location's cluster (kept for this
        group, for ``check_explored``).  The row's own part of the bound (``row_tail``) is the
        same for every source of the cluster at the same depth, so it is kept by cluster: a
        few megabytes at most for all the clusters, one Python sum of about R terms saved a
        source."""
        far, radius, total = self.far, self.radius, self.total_prior
        assert far is not None
        cluster, start = int(far.cluster_of[location]), len(cumulative) + 1
        self.far_row = far.balls[cluster]  # Q[j] to the rows' depth (the total prior past it)
        if (cluster, start) in self._far_tails:
            tail = self._far_tails[cluster, start]
        else:
            row = far.upper_row(location, radius)
            tail = self._far_tails[cluster, start] = row_tail(
                row, start, self.powers, radius, total
            )
        first = int(self.far_row[start - 1]) if start - 1 <= far.depth else total  # Q[h+1]
        return z_high_by_tail(cumulative, explored, first, tail, self.powers)

    def ball_floor(self) -> np.ndarray | None:
        """The floor under the source's balls (``ShellSearch.ball_floor``) from the table rows
        of the locations within ``FLOOR_HOPS`` (explored for it), kept for this group; None
        without a table or with ``floor=False``.  Precondition: the search has started at the
        group's node."""
        if self._table is None:
            return None
        search = self.search
        search.explore_to(FLOOR_HOPS + 1)
        self.floor = search.ball_floor(self._table, search.n_shells - 1, self.radius)
        return self.floor

    def brackets_for(self, node: int, with_floor: bool = True) -> Iterator[tuple[str, Bracket]]:
        """Bounds on this source's Z, cheapest first, each named by the statistic that counts
        the records it settles: a bracket kept by an earlier batch, then the profile table's
        C_0 .. C_D with the core's bound beyond D, then the same with the upper rows' bound
        (dearer to compute, so only for what is left), then, ``with_floor``, that with the
        floor's lower bound (which explores ``FLOOR_HOPS`` shells: the search must have
        started at ``node``; none of the others touches the search)."""
        if self.brackets is not None:
            kept = self.brackets.get(node)
            if kept is not None:
                yield "bracket_hits", kept
        if self.profiles is None:
            return
        masses, cumulative = self.profile_shells(node)
        self.table_masses = masses
        self.table_row = self.profiles.ball_row(int(self.graph.node_location[node]))
        explored = sum(masses)
        z_low, z_high = self.z_bounds(cumulative, explored, None)
        yield "profile_hits", Bracket(cumulative, z_low, z_high)
        tighter = self.rows_z_high(node, cumulative, explored)
        if tighter is not None and tighter < z_high:
            z_high = tighter
            yield "row_hits", Bracket(cumulative, z_low, z_high)
        if not with_floor or len(cumulative) >= self.radius:  # (then Z is exact)
            return
        floor = self.ball_floor()
        if floor is not None:
            powers, radius, total = self.powers, self.radius, self.total_prior
            raised = z_low_by_floor(cumulative, explored, floor, powers, radius, total)
            if raised > z_low:
                yield "floor_hits", Bracket(cumulative, raised, z_high)

    def check_explored(self) -> None:
        """The shells the search explored must have the masses the profile table gave, balls
        no heavier than the far-mass row allowed and none lighter than the floor promised: a
        cheap guard against tables that disagree with the graph (they would change outputs;
        the floor reads the table rows of the source's neighbours, which the first check
        does not see)."""
        search = self.search
        guard(
            search.masses,
            search.n_shells,
            self.table_row,
            self.floor,
            self.far_row,
            self.graph.sha256,
        )
