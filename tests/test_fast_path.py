"""The batch engine gives exactly the reference sampler's outputs (docs/performance.md).

Identity, not similarity: every engine output is compared with ``Mechanism.perturb_reference``
(the full-ball sampler) on generated graphs of many shapes (planar-ish Delaunay graphs,
co-located groups, disconnected pieces, tiny radii, priors from 1 to 2**40, teleport above 0.1),
and on a sample of the national graph when it is available.  The compiled shell search and the
landmark bounds it relies on are checked against the reference hop shells directly.
"""

from __future__ import annotations

import random
import threading
import time

import numpy as np
import pytest
from graphs import colocated, disconnected, path
from scipy.spatial import Delaunay

from postcode_privacy import Graph, Key, Mechanism
from postcode_privacy.engine import FastSampler, ball_sweeps, perturb_many, perturb_nodes
from postcode_privacy.engine import batch as engine_batch
from postcode_privacy.engine import bounds as bounds_module
from postcode_privacy.engine import fast as fast_module
from postcode_privacy.engine import landmarks as engine_landmarks
from postcode_privacy.engine import profiles as engine_profiles
from postcode_privacy.engine import search as compiled
from postcode_privacy.engine.layout import graph_layout, map_layout
from postcode_privacy.engine.search import ShellSearch, _select_by_prior
from postcode_privacy.errors import InputDataError, InvalidParameterError, UnknownPostcodeError
from postcode_privacy.graph.compiled import location_masses
from postcode_privacy.graph.graph import _csr_from_pairs
from postcode_privacy.graph.shells import hop_distances, node_shells
from postcode_privacy.mechanism.subject import canonical_subject_id

EPSILONS = ["0.05", "0.3", "0.7", "1", "2", "4.5"]


def planar_graph(
    rng: random.Random,
    n_locations: int,
    n_nodes: int,
    keep: float,
    max_prior_bits: int,
    with_coordinates: bool = False,
) -> Graph:
    """Delaunay graph of random points, edges kept with probability ``keep`` (so it may fall
    apart), ``n_nodes - n_locations`` extra postcodes sharing points, priors up to 2**bits;
    the points become the locations' coordinates if ``with_coordinates``."""
    points = np.array([[rng.random(), rng.random()] for _ in range(n_locations)])
    pairs = set()
    if n_locations >= 3:
        for simplex in Delaunay(points).simplices.tolist():
            for a, b in ((0, 1), (1, 2), (0, 2)):
                u, v = sorted((simplex[a], simplex[b]))
                pairs.add((u, v))
    elif n_locations == 2:
        pairs.add((0, 1))
    pairs = sorted(p for p in pairs if rng.random() < keep)
    # Every location gets a member; the rest of the postcodes join random locations.  Then
    # renumber locations by first member, as Graph requires.
    assign = list(range(n_locations)) + [
        rng.randrange(n_locations) for _ in range(n_nodes - n_locations)
    ]
    rng.shuffle(assign)
    renumber: dict[int, int] = {}
    for loc in assign:
        renumber.setdefault(loc, len(renumber))
    node_location = np.array([renumber[loc] for loc in assign], dtype=np.int32)
    a = np.array([renumber[u] for u, _ in pairs], dtype=np.int64)
    b = np.array([renumber[v] for _, v in pairs], dtype=np.int64)
    indptr, indices = _csr_from_pairs(n_locations, a, b)
    prior = [
        rng.randrange(1, 2 ** rng.randrange(1, max_prior_bits + 1) + 1) for _ in range(n_nodes)
    ]
    names = [f"P{i:03d}" for i in range(n_nodes)]
    coordinates = None
    if with_coordinates:
        coordinates = np.empty((n_locations, 2))
        for loc, new in renumber.items():
            coordinates[new] = points[loc]
    return Graph(names, node_location, indptr, indices, prior, coordinates)


def random_batch(rng: random.Random, locations: int, nodes: int, epsilon: str, records: int):
    """A planar graph, a mechanism on it, a key, and ``records`` random (identifier, node)."""
    graph = planar_graph(rng, locations, nodes, 1.0, 20)
    mechanism = Mechanism(graph, epsilon)
    key = Key.from_bytes(rng.randbytes(32))
    ids = [str(rng.randrange(10**9)) for _ in range(records)]
    true_nodes = np.array([rng.randrange(len(graph)) for _ in range(records)])
    return graph, mechanism, key, ids, true_nodes


def random_case(rng: random.Random) -> tuple[Mechanism, Key, list, list[str]]:
    n_loc = rng.randrange(1, 45)
    graph = planar_graph(
        rng,
        n_loc,
        n_loc + rng.choice([0, 0, 3, 12]),
        keep=rng.choice([1.0, 1.0, 0.8, 0.45]),
        max_prior_bits=rng.choice([1, 8, 40]),
        with_coordinates=True,  # so that the search's layout along the map renumbers
    )
    radius = rng.choice([1, 2, 3, 5, 8, None])
    eps = rng.choice(EPSILONS if radius is not None else ["1", "2", "4.5"])
    mechanism = Mechanism(graph, eps, radius=radius)  # small radii: TeleportWarning (ignored)
    key = Key.from_bytes(rng.randbytes(32))
    sources = [rng.choice(graph.postcodes) for _ in range(rng.randrange(1, 12))]
    codes = [rng.choice(sources) for _ in range(rng.randrange(20, 60))]  # repeats form groups
    ids = [rng.choice([rng.randrange(10**9), f"s-{rng.randrange(10**6)}"]) for _ in codes]
    return mechanism, key, ids, codes


# -- identity with the reference ---------------------------------------------------------------


@pytest.mark.parametrize("seed", range(8))
def test_engine_equals_reference_on_generated_graphs(seed, monkeypatch):
    # Small profile depths (some below the radius, some beyond it) and small sweep groups, so
    # the profile path meets the depths and group boundaries it meets on the national graph.
    monkeypatch.setattr(engine_profiles, "DEPTH", [0, 1, 2, 4, 9][seed % 5])
    monkeypatch.setattr(ball_sweeps, "WORD", [1, 3, 64][seed % 3])
    # The search's layout along the map (engine/layout.py) for half the seeds, and for some a
    # neighbour buffer so small that _expand gathers each shell in many passes.
    if seed % 2:
        monkeypatch.setattr(engine_batch, "ALONG_MAP_RADIUS", 0)
        monkeypatch.setattr(engine_batch, "ALONG_MAP_SOURCES", 0)
    if seed % 4 >= 2:
        monkeypatch.setattr(compiled, "_EXPAND_BUFFER", 1)
    rng = random.Random(1000 + seed)
    records = 0
    for case in range(30):
        mechanism, key, ids, codes = random_case(rng)
        expected = mechanism.perturb_reference(key, ids, codes)
        for use_landmarks, use_profiles in (
            (False, False),
            (True, False),
            (False, True),
            (True, True),
        ):
            got = perturb_many(
                mechanism,
                key,
                ids,
                codes,
                workers=1,
                landmarks=use_landmarks,
                profiles=use_profiles,
            )
            assert got == expected, (seed, case, use_landmarks, use_profiles)
        records += len(ids)
    assert records > 1000


def test_cases_cover_tail_groups_and_teleport_above_a_tenth():
    """The generated cases reach the rare paths: tail draws, shared groups, big teleport."""
    rng = random.Random(7)
    tails = groups = 0
    high_teleport = False
    for _ in range(40):
        mechanism, key, ids, codes = random_case(rng)
        sampler = FastSampler(mechanism, landmarks=True)
        context = mechanism.stream_context(key)
        by_node: dict[int, list[str]] = {}
        for sid, code in zip(ids, codes):
            by_node.setdefault(mechanism.graph.index_of(code), []).append(canonical_subject_id(sid))
        for node, sids in by_node.items():
            sampler.sample_group(context, node, sids)
            groups += len(sids) > 1
        tails += sampler.stats["tail"]
        high_teleport |= max(mechanism.teleport_probability(c) for c in set(codes)) > 0.1
    assert tails > 20 and groups > 100 and high_teleport


def test_tail_heavy_graphs_match_reference():
    """Teleport probability above 0.1 on a path, a disconnected graph and co-located groups."""
    key = Key.from_bytes(bytes(range(32)))
    cases = [
        (path(30, [1 + i % 4 for i in range(30)]), "0.2", 2, "N10"),
        (disconnected([3, 1, 1, 2, 5, 1, 1, 4]), "0.5", 1, "N00"),
        (colocated([2**40, 1, 7, 3, 2**20, 1, 9, 2, 5]), "0.1", 1, "N06"),
        (colocated([1, 1, 1, 1, 1, 1, 1, 1, 1]), "0.3", 2, "N04"),
    ]
    for graph, eps, radius, source in cases:
        mechanism = Mechanism(graph, eps, radius=radius)
        assert mechanism.teleport_probability(source) > 0.1
        ids = list(range(400))
        codes = [source] * 200 + [graph.postcodes[i % len(graph)] for i in range(200)]
        expected = mechanism.perturb_reference(key, ids, codes)
        assert perturb_many(mechanism, key, ids, codes, workers=1) == expected
        distance = hop_distances(graph, graph.index_of(source), radius)
        tail_draws = sum(int(distance[graph.index_of(o)]) == radius for o in expected[:200])
        assert tail_draws > 20


def test_exact_fallback_when_the_estimate_stops_too_early(monkeypatch):
    """A guide that stops far too soon must cost time only: choose_shell takes over."""
    monkeypatch.setattr(compiled, "_GUIDE_MARGIN", -0.9)
    rng = random.Random(11)
    fallbacks = 0
    for _ in range(12):
        mechanism, key, ids, codes = random_case(rng)
        sampler = FastSampler(mechanism, landmarks=True)
        context = mechanism.stream_context(key)
        expected = mechanism.perturb_reference(key, ids, codes)
        got = [
            mechanism.graph.label(
                sampler.sample_group(
                    context, mechanism.graph.index_of(c), [canonical_subject_id(s)]
                )[0]
            )
            for s, c in zip(ids, codes)
        ]
        assert got == expected
        fallbacks += sampler.stats["fallbacks"]
    assert fallbacks > 50


def test_an_invalid_ball_bound_would_be_caught(monkeypatch):
    """Mutation check: bounds that understate the ball mass change outputs, and the identity
    comparison above detects it (so passing it says something about the real bound)."""

    def off_by_one(self, location, radius):  # squares of half-width j - 1 instead of j
        rows = original(self, location, radius)
        return np.concatenate([rows[:, :1], rows[:, :-1]], axis=1)

    original = engine_landmarks.LandmarkBounds.bounds_for
    monkeypatch.setattr(engine_landmarks.LandmarkBounds, "bounds_for", off_by_one)
    rng = random.Random(5)
    differing = 0
    for _ in range(25):
        mechanism, key, ids, codes = random_case(rng)
        got = perturb_many(mechanism, key, ids, codes, workers=1, landmarks=True)
        differing += got != mechanism.perturb_reference(key, ids, codes)
    assert differing > 0


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("along_map", [False, True])
def test_shell_search_gives_the_reference_shells(seed, along_map, monkeypatch):
    """In either layout (engine/layout.py), and gathering neighbours a location at a time
    (``_EXPAND_BUFFER`` 1: the buffer holds one location's most neighbours) for odd seeds."""
    if seed % 2:
        monkeypatch.setattr(compiled, "_EXPAND_BUFFER", 1)
    rng = random.Random(seed)
    graphs = [
        planar_graph(rng, rng.randrange(1, 40), 50, keep, 40, with_coordinates=True)
        for keep in (1.0, 0.5)
    ]
    graphs += [colocated([1, 5, 2, 2, 9, 1, 3, 4, 1]), disconnected(None), path(9)]
    for graph in graphs:
        depth = 7
        make = map_layout if along_map else graph_layout
        search = ShellSearch(graph, depth, layout=make(graph, location_masses(graph)))
        for source in range(len(graph)):
            reference = node_shells(graph, source, depth - 1)
            search.start(source)
            search.explore_to(depth)
            for h, shell in enumerate(reference):
                assert search.shell_nodes(h).tolist() == shell.tolist()
                assert int(search.masses[h]) == int(graph.prior[shell].sum())
            ball = np.concatenate(reference)
            assert sorted(search.ball().tolist()) == sorted(ball.tolist())
            # resumable: a fresh start explored one shell at a time gives the same masses
            search.start(source)
            for k in range(2, depth + 1):
                search.explore_to(k)
            assert [int(m) for m in search.masses[:depth]] == [
                int(graph.prior[s].sum()) for s in reference
            ]


@pytest.mark.parametrize("seed", range(3))
def test_the_layout_along_the_map_is_the_same_graph_renumbered(seed):
    """``map_layout`` renumbers the locations (a permutation, so the test is not of the
    identity) and keeps every adjacency list, member list, location mass and node's location;
    a graph without coordinates, or with all of them equal, keeps its own numbering."""
    rng = random.Random(40 + seed)
    graph = planar_graph(rng, 60, 90, rng.choice([1.0, 0.6]), 30, with_coordinates=True)
    mass = location_masses(graph)
    layout = map_layout(graph, mass)
    original = layout.original
    assert sorted(original.tolist()) == list(range(graph.n_locations))
    assert original.tolist() != list(range(graph.n_locations))
    number = np.argsort(original)
    for i, loc in enumerate(original.tolist()):
        new = layout.indices[layout.indptr[i] : layout.indptr[i + 1]]
        old = graph.loc_indices[graph.loc_indptr[loc] : graph.loc_indptr[loc + 1]]
        assert original[new].tolist() == old.tolist()  # same neighbours, same order
        members = layout.members_flat[layout.members_indptr[i] : layout.members_indptr[i + 1]]
        old = graph.members_flat[graph.members_indptr[loc] : graph.members_indptr[loc + 1]]
        assert members.tolist() == old.tolist()
        assert int(layout.loc_mass[i]) == int(mass[loc])
    assert layout.node_location.tolist() == number[graph.node_location].tolist()
    assert layout.max_degree == int(np.diff(graph.loc_indptr).max())
    for flat in (planar_graph(rng, 20, 25, 1.0, 5), path(6)):
        assert map_layout(flat, location_masses(flat)).original.tolist() == list(
            range(flat.n_locations)
        )
    base = planar_graph(rng, 20, 25, 1.0, 5)
    same = Graph(
        base.postcodes,
        base.node_location,
        base.loc_indptr,
        base.loc_indices,
        base.prior,
        np.full((base.n_locations, 2), 1.5),
    )
    kept = map_layout(same, location_masses(same))
    assert sorted(kept.original.tolist()) == list(range(same.n_locations))
    # Any finite coordinates, without a warning (warnings are errors here): ranges of 1e308
    # either way, and a subnormal one.
    n = base.n_locations
    wide = np.arange(n) / n * 1.7e308 * np.where(np.arange(n) % 2, 1.0, -1.0)
    for coordinates in (
        np.column_stack([wide, wide[::-1]]),
        np.column_stack([np.arange(n) * 5e-324, np.zeros(n)]),
    ):
        odd = Graph(
            base.postcodes,
            base.node_location,
            base.loc_indptr,
            base.loc_indices,
            base.prior,
            coordinates,
        )
        layout = map_layout(odd, location_masses(odd))
        assert sorted(layout.original.tolist()) == list(range(n))


def test_the_layout_made_in_the_background_is_the_one_the_batch_reads(monkeypatch):
    """``GraphTables.make_layout_in_background`` makes ``map_layout``'s layout, which
    ``search_layout`` then returns (once, the same object every time); a layout that fails in
    the background is made again, and its error reported, by the call that needs it; and
    ``prepare_in_background`` starts it only for a batch that would sort along the map (a
    radius of at least ``ALONG_MAP_RADIUS`` and at least ``ALONG_MAP_SOURCES`` records, or a
    count not yet known)."""
    rng = random.Random(44)
    graph = planar_graph(rng, 60, 90, 1.0, 30, with_coordinates=True)
    made_by = []

    def counted(graph, loc_mass):
        made_by.append(threading.current_thread())
        return map_layout(graph, loc_mass)

    monkeypatch.setattr(engine_landmarks, "map_layout", counted)
    tables = engine_landmarks.graph_tables(graph)
    tables.make_layout_in_background()
    made = tables.search_layout(True)
    assert made_by and made_by[0] is not threading.current_thread()
    expected = map_layout(graph, tables.loc_mass)
    fields = ("indptr", "indices", "loc_mass", "node_location", "members_indptr")
    for field in (*fields, "members_flat", "original"):
        assert np.array_equal(getattr(made, field), getattr(expected, field)), field
    assert made.original.tolist() != list(range(graph.n_locations))  # not the graph's own
    tables.make_layout_in_background()  # made already: nothing more
    assert tables.search_layout(True) is made
    assert len(made_by) == 1  # the batch took the background's layout
    assert tables.search_layout(False).original.tolist() == list(range(graph.n_locations))

    calls = []

    def failing(graph, loc_mass):
        calls.append(graph)
        raise RuntimeError("no layout today")

    monkeypatch.setattr(engine_landmarks, "map_layout", failing)
    other = planar_graph(rng, 40, 60, 1.0, 20, with_coordinates=True)
    tables = engine_landmarks.graph_tables(other)
    tables.make_layout_in_background()
    with pytest.raises(RuntimeError, match="no layout today"):
        tables.search_layout(True)
    assert len(calls) == 2  # the background's try, then the real call's

    monkeypatch.undo()
    radius, sources = engine_batch.ALONG_MAP_RADIUS, engine_batch.ALONG_MAP_SOURCES
    for r, records, starts in [
        (radius, sources, True),
        (radius, None, True),
        (radius, sources - 1, False),
        (radius - 1, sources, False),
        (radius - 1, None, False),
    ]:
        fresh = planar_graph(rng, 30, 40, 1.0, 10, with_coordinates=True)
        engine_batch.prepare_in_background(Mechanism(fresh, "1", radius=r), records)
        tables = engine_landmarks.graph_tables(fresh)
        assert (tables._making is not None) == starts, (r, records)
        if starts:
            tables._making.join()
            assert True in tables._layouts


def test_a_caller_waiting_for_the_tables_lock_takes_the_layout_started_meanwhile(monkeypatch):
    """A thread that asks for the layout along the map while the tables' lock is held, and
    the background layout starts before it gets the lock, waits for that layout rather than
    making its own (found by a review: it made a second one)."""
    made = []

    def counted(graph, loc_mass):
        made.append(threading.current_thread().name)
        time.sleep(0.2)  # the waiting thread has the lock by then
        return map_layout(graph, loc_mass)

    monkeypatch.setattr(engine_landmarks, "map_layout", counted)
    graph = planar_graph(random.Random(45), 40, 60, 1.0, 20, with_coordinates=True)
    tables = engine_landmarks.graph_tables(graph)
    got = []
    with engine_landmarks._LOCK:
        asker = threading.Thread(target=lambda: got.append(tables.search_layout(True)))
        asker.start()
        time.sleep(0.2)  # the asker found no layout and no thread, and waits for the lock
        tables.make_layout_in_background()
    asker.join()
    assert made == ["postcode-privacy-layout"]
    assert got == [tables.search_layout(True)]


def test_pick_follows_cumulative_prior_in_node_order():
    """``pick`` of many requests, of one request and ``pick_one`` (all by selection, without
    sorting the shell) give, for every draw, the node the sorted cumulative rule gives."""
    rng = random.Random(3)
    graph = planar_graph(rng, 30, 60, 1.0, 12)
    search = ShellSearch(graph, 6)
    for source in range(0, len(graph), 5):
        search.start(source)
        search.explore_to(6)
        for h in range(6):
            mass = int(search.masses[h])
            if mass == 0:
                continue
            nodes = node_shells(graph, source, h)[h]
            cumulative = np.cumsum(graph.prior[nodes])
            draws = sorted({0, mass - 1} | {rng.randrange(mass) for _ in range(8)})
            want = [int(nodes[np.searchsorted(cumulative, j, side="right")]) for j in draws]
            assert search.pick(np.full(len(draws), h), np.array(draws)).tolist() == want
            for j, node in zip(draws, want):
                assert search.pick_one(h, j) == node
                assert search.pick(np.array([h]), np.array([j])).tolist() == [node]


@pytest.mark.parametrize("order", ["random", "ascending", "descending", "v"])
def test_selection_by_prior_equals_the_sorted_rule(order):
    """``_select_by_prior`` on shells of every size, zero priors included (a zero-prior node is
    never the answer), node lists in any order (the median-of-three pivot; in "v" order its
    splits are bad enough that the selection gives up and sorts), one draw or many (repeats
    included)."""
    rng = np.random.default_rng(9)
    for size in [1, 2, 3, 5, 17, 64, 301, 2000]:
        nodes = np.sort(rng.choice(10 * size, size, replace=False)).astype(np.int64)
        if order == "random":
            nodes = rng.permutation(nodes)
        elif order == "descending":
            nodes = nodes[::-1].copy()
        elif order == "v":  # descending then ascending: median-of-three pivots split badly
            nodes = np.concatenate([nodes[1::2][::-1], nodes[0::2]])
        prior = np.zeros(10 * size, dtype=np.int64)
        prior[nodes] = rng.integers(0, 4, size)
        prior[nodes[0]] += 1  # a positive mass
        ordered = np.sort(nodes)
        cumulative = np.cumsum(prior[ordered])
        every = np.arange(int(cumulative[-1]), dtype=np.int64)
        want = ordered[np.searchsorted(cumulative, every, side="right")]
        for draw in every.tolist():  # one draw at a time
            got = _select_by_prior(nodes.copy(), prior, every[draw : draw + 1], np.empty(1, int))
            assert got.tolist() == [want[draw]], (size, draw)
        # many at once: every draw, and random sorted draws with repeats
        found = _select_by_prior(nodes.copy(), prior, every, np.empty(every.size, int))
        assert found.tolist() == want.tolist(), size
        some = np.sort(rng.choice(every, 2 * every.size + 1))
        found = _select_by_prior(nodes.copy(), prior, some, np.empty(some.size, int))
        assert found.tolist() == want[some].tolist(), size


@pytest.mark.parametrize("seed", range(3))
def test_landmark_rows_bound_every_ball(seed):
    rng = random.Random(50 + seed)
    for keep in (1.0, 0.6, 0.3):
        graph = planar_graph(rng, 35, 45, keep, 40)
        tables = engine_landmarks.GraphTables(graph)
        bounds = tables.ensure_landmarks()
        radius = 9
        for source in range(len(graph)):
            rows = bounds.bounds_for(int(graph.node_location[source]), radius)
            balls = np.cumsum(
                [int(graph.prior[s].sum()) for s in node_shells(graph, source, radius - 1)]
            )
            for row in rows.tolist():
                assert all(q >= b for q, b in zip(row, balls.tolist()))
                assert row == sorted(row) and row[-1] <= graph.total_prior


def test_landmarks_of_a_freed_graph_are_refused_clearly():
    """The tables hold their graph weakly: once it is gone, building landmarks is a clear error
    (not an AttributeError on None deep inside the build)."""
    import gc

    graph = planar_graph(random.Random(3), 10, 12, 1.0, 5)
    tables = engine_landmarks.GraphTables(graph)
    del graph
    gc.collect()
    with pytest.raises(RuntimeError, match="no longer exists"):
        tables.ensure_landmarks()


# -- batches: determinism, workers, errors -------------------------------------------------------


def test_outputs_do_not_depend_on_workers_or_task_size(monkeypatch):
    n = 5000
    graph, mechanism, key, ids, nodes = random_batch(random.Random(21), 200, 260, "0.7", n)
    base = perturb_nodes(mechanism, key, ids, nodes, workers=1)
    assert np.array_equal(base, perturb_nodes(mechanism, key, ids, nodes, workers=2))
    monkeypatch.setattr(engine_batch, "TASK_RECORDS", 37)
    monkeypatch.setattr(engine_batch, "MAX_GROUP", 5)
    done = []
    again = perturb_nodes(
        mechanism, key, ids, nodes, workers=2, progress=done.append, landmarks=False
    )
    assert np.array_equal(base, again) and sum(done) == n and len(done) > 10
    sample = slice(0, 400)
    expected = mechanism.perturb_reference(
        key, ids[sample], [graph.label(v) for v in nodes[sample]]
    )
    assert [graph.label(v) for v in base[sample]] == expected


def test_tasks_cover_the_records_in_group_pieces_and_shrink_at_the_end(monkeypatch):
    """``batch._tasks``: consecutive ranges covering every sorted record, the first one the
    first group piece alone, every cut between group pieces (a group cut only every
    ``MAX_GROUP`` records), about ``TASK_RECORDS`` records a task, and a quarter of that once
    fewer than ``TAIL_TASKS`` tasks' worth of records (or a quarter of them) are left, so the
    workers finish together."""
    monkeypatch.setattr(engine_batch, "TASK_RECORDS", 40)
    monkeypatch.setattr(engine_batch, "MAX_GROUP", 6)
    rng = np.random.default_rng(4)
    for n in (1, 7, 39, 300, 2000):
        sorted_nodes = np.sort(rng.integers(0, max(2, n // 3), n))
        tasks = engine_batch._tasks(sorted_nodes)
        assert tasks[0][0] == 0 and tasks[-1][1] == n
        assert all(stop == start for (_, stop), (start, _) in zip(tasks, tasks[1:]))
        first_group = int(np.count_nonzero(sorted_nodes == sorted_nodes[0]))
        assert tasks[0][1] == min(first_group, 6)
        group_start = np.flatnonzero(np.r_[True, sorted_nodes[1:] != sorted_nodes[:-1]])
        for _, stop in tasks[:-1]:  # a cut between groups, or a whole MAX_GROUP piece in
            opened = group_start[group_start <= stop].max()
            assert stop == opened or (stop - opened) % 6 == 0
        tail = n - min(engine_batch.TAIL_TASKS * 40, n // 4)
        for start, stop in tasks[1:-1]:
            size = 40 if start < tail else 10
            assert size <= stop - start < size + 6, (n, start, stop)
    # 2,000 distinct postcodes: node 0 alone, tasks of 40 while a task starts before record
    # 2000 - 8 * 40 = 1680 (the last of them from 1641 to 1681), then 31 of 10 and the rest
    sizes = [b - a for a, b in engine_batch._tasks(np.arange(2000))]
    assert sizes == [1] + [40] * 42 + [10] * 31 + [9]


def test_a_batch_keeps_its_order_and_sorted_nodes_narrow_where_they_fit():
    """``batch._narrow``: 32-bit where every number fits (the batch's order and sorted nodes,
    kept until the workers finish), the same numbers either way; 64-bit kept otherwise."""
    small = np.array([0, 7, 2**31 - 1], dtype=np.int64)
    narrowed = engine_batch._narrow(small)
    assert narrowed.dtype == np.int32 and narrowed.tolist() == small.tolist()
    large = np.array([3, 2**31], dtype=np.int64)
    assert engine_batch._narrow(large).dtype == np.int64
    assert engine_batch._narrow(large).tolist() == [3, 2**31]
    assert engine_batch._narrow(np.empty(0, dtype=np.int64)).dtype == np.int32


def test_a_batch_draws_from_its_narrow_order_and_sorted_nodes(monkeypatch):
    """Every task of a batch reads a 32-bit order and 32-bit sorted nodes (the memory the
    national file's peak saves), and the draws are still the reference sampler's."""
    graph, mechanism, key, ids, nodes = random_batch(random.Random(3), 30, 40, "1", 300)
    widths = set()
    run_task = engine_batch._run_task

    def spy(sampler, job, start, stop):
        widths.add((job.order.dtype, job.sorted_nodes.dtype))
        return run_task(sampler, job, start, stop)

    monkeypatch.setattr(engine_batch, "_run_task", spy)
    canonical = [canonical_subject_id(i) for i in ids]
    draws = engine_batch.start_draws(mechanism, key, canonical, nodes, workers=1)
    out = draws.result()
    assert widths == {(np.dtype(np.int32), np.dtype(np.int32))}
    assert draws._order.dtype == np.int32
    expected = mechanism.perturb_reference(key, ids[:80], [graph.label(v) for v in nodes[:80]])
    assert [graph.label(v) for v in out[:80]] == expected


def test_the_distinct_count_is_the_same_by_sorting_or_by_counting():
    """``batch._distinct`` sorts a batch much smaller than the graph and counts records per
    node otherwise; both give the number of distinct nodes, at every size around the switch."""
    rng = np.random.default_rng(8)
    for n_nodes in (1, 2, 17, 1000):
        for size in (1, 2, n_nodes // 16, n_nodes // 16 + 1, n_nodes, 5 * n_nodes):
            if size < 1:
                continue
            nodes = rng.integers(0, n_nodes, size)
            assert engine_batch._distinct(nodes, n_nodes) == np.unique(nodes).size


# Thread B holds the engine's table lock while thread A's batch forks its workers, as a
# batch on another graph does while it builds its tables; a worker that then takes the lock
# waits for ever (it has the lock as it was, held, without the thread holding it).
_FORK_WHILE_LOCKED = """
import random, sys, threading, time
sys.path.insert(0, sys.argv[1])
from test_fast_path import planar_graph
from postcode_privacy import Key, Mechanism
from postcode_privacy.engine import batch, landmarks, perturb_many
batch.ALONG_MAP_RADIUS = batch.ALONG_MAP_SOURCES = 0  # the layout along the map, too
rng = random.Random(0)
graph = planar_graph(rng, 300, 600, 1.0, 10, with_coordinates=True)
mechanism, key = Mechanism(graph, "1"), Key.from_bytes(rng.randbytes(32))
codes = [graph.postcodes[rng.randrange(len(graph))] for _ in range(5000)]
ids = [f"i{i}" for i in range(len(codes))]
held = threading.Event()
def hold():
    with landmarks._LOCK:
        held.set()
        time.sleep(2)
def progress(done):  # called after the parent's first task, before the fork
    if not held.is_set():
        threading.Thread(target=hold, daemon=True).start()
        held.wait()
for use_landmarks in (False, True):
    two = perturb_many(mechanism, key, ids, codes, workers=2, landmarks=use_landmarks,
                       profiles=False, progress=progress)
    held.clear()
    assert two == perturb_many(mechanism, key, ids, codes, workers=1, profiles=False)
print("finished")
"""


@pytest.mark.slow  # two batches with forked workers (about 6 s)
def test_workers_start_while_another_thread_holds_the_tables_lock(tmp_path):
    """Workers take what their parent built (the search's layout, the landmarks) without the
    tables' lock (``GraphTables.search_layout``)."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    tests = str(Path(__file__).resolve().parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen(
        [sys.executable, "-c", _FORK_WHILE_LOCKED, tests],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # so that a hang is stopped with the workers it left
    )
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("the batch hung: a worker waited for the tables' lock")
    assert proc.returncode == 0, err
    assert out.strip() == "finished"


def test_a_group_drawn_with_the_wrong_number_of_outputs_stops_the_batch(monkeypatch):
    """A task joins its groups' outputs in order, so a group with one output too many or too
    few would hand every later record another's: the batch stops instead (found by a
    review: joining alone had let an extra output through)."""
    graph, mechanism, key, ids, nodes = random_batch(random.Random(22), 30, 40, "1", 200)
    base = perturb_nodes(mechanism, key, ids, nodes, workers=1)
    real = FastSampler.sample_group
    target = int(np.sort(nodes)[0])
    for change in (1, -1):

        def miscount(self, context, node, subject_ids, change=change):
            out = real(self, context, node, subject_ids)
            return out + out[:1] if node == target and change > 0 else out[: len(out) + change]

        monkeypatch.setattr(FastSampler, "sample_group", miscount)
        with pytest.raises(RuntimeError, match="do not match"):
            perturb_nodes(mechanism, key, ids, nodes, workers=1, profiles=False)
    monkeypatch.setattr(FastSampler, "sample_group", real)
    assert np.array_equal(base, perturb_nodes(mechanism, key, ids, nodes, workers=1))


def test_core_perturb_many_does_not_use_the_engine(monkeypatch):
    """The core stays free of the engine: Mechanism.perturb_many runs with the engine's entry
    points disabled and still equals the reference."""

    def refuse(*args, **kwargs):
        raise AssertionError("the core called the engine")

    monkeypatch.setattr(engine_batch, "_perturb_canonical", refuse)
    monkeypatch.setattr(engine_batch, "perturb_nodes", refuse)
    mechanism = Mechanism(colocated([1, 5, 2, 2, 9, 1, 3, 4, 1]), "1")
    key = Key.from_bytes(bytes(range(1, 33)))
    codes = ["N00", "N03", "N08"] * 5
    assert mechanism.perturb_many(key, range(15), codes) == mechanism.perturb_reference(
        key, list(range(15)), codes
    )


def test_public_perturb_nodes_canonicalises_identifiers_like_perturb():
    """engine.perturb_nodes is public, so it canonicalises identifiers as Mechanism.perturb
    does (numbers, floats holding integers, NFC and surrounding spaces) and refuses bad ones
    by position without echoing them."""
    graph = colocated([1, 5, 2, 2, 9, 1, 3, 4, 1])
    mechanism = Mechanism(graph, "1")
    key = Key.from_bytes(bytes(range(32)))
    ids = [7, 7.0, " 7 ", "Cafe\u0301", "Caf\u00e9", np.int64(12)]
    nodes = [3] * len(ids)
    got = [graph.label(y) for y in perturb_nodes(mechanism, key, ids, nodes, workers=1)]
    assert got == [mechanism.perturb(key, s, graph.label(3)) for s in ids]
    assert got[0] == got[1] == got[2] and got[3] == got[4]
    with pytest.raises(InputDataError) as caught:
        perturb_nodes(mechanism, key, ["ok", 2.5, "secret-value-x"[:0]], [1, 1, 1], workers=1)
    assert "2.5" not in str(caught.value) and caught.value.args


def test_batch_errors_name_positions_not_values():
    mechanism = Mechanism(path(6), "1")
    key = Key.from_bytes(bytes(range(1, 33)))
    with pytest.raises(UnknownPostcodeError) as unknown:
        perturb_many(mechanism, key, [1, 2, 3], ["N01", "SW1A 1AA", "N02"])
    assert "position 1" in str(unknown.value) and "SW1A" not in str(unknown.value)
    with pytest.raises(InputDataError) as bad_ids:
        perturb_many(mechanism, key, ["a", "  ", None], ["N01", "N02", "N03"])
    assert [row for row, _ in bad_ids.value.row_errors] == [1, 2]
    with pytest.raises(InvalidParameterError):
        perturb_many(mechanism, key, [1, 2], ["N01"])
    with pytest.raises(InvalidParameterError):
        perturb_many(mechanism, key, [1], ["N01"], workers=0)
    assert perturb_many(mechanism, key, [], []) == []


# -- the national graph ------------------------------------------------------------------------


def test_national_sample_equals_reference(national_graph):
    graph = national_graph
    rng = np.random.default_rng(2024)
    key = Key.from_bytes(bytes(range(32, 64)))
    for eps, count in (("2", 160), ("1", 45), ("0.5", 3)):
        mechanism = Mechanism(graph, eps)
        nodes = rng.choice(len(graph), count, replace=False).tolist()
        codes = [graph.label(v) for v in nodes]
        if eps == "2":
            codes += [codes[0]] * 6  # a group sharing one exploration
        ids = [f"subject-{i}" for i in range(len(codes))]
        expected = mechanism.perturb_reference(key, ids, codes)
        assert perturb_many(mechanism, key, ids, codes, workers=1, landmarks=True) == expected
        if eps == "2":
            assert perturb_many(mechanism, key, ids, codes, workers=1, landmarks=False) == expected
        with pytest.MonkeyPatch.context() as patch:  # the search along the map, for any batch
            patch.setattr(engine_batch, "ALONG_MAP_RADIUS", 0)
            patch.setattr(engine_batch, "ALONG_MAP_SOURCES", 0)
            assert perturb_many(mechanism, key, ids, codes, workers=1) == expected


def test_first_blocks_equal_the_stream_blocks():
    """The engine's batched first blocks (as integers, or joined bytes for engine/alone.py)
    are the core stream's block (label, 0, 0), and its single blocks (``block_int``) the core stream's block (label, 0, counter)."""
    from postcode_privacy.mechanism.sampler import MEMBER, SHELL, TAIL

    mechanism = Mechanism(path(5), "1")
    context = mechanism.stream_context(Key.from_bytes(bytes(range(32))))
    ids = ["a", "x" * 300, "Zoë", "\u212b", "42", " "]
    for postcode in ("AB1 2CD", "ÉÉ"):
        got = context.first_blocks(ids, postcode, (SHELL, MEMBER, TAIL))
        for j, label in enumerate((SHELL, MEMBER, TAIL)):
            want = [
                int.from_bytes(context.for_subject(s, postcode).block(label, 0, 0), "big")
                for s in ids
            ]
            assert got[j] == want
            assert [context.first_blocks_of(s, postcode, (label,))[0] for s in ids] == want
            (joined,) = context.first_block_bytes(ids, [postcode] * len(ids), (label,))
            assert [
                int.from_bytes(joined[32 * r : 32 * r + 32], "big") for r in range(len(ids))
            ] == want
            for counter in (0, 1, 7):
                assert [context.block_int(s, postcode, label, counter) for s in ids] == [
                    int.from_bytes(context.for_subject(s, postcode).block(label, 0, counter), "big")
                    for s in ids
                ]


def test_decide_all_equals_decide_one_shell_at_a_time():
    """The bisection decides exactly as ``_decide``, including U next to a boundary."""
    from postcode_privacy.mechanism.stream import LazyUniform

    class Fixed(LazyUniform):
        def __init__(self, u):
            self.u, self.blocks = u, 1

    class Walk:
        def __init__(self, cumulative):
            self.cumulative = cumulative

        @property
        def depth(self):
            return len(self.cumulative)

    rng = random.Random(7)
    top = 1 << 256
    checked = {None: 0, "shell": 0, "tail": 0}
    for _ in range(3000):
        radius = rng.randint(1, 6)
        depth = rng.randint(1, radius)
        weights = [rng.choice([0, 1, rng.randrange(1, 2**20)]) for _ in range(depth)]
        cumulative = list(np.cumsum(weights).tolist())
        cumulative[0] = max(cumulative[0], 1)
        cumulative = [max(c, cumulative[0]) for c in cumulative]
        z_low = cumulative[-1] + rng.randrange(0, 2**18)
        z_high = z_low if depth == radius else z_low + rng.choice([0, 1, rng.randrange(2**18)])
        us = [rng.randrange(top)]
        for c in cumulative:  # U placed exactly at and around each boundary C_i / Z
            for z in (z_low, z_high):
                edge = (c * top) // z
                us += [max(0, min(top - 1, edge + d)) for d in (-1, 0, 1)]
        shells, undecided = bounds_module.decide_all(cumulative, us, z_low, z_high, radius)
        assert undecided == sorted(set(undecided))
        got = [None if r in undecided else h for r, h in enumerate(shells)]
        assert all(shells[r] == bounds_module.UNDECIDED for r in undecided)
        for u, g in zip(us, got):
            want = bounds_module.decide_one(Walk(cumulative), Fixed(u), z_low, z_high, radius)
            assert g == want
            checked[None if want is None else ("tail" if want == radius else "shell")] += 1
    assert all(checked.values())  # undecided, shell and tail answers all exercised


def _in_batches(mechanism, key, ids, nodes, brackets, size, workers=1):
    canonical = [canonical_subject_id(s) for s in ids]
    parts = [
        engine_batch._perturb_canonical(
            mechanism,
            key,
            canonical[i : i + size],
            nodes[i : i + size],
            workers=workers,
            brackets=brackets,
        )
        for i in range(0, len(ids), size)
    ]
    return np.concatenate(parts)


@pytest.mark.parametrize("seed", range(3))
def test_brackets_kept_across_batches_give_the_reference_outputs(seed, monkeypatch):
    """A postcode seen again in a later batch is decided from the kept bounds on Z."""
    monkeypatch.setattr(fast_module, "BRACKET_MIN_RECORDS", 2)
    rng = random.Random(300 + seed)
    counting: list[int] = []
    original = FastSampler.sample_group

    def counted(self, context, node, subject_ids):
        before = self.stats["bracket_hits"]
        out = original(self, context, node, subject_ids)
        counting.append(self.stats["bracket_hits"] - before)  # records decided from a bracket
        return out

    monkeypatch.setattr(FastSampler, "sample_group", counted)
    for _ in range(12):
        mechanism, key, ids, codes = random_case(rng)
        ids, codes = ids * 4, codes * 4  # the same sources in every batch
        ids = [f"{s}-{i}" for i, s in enumerate(ids)]
        nodes = np.array([mechanism.graph.index_of(c) for c in codes])
        expected = mechanism.perturb_reference(key, ids, codes)
        got = _in_batches(mechanism, key, ids, nodes, {}, 25)
        assert [mechanism.graph.label(v) for v in got.tolist()] == expected
    assert sum(counting) > 50


def test_brackets_from_worker_processes_are_kept(monkeypatch):
    monkeypatch.setattr(engine_batch, "PARALLEL_MIN", 10)
    monkeypatch.setattr(engine_batch, "TASK_RECORDS", 40)
    rng = random.Random(5)
    graph = planar_graph(rng, 150, 180, 1.0, 20)
    mechanism = Mechanism(graph, "0.7")
    key = Key.from_bytes(rng.randbytes(32))
    sources = rng.sample(range(len(graph)), 12)
    nodes = np.array([sources[i % 12] for i in range(1200)])
    ids = [f"w{i}" for i in range(1200)]
    brackets: dict = {}
    first = _in_batches(mechanism, key, ids, nodes, brackets, 600, workers=2)
    assert len(brackets) == 12  # kept by the parent and handed back by the workers
    expected = mechanism.perturb_reference(key, ids[:300], [graph.label(v) for v in nodes[:300]])
    assert [graph.label(v) for v in first[:300].tolist()] == expected
    assert np.array_equal(first, perturb_nodes(mechanism, key, ids, nodes, workers=1))


def test_a_wrong_kept_bracket_would_be_caught():
    """Mutation check: a bracket whose z_high is too small changes outputs, so the identity
    tests above would notice an unsound bracket."""
    rng = random.Random(9)
    graph = planar_graph(rng, 120, 140, 1.0, 8)
    mechanism = Mechanism(graph, "1")
    key = Key.from_bytes(rng.randbytes(32))
    nodes = np.array([3] * 400)
    ids = [f"m{i}" for i in range(400)]
    brackets: dict = {}
    good = _in_batches(mechanism, key, ids, nodes, brackets, 200)
    cumulative, z_low, z_high = brackets[3]
    brackets[3] = fast_module.Bracket(cumulative, z_low // 3, z_high // 3)
    bad = _in_batches(mechanism, key, ids, nodes, brackets, 200)
    assert not np.array_equal(good, bad)
