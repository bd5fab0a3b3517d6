"""The sampler draws from exactly K(x) (docs/methods.md, "Two-stage sampling").

Distribution tests at the fixed level 1e-6; the lazy procedure is checked against the full-ball
reference for identity, not similarity.
"""

from __future__ import annotations

import random

import pytest
from graphs import colocated, cycle, disconnected, grid, path, random_graph, spanning_prior
from stats_helpers import ALPHA, chi_square_pvalue

from postcode_privacy import Key, Mechanism

KEY = Key.from_bytes(bytes(range(32)))


@pytest.mark.parametrize(
    "factory,eps,radius,source",
    [
        (lambda: grid(4, 4, [1 + (i % 5) * 3 for i in range(16)]), "1", None, "N05"),
        (lambda: colocated([1, 5, 2, 2, 9, 1, 3, 4, 1]), "0.8", 3, "N00"),
        (lambda: path(12), "1.5", 4, "N03"),
    ],
)
def test_frequencies_match_the_exact_distribution(factory, eps, radius, source):
    graph = factory()
    m = Mechanism(graph, eps, radius=radius)
    n = 12_000
    outputs = m.perturb_many(KEY, range(n), [source] * n)
    assert chi_square_pvalue(outputs, graph.postcodes, m.probabilities(source)) > ALPHA


def test_tail_path_is_exercised_and_exact():
    """Teleport probability above 0.1: the rejection-sampled tail must match K(x) too."""
    graph = path(40)
    m = Mechanism(graph, "0.2", radius=3)
    source = "N10"
    assert m.teleport_probability(source) > 0.1
    n = 12_000
    outputs = m.perturb_many(KEY, range(n), [source] * n)
    far = {y for y in graph.postcodes if abs(int(y[1:]) - 10) >= 3}
    assert sum(o in far for o in outputs) > 0.1 * n
    assert chi_square_pvalue(outputs, graph.postcodes, m.probabilities(source)) > ALPHA


def test_disconnected_graph_reaches_other_components_through_the_tail():
    graph = disconnected([3, 1, 1, 2, 5, 1, 1, 4])
    m = Mechanism(graph, "0.5", radius=2)
    n = 12_000
    outputs = m.perturb_many(KEY, range(n), ["N00"] * n)
    assert {"N04", "N05", "N06", "N07"} & set(outputs)
    assert chi_square_pvalue(outputs, graph.postcodes, m.probabilities("N00")) > ALPHA


@pytest.mark.parametrize("seed", range(6))
def test_lazy_equals_full_ball_reference(seed):
    rng = random.Random(seed)
    factories = [
        lambda pr: random_graph(14, 0.2, seed, pr),
        lambda pr: cycle(14, pr[:14]),
        lambda pr: colocated(pr[:9]),
        lambda pr: disconnected(pr[:8]),
    ]
    for _ in range(25):
        prior = spanning_prior(14, rng.randrange(10**6)) if rng.random() < 0.5 else [1] * 14
        graph = rng.choice(factories)(prior)
        eps = rng.choice(["0.05", "0.3", "1", "2", "4.5"])
        radius = rng.choice([1, 2, 3, 6, None])
        m = Mechanism(graph, eps, radius=radius)
        key = Key.from_bytes(rng.randbytes(32))
        ids = [rng.randrange(10**9) for _ in range(20)]
        codes = [rng.choice(graph.postcodes) for _ in ids]
        assert m.perturb_many(key, ids, codes) == m.perturb_reference(key, ids, codes)


def test_outputs_are_nodes_and_inputs_normalised():
    m = Mechanism(path(5), "1")
    assert m.perturb(KEY, 1, "N02") in set(m.graph.postcodes)
    from postcode_privacy import Graph

    g = Graph.from_edges(["LS1 1AA", "LS1 1AB"], [("LS1 1AA", "LS1 1AB")])
    m2 = Mechanism(g, "1")
    assert m2.perturb(KEY, "7", "ls11aa") == m2.perturb(KEY, 7, "LS1 1AA")
