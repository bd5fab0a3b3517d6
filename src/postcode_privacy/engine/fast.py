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
      (``z_low_by_floor``); engine/bound_sources.py makes these brackets;
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

Many neighbouring groups (a dense batch) can instead be decided and drawn up to 64 at a time
by shared sweeps (``sample_groups``, engine/shared_draws.py).

Nothing is kept between groups except the fixed-size buffers of the search and the brackets.

Why every output equals the core's: docs/performance.md, "Why the outputs are identical" and
"Deciding the shell, stage by stage".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from ..mechanism.mechanism import Mechanism
from ..mechanism.sampler import MEMBER, SHELL, choose_shell, pick_in_tail
from ..mechanism.stream import BLOCK_BITS, LazyUniform, StreamContext
from .alone import AloneDecider, table_readable
from .bound_sources import (
    NO_ROW,
    BoundSources,
    Bracket,
    Brackets,
    refuse_disagreement,
    wants_bracket,
)
from .bounds import UNDECIDED, decide_all
from .group import Decided, Group, member_value
from .landmarks import GraphTables, graph_tables
from .profiles import BallProfiles
from .search import ShellSearch
from .shared_draws import SharedDraws

__all__ = ["FastSampler"]

_TOP_BITS = 64  # bits of U handed to the float estimate
BRACKET_MIN_RECORDS = 16  # a source this frequent in one batch is kept for later batches
# Records alone at their postcode are decided and drawn together (``sample_each``) from this
# many in a run; below it, one by one costs no more than the arrays.
ALONE_MIN = 8
# Above this size of P_0 the limb arithmetic of engine/alone.py is not used (its cost grows
# with the square of the digits; the national graph's powers have about 120 bits).
ALONE_MAX_POWER_BITS = 1024


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


class FastSampler:
    """Fast exact sampling for one mechanism; holds one shell search's buffers (not thread-safe).

    ``tables`` (per-graph arrays, see ``engine/landmarks.py``) may be passed in so that worker
    processes share one copy; ``landmarks`` chooses whether the landmark bound is used (it is
    built on first use, once per graph); ``profiles`` is the table of engine/profiles.py, or
    None to explore from shell 0 every time; ``floor`` whether its rows also give the floor
    under the far mass (``BoundSources.ball_floor``); ``along_map`` whether the search reads
    the graph numbered along the map (engine/layout.py, built once per graph).  None of these
    changes an output.
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
        layout = tables.search_layout(along_map)
        self.search = ShellSearch(graph, self.radius, tables.loc_mass, layout)
        # The bounds on Z, and the rows the group being sampled was decided with.
        self.sources = BoundSources(
            mechanism,
            self.search,
            tables.ensure_landmarks() if landmarks else None,
            profiles,
            brackets,
            floor,
        )
        self.landmarks, self.profiles, self.far = (
            self.sources.landmarks,
            self.sources.profiles,
            self.sources.far,
        )
        # Brackets on Z by source, shared by the caller across batches of one release (see
        # BoundSources.brackets_for); kept_brackets lists those added here, for worker
        # processes to hand back.
        self.brackets = brackets
        self.kept_brackets: list[tuple[int, Bracket]] = []
        self.shared = SharedDraws(self)  # dense batches (``sample_groups``)
        self._alone: AloneDecider | None = None  # records alone (``sample_each``), made on use
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
        return self.draw_alone(self.decide(context, node, subject_ids))

    def sample_groups(
        self,
        context: StreamContext,
        groups: Sequence[tuple[int, Sequence[str]]],
        decide_together: bool = False,
    ) -> list[list[int]]:
        """``sample_group`` of each ``(node, subject_ids)``, the same outputs; the groups whose
        shells the bounds settle within the profile table's depth are drawn together, up to
        64 at a time, by one shared sweep (engine/shared_draws.py), and with
        ``decide_together`` the records the bounds leave undecided are decided together too.
        Either pays only when the postcodes are neighbours: consecutive groups of a dense
        batch, in node order or along the map (engine/batch.py says how dense)."""
        return self.shared.sample_groups(context, groups, decide_together)

    def decide(
        self, context: StreamContext, node: int, subject_ids: Sequence[str], defer: bool = False
    ) -> Decided:
        """Every record's shell (steps 1 and 2 of the module docstring), with what the drawing
        needs: the member sub-streams' first blocks and the rows the guard checks against.
        With ``defer``, records the bounds of step 2b leave undecided stay so (``pending``),
        for a shared sweep to decide (engine/shared_draws.py)."""
        label = self.graph.label(node)
        # The first block of the shell and member sub-streams of every record: all that most
        # records ever read (LazyUniform's first block; uniform_int's first attempt).
        shell_blocks, member_blocks = context.first_blocks(subject_ids, label, (SHELL, MEMBER))
        self.search.start(node)
        group = Group(context, node, subject_ids, label, shell_blocks)
        sources = self.sources
        sources.forget_group_rows()
        shells, pending = self._decide_shells(group, defer)
        return Decided(
            group,
            shells,
            member_blocks,
            sources.table_row,
            sources.floor,
            sources.far_row,
            sources.table_masses,
            pending,
        )

    def _decide_shells(self, group: Group, defer: bool = False) -> tuple[list[int], list[int]]:
        """Every record's shell: from the brackets of ``BoundSources.brackets_for`` while they
        settle records, then by exploring for those still undecided (``decide_by_exploring``);
        with ``defer``, those are left undecided instead.  Returns the shells (``UNDECIDED``
        for a record left so) and the records left undecided."""
        blocks = group.shell_blocks
        shells = [UNDECIDED] * len(blocks)
        pending = list(range(len(blocks)))
        for stat, bracket in self.sources.brackets_for(group.node):
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
        self.decide_by_exploring(group, shells, pending)
        return shells, []

    def decide_by_exploring(self, group: Group, shells: list[int], pending: list[int]) -> None:
        """The shells of records ``pending`` (into ``shells``) by exploring as far as a float
        estimate says, then deciding exactly; records the bounds do not settle go to the core's
        ``choose_shell``, which explores on one shell at a time."""
        search, node, sources = self.search, group.node, self.sources
        radius, powers, total = self.radius, self.powers, self.total_prior
        rows = sources.upper_rows(node)
        shift = BLOCK_BITS - _TOP_BITS
        mine = [group.shell_blocks[r] for r in pending]
        estimate = np.array([u >> shift for u in mine], dtype=np.uint64) * 2.0**-_TOP_BITS
        floor = sources.floor
        best = search.explore_guided(estimate, self.power_ratios, radius, total, rows, floor)
        walk = _CompiledWalk(search, powers)
        # explore_guided names a row (best >= 0) only when it was given rows
        bound = rows[best] if rows is not None and best >= 0 else None
        z_low, z_high = sources.z_bounds(walk.cumulative, walk.explored_mass, bound, floor)
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
                z_low, z_high = sources.z_bounds(walk.cumulative, walk.explored_mass, bound, floor)
                entry = Bracket(list(walk.cumulative), z_low, z_high)
                brackets[node] = entry
                self.kept_brackets.append((node, entry))

    def draw_alone(self, decided: Decided) -> list[int]:
        """Steps 3 and 4 of the module docstring for one group, on the search ``decide``
        started at its node."""
        group, shells, member_blocks = decided.group, decided.shells, decided.member_blocks
        self.sources.adopt_group_rows(decided.table_row, decided.floor, decided.far_row)
        search = self.search
        if search.source != group.node:  # decided by a shared sweep: explore from the start
            search.start(group.node)
        radius, total = self.radius, self.total_prior
        # The within-shell draws need every chosen shell explored.
        search.explore_to(min(max(shells), radius - 1) + 1)
        self.sources.check_explored()

        out = [0] * len(shells)
        inner = [r for r, h in enumerate(shells) if h < radius]
        if len(shells) == 1 and inner:  # one record (distinct postcodes): no arrays needed
            n = int(search.masses[shells[0]])
            out[0] = search.pick_one(shells[0], group.member_draw(0, n, member_blocks[0]))
        elif inner:
            masses = search.masses
            picked_shells = np.array([shells[r] for r in inner], dtype=np.int64)
            draws = np.empty(len(inner), dtype=np.int64)
            for t, r in enumerate(inner):
                draws[t] = group.member_draw(r, int(masses[shells[r]]), member_blocks[r])
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
        refuse_disagreement(status, self.graph.sha256)
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
        quarter, read their next blocks here, as ``member_value`` does), the guarded pick."""
        node_array = np.array(nodes, dtype=np.int64)
        labels = self.graph.labels_of(node_array)
        shell_blocks, member_blocks = context.first_block_bytes(
            subject_ids, labels, (SHELL, MEMBER)
        )
        shells, stages, sizes, draws = decider.decide(node_array, shell_blocks, member_blocks)
        for r in np.flatnonzero((shells >= 0) & (draws < 0)).tolist():
            first = int.from_bytes(member_blocks[32 * r : 32 * r + 32], "big")
            draws[r] = member_value(context, subject_ids[r], labels[r], int(sizes[r]), first)
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
        core's bound past the table or an upper row's (the brackets of ``BoundSources.brackets_for``
        short of the floor) and the shell is not the tail: the record's output node, drawn and
        guarded by one compiled call (``ShellSearch.draw_one``).  Otherwise -1, before that
        call (the search is as it was; the far-mass row kept for the group may not be), for
        ``decide`` and ``draw_alone`` to draw it from the start.

        The same output as theirs: the same exact decision (any valid bounds that settle it
        give the one shell ``decide_below`` defines), the same member draw on the shell's
        mass (the table's, which the guard then finds equal to the explored one), and the
        same pick, after the same guard on the explored balls.
        """
        radius = self.radius
        label = self.graph.label(node)
        block, member_block = context.first_blocks_of(subject_id, label, (SHELL, MEMBER))
        sources = self.sources
        sources.forget_group_rows()
        for stat, bracket in sources.brackets_for(node, with_floor=False):
            (shell,), undecided = decide_all(
                bracket.cumulative, [block], bracket.z_low, bracket.z_high, radius
            )
            if not undecided:
                decided_by = stat  # counted once drawn: a record handed back is counted there
                break
        else:
            return -1
        masses, table_row = sources.table_masses, sources.table_row
        # Decided by a kept bracket, before the table was read, or the tail (past the table's
        # masses, drawn from the whole ball): ``draw_alone`` draws it.
        if masses is None or table_row is None or shell >= len(masses):
            return -1
        draw = member_value(context, subject_id, label, masses[shell], member_block)
        # The guard checks the rows the decision read, as ``BoundSources.check_explored`` does.
        far_row = NO_ROW if sources.far_row is None else sources.far_row
        search = self.search
        out, disagreement = search.draw_one(node, shell, draw, table_row, NO_ROW, far_row)
        refuse_disagreement(disagreement, self.graph.sha256)
        stats = self.stats
        stats[decided_by] += 1
        stats["groups"] += 1
        stats["records"] += 1
        stats["shells_explored"] += search.n_shells
        stats["locations_explored"] += search.locations_explored
        return out
