"""The evaluation's exact distributions agree with the mechanism's own exact weights.

Reference values come from ``Mechanism.weights``/``probabilities`` (Python BFS over every node)
and from brute-force sums over nodes; the code under test works per location with a compiled
search and closed-form tails, so agreement checks the decomposition, not a restatement of it.
"""

from __future__ import annotations

from fractions import Fraction

import graphs
import numpy as np
import pytest
from test_evaluate_graphs import postcode_graph

from postcode_privacy import Mechanism
from postcode_privacy.engine.sweep import LocationSearch
from postcode_privacy.errors import GraphError
from postcode_privacy.evaluate.exact import ExactMechanism
from postcode_privacy.graph.shells import location_shells


def _mechanism(graph, epsilon, radius):
    return Mechanism(graph, epsilon, radius)


@pytest.fixture(scope="module")
def geo():
    return postcode_graph(90, seed=11, colocated=8)


def test_ball_matches_reference_shells(geo):
    graph, _ = geo
    search = LocationSearch(graph)
    for source in (0, 17, 42, graph.n_locations - 1):
        for max_hops in (0, 1, 3, 50):
            locs, hops = search.ball(source, max_hops)
            shells = location_shells(graph, source, max_hops)
            expected = {int(v): h for h, shell in enumerate(shells) for v in shell}
            assert dict(zip(locs.tolist(), hops.tolist())) == expected
            assert locs[0] == source


def test_ball_on_disconnected_graph_stops_at_component():
    graph = graphs.disconnected()
    locs, hops = LocationSearch(graph).ball(0, 20)
    assert sorted(locs.tolist()) == [0, 1, 2, 3]
    assert sorted(hops.tolist()) == [0, 1, 2, 3]


@pytest.mark.parametrize("words", [1, 2])
def test_shell_masses_single_and_batched_agree(geo, monkeypatch, words):
    from postcode_privacy.engine import sweep as _search

    monkeypatch.setattr(_search, "WORDS", words)
    graph, _ = geo
    search = LocationSearch(graph)
    mass = np.arange(1, graph.n_locations + 1, dtype=np.int64) ** 3
    # more than 64 sources (several sweeps, or bits in two words), with repeats, in no order
    sources = [5, 3, 5, 80, 0] + list(range(graph.n_locations - 1, 10, -1))
    for max_hops in (0, 2, 7):
        single = np.array([search.shell_masses(s, max_hops, mass) for s in sources])
        batched = search.shell_masses_many(sources, max_hops, mass)
        assert np.array_equal(single, batched)
        for s, row in zip(sources, single):
            shells = location_shells(graph, s, max_hops)
            assert row.tolist() == [int(mass[sh].sum()) for sh in shells]


CASES = [("1", None), ("0.3", 3), ("2", 1), ("0.5", 2), ("0.05", None)]


@pytest.mark.parametrize("epsilon,radius", CASES)
def test_exact_distribution_matches_mechanism(geo, epsilon, radius):
    graph, _ = geo
    mechanism = _mechanism(graph, epsilon, radius)
    exact = ExactMechanism(mechanism)
    coords = graph.location_coordinates[graph.node_location]
    for x in range(0, len(graph), 7):
        label = graph.label(x)
        weights = mechanism.weights(label)
        probs = mechanism.probabilities(label)
        dist = exact.distribution(x)
        assert dist.normaliser == sum(weights)
        assert exact.normaliser(x) == dist.normaliser
        assert exact.self_probability(dist) == probs[x]
        assert exact.teleport_probability(dist) == mechanism.teleport_probability(label)
        for y in range(0, len(graph), 5):
            assert exact.probability(x, y) == probs[y]
        # expectation: brute force over nodes with millimetre-rounded distances
        mm = np.rint(np.hypot(*(coords - coords[x]).T) * 1000).astype(np.int64)
        expected = sum(p * int(v) for p, v in zip(probs, mm.tolist())) / 1000
        assert exact.expected_displacement_m(dist) == expected
        # per-location probabilities (floats for plotting) sum the exact node probabilities
        per_loc = np.zeros(graph.n_locations)
        np.add.at(per_loc, graph.node_location, [float(p) for p in probs])
        assert np.allclose(
            exact.location_probabilities_everywhere(dist), per_loc, rtol=1e-12, atol=1e-300
        )
        ball_probs = exact.location_probabilities(dist)
        assert np.allclose(ball_probs, per_loc[dist.locations], rtol=1e-12, atol=1e-300)


def test_same_area_probability_matches_brute_force(geo):
    graph, laua = geo
    codes = np.array([0 if v == "E0001" else 1 for v in laua])
    codes[3] = -1
    area_mass = np.array([int(graph.prior[codes == c].sum()) for c in (0, 1)])
    for epsilon, radius in (("0.7", None), ("1.5", 1), ("0.4", 4)):
        mechanism = _mechanism(graph, epsilon, radius)
        exact = ExactMechanism(mechanism)
        for x in range(0, len(graph), 4):
            dist = exact.distribution(x)
            got = exact.same_area_probability(dist, codes, area_mass)
            if codes[x] < 0:
                assert got is None
                continue
            probs = mechanism.probabilities(graph.label(x))
            assert got == sum((p for p, c in zip(probs, codes) if c == codes[x]), Fraction(0))


def test_histogram_carries_all_probability(geo):
    graph, _ = geo
    exact = ExactMechanism(_mechanism(graph, "1", None))
    hist = np.zeros(int(exact.max_distance_m()) + 2)
    dist = exact.distribution(10)
    exact.add_displacement_histogram(dist, hist)
    assert hist.sum() == pytest.approx(1.0, abs=1e-12)
    assert hist[0] >= float(exact.self_probability(dist))


def test_colocated_graph_node_hops():
    graph = graphs.colocated([3, 1, 4, 1, 5, 9, 2, 6, 5])
    for radius in (1, 2, 4):
        mechanism = _mechanism(graph, "0.8", radius)
        exact = ExactMechanism(mechanism)
        for x in range(len(graph)):
            probs = mechanism.probabilities(graph.label(x))
            assert [exact.probability(x, y) for y in range(len(graph))] == probs
            dist = exact.distribution(x)
            nodes, hops = exact.ball_nodes(dist)
            assert sorted(nodes.tolist()) == [
                y for y in range(len(graph)) if exact.node_hops(x, [y])[0] < radius
            ]


def test_no_coordinates_is_a_graph_error():
    exact = ExactMechanism(Mechanism(graphs.path(5), "1"))
    with pytest.raises(GraphError):
        exact.expected_displacement_m(exact.distribution(0))
