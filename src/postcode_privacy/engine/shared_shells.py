"""Within-shell picks for up to 64 neighbouring sources from one bit-parallel sweep.

Why: once a record's shell is decided, its draw still needs every member of that shell, so the
engine explores breadth-first from the true postcode out to the drawn shell.  In a file where
most postcodes of an area appear (a national file), neighbouring postcodes explore nearly the
same locations one after another.  Here up to 64 of them explore together: each location holds
a 64-bit set of the sources that have reached it, so a location reached by many sources is
expanded once a level, not once a source (docs/performance.md, "Shared sweeps").

What it computes is exactly what ``ShellSearch`` gives each source alone: a location joins
source b's location shell h at the level where b's bit first reaches it, which is its hop
distance from b's location; node shell 0 is the source alone, node shell 1 adds the other
postcodes at its location, and node shell h is the postcodes at the locations of location
shell h.  The member of a shell at a draw is chosen by ``search._select_by_prior``, the very
rule ``ShellSearch.pick`` uses (cumulative prior in node order), so an output does not depend
on which path drew it nor on the other sources of its sweep.
"""

from __future__ import annotations

import numpy as np

from .._numba import njit
from ..graph.graph import Graph
from .ball_sweeps import _advance, _spread
from .layout import SearchLayout, graph_layout
from .search import _select_by_prior

__all__ = ["SharedShells", "WORD"]

WORD = 64  # sources per sweep: one bit each in an int64


# The index of a word's one set bit by a de Bruijn sequence: multiplying a power of two by it
# leaves a distinct 6-bit pattern in the top bits for each of the 64 powers, looked up in a
# table.  Two operations instead of six shifts and branches; the shared sweeps' gathers call it
# once per source a location reaches at a level (about a tenth of their time).
_DE_BRUIJN = 0x03F79D71B4CB0A89
_DE_BRUIJN_BITS = np.zeros(64, dtype=np.int64)
for _bit in range(64):
    _DE_BRUIJN_BITS[((_DE_BRUIJN << _bit) & 0xFFFFFFFFFFFFFFFF) >> 58] = _bit


@njit(cache=True)
def _bit_index(low):  # pragma: no cover - compiled
    """The index of the one set bit of ``low`` (bit 63, a negative int64, included)."""
    return _DE_BRUIJN_BITS[(np.uint64(low) * np.uint64(_DE_BRUIJN)) >> np.uint64(58)]


@njit(cache=True)
def _pick_level(
    members_indptr, members_flat, node_location, prior, sources, req_ptr, req_shell,
    req_draw, out, masses, active, n_active, state, level, wanted, next_req, counts,
    members, found,
):  # fmt: skip  # pragma: no cover - compiled
    """The requests at node shell ``level`` of the sources in the bit set ``wanted``: each
    such source's shell members are gathered into its own slice of ``members`` in one pass
    over the level's locations (two: count, then fill), then selected by prior.  Moves
    ``next_req[b]`` past them, or sets it to -2 - k for a request k whose draw is not below
    its shell's mass."""
    count = sources.size
    counts[: count + 1] = 0
    for i in range(n_active):
        w = active[i]
        hit = state[w, 1] & wanted
        size = members_indptr[w + 1] - members_indptr[w]
        while hit != 0:
            low = hit & -hit
            counts[_bit_index(low) + 1] += size
            hit ^= low
    if level == 1:  # node shell 1 also holds the other postcodes at the source's location
        for b in range(count):
            if (wanted >> b) & 1:
                loc = node_location[sources[b]]
                counts[b + 1] += members_indptr[loc + 1] - members_indptr[loc] - 1
    for b in range(count):
        counts[b + 1] += counts[b]
    if counts[count] > members.size:
        members = np.empty(counts[count], dtype=np.int64)
    fill = counts[:count].copy()
    if level == 1:
        for b in range(count):
            if (wanted >> b) & 1:
                loc = node_location[sources[b]]
                for j in range(members_indptr[loc], members_indptr[loc + 1]):
                    if members_flat[j] != sources[b]:
                        members[fill[b]] = members_flat[j]
                        fill[b] += 1
    for i in range(n_active):
        w = active[i]
        hit = state[w, 1] & wanted
        while hit != 0:
            low = hit & -hit
            b = _bit_index(low)
            for j in range(members_indptr[w], members_indptr[w + 1]):
                members[fill[b]] = members_flat[j]
                fill[b] += 1
            hit ^= low
    for b in range(count):
        if not (wanted >> b) & 1:
            continue
        k = stop = next_req[b]
        while stop < req_ptr[b + 1] and req_shell[stop] == level:
            if req_draw[stop] >= masses[b, level]:
                next_req[b] = -2 - stop
                break
            stop += 1
        if next_req[b] < 0:
            continue
        nodes = members[counts[b] : counts[b + 1]]
        _select_by_prior(nodes, prior, req_draw[k:stop], found[: stop - k])
        out[k:stop] = found[: stop - k]
        next_req[b] = stop


@njit(cache=True)
def _sweep_picks(
    indptr, indices, loc_mass, members_indptr, members_flat, node_location, prior,
    sources, n_shells, req_ptr, req_shell, req_draw, out, masses,
    state, active, fresh, touched, tally, counts, members, found,
):  # fmt: skip  # pragma: no cover - compiled
    """Node-shell masses of each source and the node at each request's draw.

    Source b (``sources[b]``, a node) is explored to node shells 0 .. ``n_shells[b]`` - 1;
    ``masses[b, h]`` (zero on entry) receives node shell h's prior mass.  Its requests are
    ``req_ptr[b]`` .. ``req_ptr[b + 1]`` - 1, sorted by shell and then by draw;
    ``out[k]`` receives the node of shell ``req_shell[k]`` whose cumulative prior, in node
    order, first exceeds ``req_draw[k]``.

    ``state[v]`` holds three bit sets for location v (side by side, for the cache): the
    sources that have reached it, that reached it at the last level (the frontier), and that
    reach it at this one; all zero on entry and on exit.  Each level is one step of the
    table's own sweep (``ball_sweeps._advance``), with the sources done dropped from
    ``live``.  ``fresh`` and ``touched`` have room for one more than the locations (written
    one place ahead of their count).  Returns -1, or the index of a
    request whose draw is not below its shell's mass (a table that disagrees with the graph:
    the caller's guard names it).
    """
    count = sources.size
    deepest = 0
    n_active = 0
    n_touched = 0
    live = np.int64(0)
    for b in range(count):
        node = sources[b]
        loc = node_location[node]
        bit = np.int64(1) << b
        if state[loc, 0] == 0:
            touched[n_touched] = loc
            n_touched += 1
            active[n_active] = loc
            n_active += 1
        state[loc, 0] |= bit
        state[loc, 1] |= bit
        masses[b, 0] = prior[node]
        if n_shells[b] > 1:
            masses[b, 1] = loc_mass[loc] - prior[node]  # co-located postcodes: node shell 1
            live |= bit
        deepest = max(deepest, n_shells[b])
    bad = -1
    next_req = req_ptr[:-1].copy()
    for b in range(count):
        k = next_req[b]
        while k < req_ptr[b + 1] and req_shell[k] == 0:
            if req_draw[k] >= prior[sources[b]] and bad < 0:
                bad = k
            out[k] = sources[b]
            k += 1
        next_req[b] = k
    for level in range(1, deepest if bad < 0 else 1):
        # (the last level's frontier is cleared as it is expanded)
        n_active, n_touched = _advance(
            indptr, indices, loc_mass, state, active, n_active, fresh, touched, n_touched,
            tally, live,
        )  # fmt: skip
        _spread(tally, masses, level)
        wanted = np.int64(0)  # sources with a request at this level
        for b in range(count):
            k = next_req[b]
            if k < req_ptr[b + 1] and req_shell[k] == level:
                wanted |= np.int64(1) << b
        if wanted != 0:
            _pick_level(
                members_indptr, members_flat, node_location, prior, sources, req_ptr,
                req_shell, req_draw, out, masses, active, n_active, state, level,
                wanted, next_req, counts, members, found,
            )  # fmt: skip
            for b in range(count):
                if (wanted >> b) & 1 and next_req[b] < 0 and bad < 0:
                    bad = -2 - next_req[b]  # a draw outside its shell's mass
            if bad >= 0:
                break
        for b in range(count):
            if n_shells[b] == level + 1:
                live &= ~(np.int64(1) << b)
    for i in range(n_active):  # leave the buffers as they were found: all zero
        state[active[i], 1] = 0
    for i in range(n_touched):
        state[touched[i], 0] = 0
    return bad


class SharedShells:
    """Buffers for :func:`_sweep_picks` on one graph (about 36 bytes a location and 8 a
    postcode), reused from sweep to sweep.

    ``layout`` is the graph as the sweeps read it (engine/layout.py), which should be the one
    the sampler's search reads: along the map, a sweep's sources and their balls lie in few
    stretches of memory, and a national file's sweeps cost about a fifth less, its draws
    about a tenth less in all (docs/performance.md, "Shared sweeps").  Without one, the
    graph's own numbering is used, with ``loc_mass`` (by the graph's location numbers; a
    layout carries its own).  Sources, requests, outputs and masses are nodes and node
    shells, which the layout does not renumber, and the pick sorts each shell by node, so the
    layout changes no output.
    """

    def __init__(self, graph: Graph, loc_mass: np.ndarray, layout: SearchLayout | None = None):
        n_loc = graph.n_locations
        if layout is None:
            layout = graph_layout(graph, loc_mass)
        self._graph_arrays = (
            layout.indptr,
            layout.indices,
            layout.loc_mass,
            layout.members_indptr,
            layout.members_flat,
            layout.node_location,
            graph.prior,
        )
        self._state = np.zeros((n_loc, 3), dtype=np.int64)
        self._active = np.empty(n_loc, dtype=np.int32)
        self._fresh = np.empty(n_loc + 1, dtype=np.int32)
        self._touched = np.empty(n_loc + 1, dtype=np.int32)
        self._tally = np.zeros((8, 256), dtype=np.int64)
        self._counts = np.zeros(WORD + 1, dtype=np.int64)
        self._members = np.empty(len(graph), dtype=np.int64)

    def pick(
        self,
        sources: np.ndarray,
        n_shells: np.ndarray,
        req_ptr: np.ndarray,
        req_shell: np.ndarray,
        req_draw: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """``(out, masses, bad)``: the node of every request, the node-shell masses of every
        source (``masses[b, :n_shells[b]]``), and -1 or the index of a request whose draw is
        not below its shell's mass (then ``out`` is incomplete).  At most :data:`WORD`
        sources; each source's requests sorted by shell, then by draw."""
        count = sources.size
        if not 0 < count <= WORD:
            raise ValueError(f"a sweep takes 1 to {WORD} sources")
        out = np.empty(req_draw.size, dtype=np.int64)
        masses = np.zeros((count, int(n_shells.max())), dtype=np.int64)
        found = np.empty(req_draw.size, dtype=np.int64)
        bad = _sweep_picks(
            *self._graph_arrays,
            sources, n_shells, req_ptr, req_shell, req_draw, out, masses,
            self._state, self._active, self._fresh,
            self._touched, self._tally, self._counts, self._members, found,
        )  # fmt: skip
        return out, masses, int(bad)
