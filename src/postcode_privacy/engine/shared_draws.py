"""Groups of neighbouring postcodes decided and drawn up to 64 at a time by shared sweeps.

``FastSampler.sample_groups`` comes here for a dense batch (engine/batch.py says how dense):
each group is decided as ``sample_group`` decides it, and then

- a group whose shells the bounds settle within the profile table's depth waits, with up to 63
  others, for one shared sweep (engine/shared_shells.py) that explores all their sources at
  once and picks every member draw;
- with ``decide_together``, the records the bounds leave undecided wait too, for a shared sweep
  to ``deciding_depth`` hops that makes their shells 0 .. depth exact (``_decide_swept``).

The outputs are ``sample_group``'s: the same exact decisions (any valid bounds that settle a
record give the one shell the specification defines), the same member draws on the same shell
masses, the same pick rule, and every sweep's balls guarded against the rows the decisions used
before any output is kept (docs/performance.md, "Shared sweeps").
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate
from operator import mul
from typing import TYPE_CHECKING

import numpy as np

from ..mechanism.stream import StreamContext
from . import bound_sources
from .bound_sources import guard
from .bounds import decide_all
from .group import Decided
from .shared_shells import WORD, SharedShells

if TYPE_CHECKING:
    from .fast import FastSampler

__all__ = ["DECIDING_HOPS", "DECIDING_RADIUS", "SharedDraws"]

# A shared sweep decides the records the bounds leave undecided, in ``sample_groups``, by
# exploring their sources this many hops past the profile table (never fewer than FLOOR_HOPS:
# see ``deciding_depth``), where the radius is at most DECIDING_RADIUS and that depth is
# short of R - 1 (on the national graph 58 <= R <= 120, eps from about 0.47 to 0.98): at
# smaller eps too few are settled there for the sweep to pay (docs/performance.md, "Shared
# sweeps").
DECIDING_HOPS = 12
DECIDING_RADIUS = 120


class SharedDraws:
    """``FastSampler.sample_groups`` for one sampler, with the shared sweeps' buffers (made on
    first use: only dense batches need them)."""

    def __init__(self, sampler: FastSampler):
        self.sampler = sampler
        self._sweeps: SharedShells | None = None

    def sweeps(self) -> SharedShells:
        """The shared sweeps' buffers, reading the graph as the sampler's search does (along
        the map, where it does)."""
        if self._sweeps is None:
            search = self.sampler.search
            self._sweeps = SharedShells(self.sampler.graph, search.loc_mass, search.layout)
        return self._sweeps

    def sample_groups(
        self,
        context: StreamContext,
        groups: Sequence[tuple[int, Sequence[str]]],
        decide_together: bool,
    ) -> list[list[int]]:
        """``FastSampler.sample_groups``: the same outputs as ``sample_group`` of each group."""
        sampler = self.sampler
        outputs: list[list[int]] = [[] for _ in groups]
        waiting: list[tuple[int, Decided]] = []  # decided, to draw in a shared sweep
        undecided: list[tuple[int, Decided]] = []  # to decide in a shared sweep
        depth = self.deciding_depth() if decide_together else None
        for i, (node, subject_ids) in enumerate(groups):
            decided = sampler.decide(context, node, subject_ids, defer=depth is not None)
            if decided.pending:
                undecided.append((i, decided))
                if len(undecided) == WORD:
                    waiting = self._decide_swept(undecided, depth, waiting, outputs)
                    undecided = []
            elif self.can_share(decided):
                waiting.append((i, decided))
            else:
                outputs[i] = sampler.draw_alone(decided)
            if len(waiting) >= WORD:
                self._draw_shared(waiting[:WORD], outputs)
                waiting = waiting[WORD:]
        if undecided:
            waiting = self._decide_swept(undecided, depth, waiting, outputs)
        while waiting:
            self._draw_shared(waiting[:WORD], outputs)
            waiting = waiting[WORD:]
        return outputs

    def deciding_depth(self) -> int | None:
        """How deep a shared sweep explores the records the table, the rows and the floor
        leave undecided (``_decide_swept``), or None to explore for them one group at a time:
        ``DECIDING_HOPS`` past the table, where that is within ``DECIDING_RADIUS`` and short
        of R - 1.

        Never fewer than ``FLOOR_HOPS`` past the table: the sweep's guard then sees every ball
        the floor's exploration saw and every depth the floor reaches (its own hops plus the
        table's), so no far-mass row or floor value a decision used beyond them goes unchecked
        where exploring for one group would have checked it (a review found a row too light
        past a shallower sweep changing an output)."""
        sampler = self.sampler
        if sampler.profiles is None or sampler.radius > DECIDING_RADIUS:
            return None
        depth = sampler.profiles.depth + max(DECIDING_HOPS, bound_sources.FLOOR_HOPS)
        return depth if depth < sampler.radius - 1 else None

    def _decide_swept(
        self,
        undecided: list[tuple[int, Decided]],
        depth: int | None,
        waiting: list[tuple[int, Decided]],
        outputs: list[list[int]],
    ) -> list[tuple[int, Decided]]:
        """Decide the pending records of up to 64 groups from one shared sweep of their
        sources to ``depth`` hops: with shells 0 .. depth exact, the core's bounds, the
        upper rows' (``BoundSources.rows_z_high``) and the floor's settle most of them.
        Groups now decided join ``waiting`` (returned); the rest are decided and drawn alone,
        exploring as ``sample_group`` does.  The sweep's balls are guarded like any explored
        ones before a decision uses them."""
        assert depth is not None
        sampler = self.sampler
        sources, sha256 = sampler.sources, sampler.graph.sha256
        count = len(undecided)
        empty = np.zeros(0, dtype=np.int64)
        _, masses, _ = self.sweeps().pick(
            np.array([d.group.node for _, d in undecided], dtype=np.int64),
            np.full(count, depth + 1, dtype=np.int64),
            np.zeros(count + 1, dtype=np.int64),
            empty,
            empty,
        )
        radius, powers, stats = sampler.radius, sampler.powers, sampler.stats
        for b, (i, decided) in enumerate(undecided):
            group, shells = decided.group, list(decided.shells)
            row = masses[b]
            guard(row, depth + 1, decided.table_row, decided.floor, decided.far_row, sha256)
            shell_masses = row.tolist()
            cumulative = list(accumulate(map(mul, powers, shell_masses)))
            explored = sum(shell_masses)
            z_low, z_high = sources.z_bounds(cumulative, explored, None, decided.floor)
            tighter = sources.rows_z_high(group.node, cumulative, explored)
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
            stats["swept_to_decide"] += 1
            if still:  # as sample_group: explore for them, then draw alone
                sampler.search.start(group.node)
                sources.floor, sources.far_row = decided.floor, decided.far_row
                # (``decide_all`` left their shells ``UNDECIDED``)
                sampler.decide_by_exploring(group, shells, [pending[k] for k in still])
                outputs[i] = sampler.draw_alone(decided._replace(shells=shells, pending=[]))
                continue
            stats["decided_by_sweep"] += 1
            now = decided._replace(shells=shells, pending=[], table_masses=shell_masses)
            if self.can_share(now):
                waiting.append((i, now))
            else:
                outputs[i] = sampler.draw_alone(now)
        return waiting

    def can_share(self, decided: Decided) -> bool:
        """Whether a shared sweep can draw this group: every shell decided within the table's
        depth (so the member draws can use the table's shell masses, which the guard then
        checks against the sweep's), and deeper than the search has already explored (else
        drawing alone costs nothing more)."""
        deepest = max(decided.shells)
        search = self.sampler.search
        explored = search.n_shells if search.source == decided.group.node else 0
        return (
            decided.table_masses is not None
            and deepest < len(decided.table_masses)
            and deepest < self.sampler.radius
            and deepest >= explored
        )

    def _draw_shared(self, waiting: list[tuple[int, Decided]], outputs: list[list[int]]) -> None:
        """Steps 3 and 4 of ``sample_group`` for up to 64 groups in one shared sweep
        (``SharedShells.pick``), into ``outputs``; every group is guarded as
        ``FastSampler.draw_alone`` guards it, on the masses the sweep found, before any output
        is kept."""
        sources, n_shells, req_ptr, req_shell, req_draw, req_record = [], [], [0], [], [], []
        for _, decided in waiting:
            group, shells, known = decided.group, decided.shells, decided.table_masses
            assert known is not None  # can_share
            requests = sorted(
                (h, group.member_draw(r, known[h], decided.member_blocks[r]), r)
                for r, h in enumerate(shells)
            )
            sources.append(group.node)
            n_shells.append(max(shells) + 1)
            req_shell += [h for h, _, _ in requests]
            req_draw += [d for _, d, _ in requests]
            req_record += [r for _, _, r in requests]
            req_ptr.append(len(req_shell))
        found, swept, bad = self.sweeps().pick(
            np.array(sources, dtype=np.int64),
            np.array(n_shells, dtype=np.int64),
            np.array(req_ptr, dtype=np.int64),
            np.array(req_shell, dtype=np.int64),
            np.array(req_draw, dtype=np.int64),
        )
        sha256 = self.sampler.graph.sha256
        for b, (_, decided) in enumerate(waiting):
            guard(swept[b], n_shells[b], decided.table_row, decided.floor, decided.far_row, sha256)
        if bad >= 0:  # the guard found nothing, yet a draw fell outside its shell
            raise RuntimeError("the shared sweep disagrees with the profile table")
        picked = found.tolist()
        stats = self.sampler.stats
        for b, (i, decided) in enumerate(waiting):
            out = [0] * len(decided.shells)
            for k in range(req_ptr[b], req_ptr[b + 1]):
                out[req_record[k]] = picked[k]
            outputs[i] = out
            stats["records"] += len(out)
        stats["groups"] += len(waiting)
        stats["shared_groups"] += len(waiting)
        stats["shells_explored"] += sum(n_shells)
