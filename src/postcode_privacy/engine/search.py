"""The engine's compiled hop-shell search over the location adjacency.

The search works on locations (distinct centroids), never on the postcode cliques they stand for.
A :class:`ShellSearch` explores breadth-first from one source node, one shell at a time, and can
resume where it stopped; it keeps, for every explored shell, the list of locations in it and the
exact prior mass of the node shell.  The node shells are those of
:func:`postcode_privacy.graph.shells.iter_node_shells`, the reference:

* shell 0 is the source node alone;
* shell 1 is the other postcodes at the source's location plus the members of the locations one
  hop away;
* shell h >= 2 is the members of the locations h hops away.

Masses are exact int64 sums (the total prior is at most 2**62, so they cannot wrap).  The node
list of a shell, needed only for the within-shell draw, is rebuilt on demand from its locations;
the draw picks from it by a quickselect on node index (``_select_by_prior``), which gives the
node that sorting by node index, the order the reference sampler uses, would give.

Nothing here decides an output.  :meth:`ShellSearch.explore_guided` uses floating point only to
choose *how far* to explore before the exact decision (``engine/fast.py``, with the core's
``decide_below`` and ``choose_shell``) runs; exploring further than needed changes nothing but
the time taken.  The landmark kernels at the end (``location_distances``, ``pair_table``,
``ball_bounds``) serve ``engine/landmarks.py``.

The graph is read from a :class:`~postcode_privacy.engine.layout.SearchLayout`: the graph's own
location numbers or the map's (engine/layout.py); every location number in these kernels is
the layout's, and only ``_ball_floor`` maps back to the graph's, to read the profile table.

Buffers are sized once per search object: two int32 arrays of (about) one entry per location
(6.7 MB each on the national graph), a 16 KiB neighbour buffer and arrays of radius + 2
entries.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .._numba import njit
from ..errors import InvalidParameterError
from ..graph.compiled import location_masses
from ..graph.graph import Graph
from .layout import SearchLayout, graph_layout

__all__ = ["ShellSearch", "ball_disagreement", "location_distances", "pair_table", "ball_bounds"]

# Relative margin the float guide demands before it stops exploring.  Float rounding in the guide
# is far smaller; a wrong guess only costs further exploration steps, never an output.
_GUIDE_MARGIN = 1e-9
_MAX_EPOCH = 2**31 - 2
_EXPAND_BUFFER = 4096  # neighbours gathered at a time by _expand (16 KiB)
_NO_FLOOR = np.zeros(0, dtype=np.int64)  # ``draw_each`` guards by no floor


class _Arrays(NamedTuple):
    """What every search kernel reads and writes, passed to them as one argument: the graph
    as the layout numbers it (engine/layout.py), and the search's own buffers."""

    indptr: np.ndarray  # location adjacency (CSR offsets, then neighbours)
    indices: np.ndarray
    loc_mass: np.ndarray  # prior mass of each location
    node_location: np.ndarray  # location of each node
    prior: np.ndarray  # prior of each node
    members_indptr: np.ndarray  # nodes of each location (CSR offsets, then nodes)
    members_flat: np.ndarray
    original: np.ndarray  # the graph's own number of each location (to read the table)
    stamp: np.ndarray  # visited marks: the epoch of the search that last reached a location
    order: np.ndarray  # explored locations, shell by shell
    shell_ptr: np.ndarray  # shell h is order[shell_ptr[h] : shell_ptr[h + 1]]
    buf: np.ndarray  # neighbours gathered by _expand
    masses: np.ndarray  # prior mass of each explored node shell


@njit(cache=True)
def _start(search, epoch, source):
    loc = search.node_location[source]
    search.stamp[loc] = epoch
    search.order[0] = loc
    search.shell_ptr[0] = 0
    search.shell_ptr[1] = 1
    search.masses[0] = search.prior[source]
    return search.loc_mass[loc] - search.prior[source]  # co-located postcodes: part of shell 1


@njit(cache=True)
def _expand(search, epoch, h):
    """Append location shell h (the unseen neighbours of shell h - 1); return its prior mass.

    In two passes over as many of shell h - 1's locations as ``buf`` holds the neighbours of
    (``buf`` has room for the most neighbours of one location): first their neighbour lists
    are copied into ``buf``, then the unseen ones are kept.  Each pass is a short loop of
    independent reads, which the processor overlaps far better than the nested loop's chain
    of dependent ones (about a tenth faster, docs/performance.md).  The second pass is
    branch-free: whether a neighbour is new is unpredictable, and a mispredicted branch per
    edge was a quarter of the time.  ``order`` has room for one more than the locations, as
    each neighbour is written one place ahead and kept only if it was unseen.  The shell's
    locations and their order are exactly those of one loop over the edges in turn.
    """
    indptr, indices, stamp, order = search.indptr, search.indices, search.stamp, search.order
    buf, shell_ptr = search.buf, search.shell_ptr
    first = n = shell_ptr[h]
    k, end, room = shell_ptr[h - 1], shell_ptr[h], buf.size
    while k < end:
        m = 0
        while k < end:
            v = order[k]
            a, b = indptr[v], indptr[v + 1]
            if m + (b - a) > room:
                break
            for e in range(a, b):
                buf[m] = indices[e]
                m += 1
            k += 1
        for i in range(m):
            w = buf[i]
            unseen = stamp[w] != epoch
            stamp[w] = epoch
            order[n] = w
            n += unseen
    mass = 0
    for j in range(first, n):
        mass += search.loc_mass[order[j]]
    shell_ptr[h + 1] = n
    return mass


@njit(cache=True)
def _explore(search, epoch, colocated, n_shells, target):
    """Explore node shells n_shells .. target - 1; return the new number of shells."""
    for h in range(n_shells, target):
        mass = _expand(search, epoch, h)
        if h == 1:
            mass += colocated
        search.masses[h] = mass
    return max(n_shells, target)


@njit(cache=True)
def _explore_guided(
    search,
    epoch,
    colocated,
    n_shells,
    u,
    pf,
    radius,
    total,
    margin,
    ball_bounds,
    floor,
    best,
):
    """Explore until a float estimate of every record's shell decision looks settled.

    Mirrors ``choose_shell`` in floating point: ``u`` holds each record's U and ``pf[h]`` is
    P_h / P_0.  The upper bound on Z is the smaller of the core's (every unexplored node at
    h + 1 hops) and, for each row q of ``ball_bounds`` (see :func:`ball_bounds`), the bound
    that row gives; the lower bound is the one the exact path takes from ``floor`` (length
    ``radius``, all zero for the core's).  Stops at ``radius`` shells at the latest.  Returns
    the number of shells explored and writes to ``best[0]`` the row giving the smallest bound
    at that depth (-1 if none beats the core's).  The caller makes the exact decision
    afterwards.

    A row Q of ``ball_bounds`` bounds Z as the exact path does (engine/fast.py): every node
    outside the explored ball B_h is at least h + 1 hops away, and at least j hops away if it
    lies outside the region Q[j - 1] covers, so Z <= C_h + P_{h+1} (Q[h+1] - pi(B_h))
    + sum_{j=h+2}^{R-1} P_j (Q[j] - Q[j-1]) + P_R (Pi - Q[R-1]).  The floor's bound is
    ``bounds.z_low_by_floor``'s.
    """
    masses = search.masses
    k = u.size
    n_rows = ball_bounds.shape[0]
    pointer = np.zeros(k, dtype=np.int64)
    settled = np.zeros(k, dtype=np.bool_)
    left = k
    # suffix[q, j] = sum_{i=j}^{radius-1} pf[i] * (Q[q, i] - Q[q, i-1]), suffix[q, radius] = 0
    suffix = np.zeros((n_rows, radius + 1), dtype=np.float64)
    for q in range(n_rows):
        for j in range(radius - 1, 0, -1):
            step = ball_bounds[q, j] - ball_bounds[q, j - 1]
            suffix[q, j] = suffix[q, j + 1] + pf[j] * step
    cf = np.empty(radius, dtype=np.float64)
    c = 0.0
    explored = 0
    for h in range(n_shells):
        c += pf[h] * masses[h]
        cf[h] = c
        explored += masses[h]
    h = n_shells - 1
    while True:
        if h >= 0:
            remaining = float(total - explored)
            z_low = cf[h]
            known = explored  # the floor's envelope, as bounds.z_low_by_floor builds it
            for j in range(h + 1, radius):
                q = min(max(known, floor[j]), total)
                z_low += pf[j] * float(q - known)
                known = q
            z_low += pf[radius] * float(total - known)
            best[0] = -1
            if h == radius - 1:
                z_high = z_low
            else:
                z_high = cf[h] + pf[h + 1] * remaining
                for q in range(n_rows):
                    bound = (
                        cf[h]
                        + pf[h + 1] * float(ball_bounds[q, h + 1] - explored)
                        + suffix[q, h + 2]
                        + pf[radius] * float(total - ball_bounds[q, radius - 1])
                    )
                    if bound < z_high:
                        z_high = bound
                        best[0] = q
            for r in range(k):
                if settled[r]:
                    continue
                i = pointer[r]
                while i <= h:
                    ci = cf[i]
                    if u[r] * z_high < ci * (1.0 - margin):
                        settled[r] = True
                        break
                    if u[r] * z_low >= ci * (1.0 + margin):
                        i += 1
                    else:
                        break
                pointer[r] = i
                if not settled[r] and i == radius:
                    settled[r] = True
                if settled[r]:
                    left -= 1
            if left == 0 or h == radius - 1:
                return h + 1
        h += 1
        if h:
            mass = _expand(search, epoch, h)
        else:
            mass = 0
        if h == 1:
            mass += colocated
        masses[h] = mass
        explored += mass
        c += pf[h] * mass
        cf[h] = c


@njit(cache=True)
def _location_distances(indptr, indices, source, dist, queue):
    """Hop distance from location ``source`` to every location (-1 if unreachable)."""
    dist[:] = -1
    dist[source] = 0
    queue[0] = source
    head, tail = 0, 1
    while head < tail:
        v = queue[head]
        head += 1
        dv = dist[v] + 1
        for e in range(indptr[v], indptr[v + 1]):
            w = indices[e]
            if dist[w] < 0:
                dist[w] = dv
                queue[tail] = w
                tail += 1
    return dist[queue[tail - 1]]


def location_distances(graph: Graph, source_location: int) -> np.ndarray:
    """Hop distance (int32) from one location to every location, -1 where unreachable."""
    dist = np.empty(graph.n_locations, dtype=np.int32)
    queue = np.empty(graph.n_locations, dtype=np.int32)
    _location_distances(graph.loc_indptr, graph.loc_indices, int(source_location), dist, queue)
    return dist


@njit(cache=True)
def pair_table(d1, d2, loc_mass, rows, cols):
    """Cumulative table S[r, c] = mass of locations with d1 < r and d2 < c (both reachable).

    Shape (rows + 1, cols + 1) with rows > max(d1), cols > max(d2).  Built as row sums, then
    column sums, so no partial sum exceeds the total mass (<= 2**62): no int64 overflow.
    """
    table = np.zeros((rows + 1, cols + 1), dtype=np.int64)
    for v in range(d1.size):
        if d1[v] >= 0 and d2[v] >= 0:
            table[d1[v] + 1, d2[v] + 1] += loc_mass[v]
    for r in range(1, rows + 1):
        for c in range(1, cols + 1):
            table[r, c] += table[r, c - 1]
    for r in range(1, rows + 1):
        for c in range(1, cols + 1):
            table[r, c] += table[r - 1, c]
    return table


@njit(cache=True)
def _square_mass(flat, base, rows, cols, ai, ak, j):
    """Table mass of the locations within j of ai (landmark i) and of ak (landmark k)."""
    r0 = max(ai - j, 0)
    r1 = min(ai + j + 1, rows - 1)
    c0 = max(ak - j, 0)
    c1 = min(ak + j + 1, cols - 1)
    return (
        flat[base + r1 * cols + c1]
        - flat[base + r0 * cols + c1]
        - flat[base + r1 * cols + c0]
        + flat[base + r0 * cols + c0]
    )


@njit(cache=True)
def ball_bounds(a, pairs, offsets, shapes, flat, radius, keep, out):
    """Upper bounds on the prior mass within j hops of a source, one row per chosen pair.

    ``a[i]`` is the source location's hop distance from landmark i (-1: unreachable).  For a
    pair (i, k) of landmarks reaching the source, every node within j hops of it lies within j
    of a[i] in distance from landmark i and within j of a[k] from landmark k (triangle
    inequality), so row[j] = the table mass of that square is >= pi(B_j), for j < radius.

    Only the ``keep`` pairs with the smallest square at j = radius // 3 (about the depth the
    search stops at) get a row: the rows are costly in cache misses, and any row is a valid
    bound.  Writes rows to ``out`` (shape (keep, radius)) and returns how many.
    """
    n_pairs = pairs.shape[0]
    probe = min(max(radius // 3, 1), radius - 1)
    score = np.full(n_pairs, np.iinfo(np.int64).max, dtype=np.int64)
    for p in range(n_pairs):
        ai = a[pairs[p, 0]]
        ak = a[pairs[p, 1]]
        if ai >= 0 and ak >= 0:
            score[p] = _square_mass(flat, offsets[p], shapes[p, 0], shapes[p, 1], ai, ak, probe)
    chosen = np.argsort(score, kind="mergesort")
    n = 0
    for t in range(min(keep, n_pairs)):
        p = chosen[t]
        if score[p] == np.iinfo(np.int64).max:
            break
        ai = a[pairs[p, 0]]
        ak = a[pairs[p, 1]]
        rows, cols = shapes[p, 0], shapes[p, 1]
        # Beyond this half-width the square covers the whole table: the row is constant.
        full = max(ai, rows - 2 - ai, ak, cols - 2 - ak)
        for j in range(radius):
            if j > full:
                out[n, j] = out[n, j - 1]
            else:
                out[n, j] = _square_mass(flat, offsets[p], rows, cols, ai, ak, j)
        n += 1
    return n


@njit(cache=True)
def _shell_nodes(search, source, h):
    """Node shell h, sorted by node index (h < number of explored shells)."""
    out = _shell_members(search, source, h)
    out.sort()
    return out


@njit(cache=True)
def _shell_members(search, source, h):
    """Node shell h in exploration order (h < number of explored shells)."""
    order, shell_ptr = search.order, search.shell_ptr
    members_indptr, members_flat = search.members_indptr, search.members_flat
    if h == 0:
        out = np.empty(1, dtype=np.int64)
        out[0] = source
        return out
    count = 0
    for k in range(shell_ptr[h], shell_ptr[h + 1]):
        v = order[k]
        count += members_indptr[v + 1] - members_indptr[v]
    src_loc = search.node_location[source]
    if h == 1:
        count += members_indptr[src_loc + 1] - members_indptr[src_loc] - 1
    out = np.empty(count, dtype=np.int64)
    n = 0
    if h == 1:
        for j in range(members_indptr[src_loc], members_indptr[src_loc + 1]):
            if members_flat[j] != source:
                out[n] = members_flat[j]
                n += 1
    for k in range(shell_ptr[h], shell_ptr[h + 1]):
        v = order[k]
        for j in range(members_indptr[v], members_indptr[v + 1]):
            out[n] = members_flat[j]
            n += 1
    return out


@njit(cache=True)
def _bit_length(n):
    """The number of bits of the non-negative integer n."""
    bits = 0
    while n:
        n >>= 1
        bits += 1
    return bits


@njit(cache=True)
def _select_by_sorting(nodes, prior, draws, found):
    """``_select_by_prior``'s answers by the rule itself: sort the nodes, accumulate their
    prior, and take the first cumulative value greater than each draw."""
    ordered = np.sort(nodes)
    cumulative = np.cumsum(prior[ordered])
    for k in range(draws.size):
        found[k] = ordered[np.searchsorted(cumulative, draws[k], side="right")]
    return found


@njit(cache=True)
def _select_by_prior(nodes, prior, draws, found):
    """found[k] = the node that sorting ``nodes`` and taking the first cumulative prior
    greater than ``draws[k]`` would give, for draws sorted in increasing order, each in
    [0, prior of ``nodes``) (the caller checks against the shell's mass).  Nodes are distinct;
    ``nodes`` is reordered.

    A quickselect on node index instead of the sort: a range of nodes covers an interval
    [base, base + its prior) of the cumulative prior, and holds the draws that fall in it.
    Splitting the range around a pivot (nodes below it, the pivot, nodes above it) splits
    the interval in the same order, so each draw follows the part it falls in; a range of one
    node, or the pivot itself, is the answer.  Typically linear in the shell for one draw and
    about shell x log(draws) for many, against shell x log(shell) for the sort.  The pivot is
    the median of three nodes, so an unlucky order of the shell (possible in a graph built to
    cause it) could make it quadratic: past a budget of partition work about that of a sort,
    it gives up and sorts (``_select_by_sorting``), with the same answers.
    """
    budget = 4 * nodes.size * (_bit_length(draws.size) + 2) + 64  # nodes moved past a pivot
    stack = np.empty((draws.size + 1, 5), dtype=np.int64)  # ranges holding disjoint draws
    stack[0, 0], stack[0, 1], stack[0, 2], stack[0, 3], stack[0, 4] = (
        0,
        nodes.size,
        0,
        0,
        draws.size,
    )
    depth = 1
    while depth > 0:
        depth -= 1
        lo, hi, base, a, b = (
            stack[depth, 0],
            stack[depth, 1],
            stack[depth, 2],
            stack[depth, 3],
            stack[depth, 4],
        )
        while a < b:
            if hi - lo == 1:
                for k in range(a, b):
                    found[k] = nodes[lo]
                break
            x, y, z = nodes[lo], nodes[(lo + hi) // 2], nodes[hi - 1]
            pivot = max(min(x, y), min(max(x, y), z))  # median of three
            budget -= hi - lo
            if budget < 0:  # unlucky pivots: sorting is cheaper from here
                return _select_by_sorting(nodes, prior, draws, found)
            below, above, i = lo, hi, lo  # nodes[lo:below] < pivot < nodes[above:hi]
            weight_below = 0
            while i < above:
                v = nodes[i]
                if v < pivot:
                    nodes[i] = nodes[below]
                    nodes[below] = v
                    weight_below += prior[v]
                    below += 1
                    i += 1
                elif v > pivot:
                    above -= 1
                    nodes[i] = nodes[above]
                    nodes[above] = v
                else:
                    i += 1
            pivot_start = base + weight_below
            pivot_end = pivot_start + prior[pivot]
            left_end = a
            while left_end < b and draws[left_end] < pivot_start:
                left_end += 1
            right_start = left_end
            while right_start < b and draws[right_start] < pivot_end:
                found[right_start] = pivot
                right_start += 1
            if right_start < b:
                if left_end > a:  # both sides hold draws: the right waits on the stack
                    stack[depth, 0], stack[depth, 1], stack[depth, 2] = above, hi, pivot_end
                    stack[depth, 3], stack[depth, 4] = right_start, b
                    depth += 1
                else:
                    lo, base, a = above, pivot_end, right_start
                    continue
            hi, b = below, left_end
    return found


@njit(cache=True)
def _pick(search, source, n_shells, shells, draws, out):
    """out[r] = the node of shell shells[r] whose cumulative prior first exceeds draws[r].

    Same rule as ``mechanism.sampler.pick_in_shell``: cumulative prior in node order within the
    shell, then the first position whose cumulative value is strictly greater than the draw.
    Requests are grouped by shell so each shell's node list is built once, and their nodes are
    selected without sorting it (``_select_by_prior``).  Returns -1, or the
    index of a request whose shell is unexplored or whose draw is outside [0, mass).
    """
    masses = search.masses
    for r in range(shells.size):
        if shells[r] < 0 or shells[r] >= n_shells or draws[r] < 0 or draws[r] >= masses[shells[r]]:
            return r
    idx = np.argsort(shells, kind="mergesort")
    start = 0
    while start < idx.size:  # the requests of one shell: idx[start:stop]
        h = shells[idx[start]]
        stop = start + 1
        while stop < idx.size and shells[idx[stop]] == h:
            stop += 1
        mine = idx[start:stop]
        by_draw = mine[np.argsort(draws[mine], kind="mergesort")]
        found = _select_by_prior(
            _shell_members(search, source, h),
            search.prior,
            draws[by_draw],
            np.empty(by_draw.size, dtype=np.int64),
        )
        for k in range(by_draw.size):
            out[by_draw[k]] = found[k]
        start = stop
    return -1


@njit(cache=True)
def _ball_floor(search, table, hops, out):
    """out[j] = the largest table[z, j - k] over the locations z of location shells
    1 .. ``hops`` (k = z's shell), j = k .. k + table depth, where out has room; the table is
    indexed by the graph's location numbers, ``original`` of the search's."""
    width = table.shape[1]
    for k in range(1, hops + 1):
        for p in range(search.shell_ptr[k], search.shell_ptr[k + 1]):
            z = search.original[search.order[p]]
            for i in range(min(width, out.size - k)):
                value = np.int64(table[z, i])
                if value > out[k + i]:
                    out[k + i] = value


@njit(cache=True)
def ball_disagreement(masses, n_shells, table_row, floor, far_row):  # pragma: no cover - compiled
    """Whether the explored balls pi(B_0) .. pi(B_{n-1}) disagree with what the engine was
    told of them: 1 if a ball differs from ``table_row`` (location balls, from k = 1; B_0 is
    the source alone) or is lighter than ``floor``, else 2 if one is heavier than ``far_row``;
    0 if none.  The table is named first at any depth, as the message that follows tells the
    user which cache to delete.  Each array is checked as far as it and the explored shells
    both reach (empty: not at all).
    """
    ball = 0
    found = 0
    for k in range(n_shells):
        ball += masses[k]
        if 1 <= k < table_row.size and ball != table_row[k]:
            return 1
        if k < floor.size and floor[k] > ball:
            return 1
        if k < far_row.size and ball > far_row[k]:
            found = 2
    return found


@njit(cache=True)
def _draw_one(
    search, epoch, source, shell, draw, table_row, floor, far_row, picked
):  # fmt: skip  # pragma: no cover - compiled
    """``_start`` at ``source``, ``_explore`` to shell + 1 shells, ``ball_disagreement`` on
    them, then ``_pick``'s rule for one request, in one call (ShellSearch.draw_one).

    Returns (status, colocated, n_shells): status 0 with the node in picked[0]; 1 or 2 as
    ``ball_disagreement`` (no pick made); 3 if the request is outside the explored shells
    or the draw outside the shell's mass (``_pick``'s refusal).
    """
    colocated = _start(search, epoch, source)
    n_shells = 1
    if shell >= 1:
        n_shells = _explore(search, epoch, colocated, 1, shell + 1)
    status = ball_disagreement(search.masses, n_shells, table_row, floor, far_row)
    if status != 0:
        return status, colocated, n_shells
    if shell < 0 or shell >= n_shells or draw < 0 or draw >= search.masses[shell]:
        return 3, colocated, n_shells
    draws = np.empty(1, dtype=np.int64)
    draws[0] = draw
    _select_by_prior(_shell_members(search, source, shell), search.prior, draws, picked)
    return 0, colocated, n_shells


@njit(cache=True)
def _draw_each(
    search, epoch, sources, shells, draws, table, table_location, far_balls, cluster_of, with_far,
    floor, picked, found,
):  # fmt: skip  # pragma: no cover - compiled
    """``_draw_one`` for each request r (source, shell, draw), each on a new epoch, guarded by
    the source's table row (``table[table_location[source]]``), the floor, and, where
    ``with_far[r]``, its cluster's far-mass row: the node into ``picked[r]``.

    Returns (status, r, epoch, colocated, n_shells, locations): status 0, or the first
    request r whose ``_draw_one`` status was not 0 (nothing after it is drawn); ``locations``
    sums the locations each search explored."""
    colocated = 0
    n_shells = 0
    locations = 0
    one = np.empty(1, dtype=np.int64)
    for r in range(sources.size):
        epoch += 1
        if epoch > _MAX_EPOCH:
            search.stamp[:] = 0
            epoch = 1
        source = sources[r]
        place = table_location[source]
        row = far_balls[cluster_of[place] if with_far[r] else 0]
        far_row = row[: row.size if with_far[r] else 0]
        status, colocated, n_shells = _draw_one(
            search, epoch, source, shells[r], draws[r], table[place], floor, far_row, one
        )
        found[r] = n_shells
        locations += search.shell_ptr[n_shells]
        if status != 0:
            return status, r, epoch, colocated, n_shells, locations
        picked[r] = one[0]
    return 0, sources.size, epoch, colocated, n_shells, locations


@njit(cache=True)
def _ball(search, source, h_end):
    """Every node in node shells 0 .. h_end - 1 (unsorted)."""
    order, shell_ptr = search.order, search.shell_ptr
    members_indptr, members_flat = search.members_indptr, search.members_flat
    if h_end == 1:  # the source alone: its co-located postcodes are in shell 1
        out = np.empty(1, dtype=np.int64)
        out[0] = source
        return out
    count = 0
    for k in range(shell_ptr[h_end]):
        v = order[k]
        count += members_indptr[v + 1] - members_indptr[v]
    out = np.empty(count, dtype=np.int64)
    n = 0
    for k in range(shell_ptr[h_end]):
        v = order[k]
        for j in range(members_indptr[v], members_indptr[v + 1]):
            out[n] = members_flat[j]
            n += 1
    return out


class ShellSearch:
    """Resumable breadth-first shell exploration from one source at a time, up to ``max_shells``.

    Usage: ``start(node)``, then ``explore_to(k)`` or ``explore_guided(...)``; ``masses[:n_shells]``
    holds the exact prior mass of each explored node shell.  ``start`` again for the next
    source: the visited marks are invalidated by bumping an epoch, not by clearing the array.
    """

    def __init__(
        self,
        graph: Graph,
        max_shells: int,
        loc_mass: np.ndarray | None = None,
        layout: SearchLayout | None = None,
    ):
        if max_shells < 1:
            raise InvalidParameterError("max_shells must be at least 1")
        self.graph = graph
        self.max_shells = int(max_shells)
        self.loc_mass = location_masses(graph) if loc_mass is None else loc_mass
        # The graph as the search reads it (engine/layout.py); every location number below is
        # the layout's, and only ``_ball_floor`` reads a table by the graph's own numbers.
        if layout is None:
            layout = graph_layout(graph, self.loc_mass)
        self.layout = layout  # also what the shared sweeps beside this search read
        n_loc = graph.n_locations
        self.masses = np.zeros(self.max_shells + 1, dtype=np.int64)
        self._arrays = _Arrays(
            indptr=layout.indptr,
            indices=layout.indices,
            loc_mass=layout.loc_mass,
            node_location=layout.node_location,
            prior=graph.prior,
            members_indptr=layout.members_indptr,
            members_flat=layout.members_flat,
            original=layout.original,
            stamp=np.zeros(n_loc, dtype=np.int32),
            order=np.empty(n_loc + 1, dtype=np.int32),  # + 1: see _expand
            buf=np.empty(max(_EXPAND_BUFFER, layout.max_degree), dtype=np.int32),
            shell_ptr=np.zeros(self.max_shells + 2, dtype=np.int64),
            masses=self.masses,
        )
        # Shell, draw and output of a one-record pick (the usual case for distinct
        # postcodes), reused from call to call.
        self._one = tuple(np.empty(1, dtype=np.int64) for _ in range(3))
        self._epoch = 0
        self.source = -1
        self.n_shells = 0
        self._colocated = 0

    def _begin(self, source: int) -> None:
        """A new source: a new epoch (the visited marks of every earlier one are void)."""
        self._epoch += 1
        if self._epoch > _MAX_EPOCH:
            self._arrays.stamp[:] = 0
            self._epoch = 1
        self.source = int(source)

    def start(self, source: int) -> None:
        """Begin a new search from node ``source``: shell 0 (the source) is explored."""
        self._begin(source)
        self._colocated = int(_start(self._arrays, self._epoch, self.source))
        self.n_shells = 1

    @property
    def locations_explored(self) -> int:
        """Locations in the explored shells."""
        return int(self._arrays.shell_ptr[self.n_shells]) if self.n_shells else 0

    def explore_to(self, n_shells: int) -> None:
        """Explore until at least ``n_shells`` node shells are known (at most ``max_shells``)."""
        target = min(int(n_shells), self.max_shells)
        if target > self.n_shells:
            self.n_shells = int(
                _explore(self._arrays, self._epoch, self._colocated, self.n_shells, target)
            )

    def explore_guided(
        self,
        uniforms: np.ndarray,
        power_ratios: np.ndarray,
        radius: int,
        total_prior: int,
        ball_bounds: np.ndarray | None = None,
        floor: np.ndarray | None = None,
    ) -> int:
        """Explore as far as a float estimate says the shell decisions of ``uniforms`` need.

        ``power_ratios[h]`` approximates P_h / P_0 for h = 0 .. radius, and ``radius`` must not
        exceed ``max_shells``.  ``ball_bounds``, if given, has one row per candidate bound
        (shape (rows, radius)), row q holding non-decreasing upper bounds Q[q, j] on the prior
        mass within j hops of the source.  The estimate only sets the depth; see the module
        docstring.  ``floor``, if given, holds ``radius`` lower bounds on those masses
        (``ball_floor``).  Returns the row whose bound was smallest at the final depth, or -1.
        """
        if radius > self.max_shells:
            raise InvalidParameterError("radius exceeds the shells this search was sized for")
        if ball_bounds is None:
            ball_bounds = np.zeros((0, radius), dtype=np.int64)
        if floor is None:
            floor = np.zeros(radius, dtype=np.int64)
        elif floor.shape != (radius,):  # the kernel reads floor[h + 1 .. radius - 1] unchecked
            raise InvalidParameterError("the floor must have one entry per hop below the radius")
        best = np.full(1, -1, dtype=np.int64)
        self.n_shells = int(
            _explore_guided(
                self._arrays,
                self._epoch,
                self._colocated,
                self.n_shells,
                uniforms,
                power_ratios,
                int(radius),
                int(total_prior),
                _GUIDE_MARGIN,
                ball_bounds,
                floor,
                best,
            )
        )
        return int(best[0])

    def ball_floor(self, table: np.ndarray, hops: int, radius: int) -> np.ndarray:
        """Lower bounds F[j] <= pi(B_j(x)) for j = 0 .. radius - 1 (x the source), from a
        table of cumulative location-ball masses (``table[z, i]`` = pi(B_i(z)) for location
        z, as engine/profiles.py holds) and the location shells 1 .. ``hops`` explored.

        A location z at k hops from x has its ball of i hops inside x's ball of k + i hops,
        so pi(B_{k+i}(x)) >= table[z, i]; F[j] is the largest such value (0 where there is
        none).  For j >= 1 the node ball B_j(x) is x's location ball, so F bounds it too.
        """
        if not 0 <= hops < self.n_shells:
            raise InvalidParameterError("floor from shells that are not explored")
        out = np.zeros(int(radius), dtype=np.int64)
        _ball_floor(self._arrays, table, int(hops), out)
        return out

    def shell_nodes(self, h: int) -> np.ndarray:
        """Node shell ``h`` (already explored), sorted by node index."""
        if not 0 <= h < self.n_shells:
            raise InvalidParameterError("shell not explored")
        return _shell_nodes(self._arrays, self.source, int(h))

    def pick(self, shells: np.ndarray, draws: np.ndarray) -> np.ndarray:
        """For each request, the node of that (explored) shell at that cumulative-prior draw.

        Precondition: ``0 <= draws[r] < masses[shells[r]]`` (the caller's uniform integer).
        """
        shells = np.ascontiguousarray(shells, dtype=np.int64)
        draws = np.ascontiguousarray(draws, dtype=np.int64)
        out = np.empty(shells.size, dtype=np.int64)
        return self._pick_into(shells, draws, out)

    def pick_one(self, shell: int, draw: int) -> int:
        """``pick`` of one request, without building arrays for it."""
        shells, draws, out = self._one
        shells[0], draws[0] = shell, draw
        return int(self._pick_into(shells, draws, out)[0])

    def draw_one(
        self,
        source: int,
        shell: int,
        draw: int,
        table_row: np.ndarray,
        floor: np.ndarray,
        far_row: np.ndarray,
    ) -> tuple[int, int]:
        """``start(source)``, ``explore_to(shell + 1)``, ``ball_disagreement`` of the explored
        balls with the three rows, then ``pick_one(shell, draw)``, in one compiled call (the
        usual work of a record with a postcode of its own, whose several calls cost more
        than their work).  Returns (node, 0), or (-1, status) for a disagreement found (1 or
        2, as ``ball_disagreement``), before any pick.  Afterwards the search is where
        ``start`` and ``explore_to`` would have left it.
        """
        if not 0 <= shell < self.max_shells:  # the kernel writes shells 0 .. shell unchecked
            raise InvalidParameterError("request for a shell beyond this search's reach")
        self._begin(source)
        out = self._one[2]
        status, colocated, n_shells = _draw_one(
            self._arrays, self._epoch, self.source, int(shell), int(draw), table_row, floor,
            far_row, out,
        )  # fmt: skip
        self._colocated, self.n_shells = int(colocated), int(n_shells)
        if status == 3:
            raise InvalidParameterError(
                "request for an unexplored shell or a draw outside its mass"
            )
        return (int(out[0]), 0) if status == 0 else (-1, int(status))

    def draw_each(
        self,
        sources: np.ndarray,
        shells: np.ndarray,
        draws: np.ndarray,
        table: np.ndarray,
        table_location: np.ndarray,
        far_balls: np.ndarray,
        cluster_of: np.ndarray,
        with_far: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, int, int]:
        """``draw_one`` for many requests in one compiled call: request r is guarded by its
        source's table row (``table[table_location[sources[r]]]``, the table's own location
        numbers) and, where ``with_far[r]``, by its cluster's far-mass row
        (``far_balls[cluster_of[...]]``; ``far_balls`` needs one row even when none is used).

        Returns (nodes, shells explored per request, locations explored in all, status):
        status 0, or the first disagreement found (1 or 2, as ``ball_disagreement``), with
        nothing drawn from that request on.  Afterwards the search is where ``draw_one`` of
        the last request drawn would have left it.
        """
        sources = np.ascontiguousarray(sources, dtype=np.int64)
        shells = np.ascontiguousarray(shells, dtype=np.int64)
        draws = np.ascontiguousarray(draws, dtype=np.int64)
        if shells.size and not (0 <= int(shells.min()) and int(shells.max()) < self.max_shells):
            raise InvalidParameterError("request for a shell beyond this search's reach")
        picked = np.full(sources.size, -1, dtype=np.int64)
        explored = np.zeros(sources.size, dtype=np.int64)
        status, stopped, epoch, colocated, n_shells, locations = _draw_each(
            self._arrays,
            self._epoch,
            sources,
            shells,
            draws,
            table,
            table_location,
            far_balls,
            cluster_of,
            np.ascontiguousarray(with_far, dtype=np.bool_),
            _NO_FLOOR,
            picked,
            explored,
        )
        self._epoch = int(epoch)
        if sources.size:
            last = min(int(stopped), sources.size - 1)
            self.source = int(sources[last])
            self._colocated, self.n_shells = int(colocated), int(n_shells)
        if status == 3:
            raise InvalidParameterError(
                "request for an unexplored shell or a draw outside its mass"
            )
        return picked, explored, int(locations), int(status)

    def _pick_into(self, shells: np.ndarray, draws: np.ndarray, out: np.ndarray) -> np.ndarray:
        bad = _pick(self._arrays, self.source, self.n_shells, shells, draws, out)
        if bad >= 0:
            raise InvalidParameterError(
                "request for an unexplored shell or a draw outside its mass"
            )
        return out

    def ball(self) -> np.ndarray:
        """Every node in the explored shells (unsorted)."""
        return _ball(self._arrays, self.source, self.n_shells)
