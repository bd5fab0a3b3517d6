"""``evaluate``: utility, the Bayesian adversary, key compromise, truncation, the whole run, CLI.

Each measure is checked against a brute-force computation from ``Mechanism.probabilities`` /
``Mechanism.perturb`` on small graphs, never against numbers written into the test.
"""

from __future__ import annotations

import json
from fractions import Fraction

import graphs
import numpy as np
import pytest
from test_evaluate_graphs import postcode_graph

from postcode_privacy import Key, Mechanism
from postcode_privacy.cli import main
from postcode_privacy.errors import PostcodePrivacyError
from postcode_privacy.evaluate import (
    evaluate_release,
    evaluation_keys,
    measure_utility,
    select_sample,
)
from postcode_privacy.evaluate.adversary import distinct_draws, posterior_outcome
from postcode_privacy.evaluate.compromise import key_compromise
from postcode_privacy.evaluate.exact import ExactMechanism
from postcode_privacy.evaluate.run import area_codes
from postcode_privacy.evaluate.truncation import group_codes, truncation_baseline


@pytest.fixture(scope="module")
def geo():
    return postcode_graph(160, seed=21, colocated=6)


def _distances(graph, x):
    coords = graph.location_coordinates[graph.node_location]
    return np.hypot(*(coords - coords[x]).T)


# -- utility --------------------------------------------------------------------------------------


def test_utility_quantiles_match_exact_mixture(geo):
    graph, laua = geo
    mechanism = Mechanism(graph, "0.6")
    nodes = [3, 40, 77, 150]
    areas = area_codes(graph, laua)
    summary = measure_utility(ExactMechanism(mechanism), nodes, areas.codes, areas.mass)
    # brute force: exact mixture over whole metres
    cdf: dict[int, Fraction] = {}
    same = []
    for x in nodes:
        probs = mechanism.probabilities(graph.label(x))
        for p, d in zip(probs, _distances(graph, x).astype(np.int64).tolist()):
            cdf[d] = cdf.get(d, Fraction(0)) + p / len(nodes)
        same.append(sum((p for p, v in zip(probs, laua) if v == laua[x]), Fraction(0)))

    def quantile(q):
        total = Fraction(0)
        for d in sorted(cdf):
            total += cdf[d]
            if total >= q:
                return d

    assert summary.median_displacement_km == quantile(Fraction(1, 2)) / 1000
    assert summary.p95_displacement_km == quantile(Fraction(95, 100)) / 1000
    selfs = [mechanism.probabilities(graph.label(x))[x] for x in nodes]
    assert summary.max_self_probability == float(max(selfs))
    assert summary.same_area_share == pytest.approx(float(sum(same) / len(same)), rel=1e-12)
    assert [r.self_probability for r in summary.per_postcode] == selfs


def test_utility_moves_with_epsilon(geo):
    graph, _ = geo
    nodes = select_sample(graph, 12, seed=4)
    loose = measure_utility(ExactMechanism(Mechanism(graph, "0.2")), nodes)
    tight = measure_utility(ExactMechanism(Mechanism(graph, "3")), nodes)
    assert loose.median_displacement_km > tight.median_displacement_km
    assert loose.max_self_probability < tight.max_self_probability


# -- adversary ------------------------------------------------------------------------------------


def _brute_posterior(mechanism, graph, truth, outputs):
    """Exact posterior over every node: prior times the product of K(x')(y)."""
    post = []
    for c in range(len(graph)):
        probs = mechanism.probabilities(graph.label(c))
        value = Fraction(int(graph.prior[c]))
        for y in outputs:
            value *= probs[y]
        post.append(value)
    total = sum(post)
    return [p / total for p in post]


@pytest.mark.parametrize("prior", [[3, 1, 4, 1, 5, 9, 2, 6, 5], None])
@pytest.mark.parametrize("outputs", [[5], [5, 8], [0, 0, 2], [7], [0, 1]])
def test_posterior_over_whole_graph_matches_brute_force(outputs, prior):
    # with the uniform prior, co-located postcodes tie: identification then scores 1/t
    graph = graphs.colocated(prior)
    mechanism = Mechanism(graph, "0.9", 3)
    exact = ExactMechanism(mechanism)
    for truth in range(len(graph)):
        post = _brute_posterior(mechanism, graph, truth, outputs)
        outcome = posterior_outcome(exact, truth, outputs, hops=10)  # covers the whole graph
        greater = sum(1 for p in post if p > post[truth])
        tied = sum(1 for p in post if p == post[truth])
        assert outcome.rank == greater + Fraction(tied + 1, 2)
        assert outcome.identified == (Fraction(1, tied) if greater == 0 else 0)
        assert outcome.posterior == pytest.approx(float(post[truth]), rel=1e-12)
        assert outcome.candidates == len(graph)


def test_restricted_candidate_set_only_helps_the_adversary(geo):
    graph, _ = geo
    mechanism = Mechanism(graph, "0.8")
    exact = ExactMechanism(mechanism)
    key = Key.from_bytes(bytes(range(32)))
    for truth in (2, 60, 120):
        y = graph.index_of(mechanism.perturb(key, "s", graph.label(truth)))
        small = posterior_outcome(exact, truth, [y], hops=1)
        full = posterior_outcome(exact, truth, [y], hops=200)
        assert full.candidates == len(graph) > small.candidates
        assert small.rank <= full.rank
        assert small.posterior >= full.posterior
        assert small.identified >= full.identified


def test_distinct_draws_counts_keyed_repeats_once_and_detects_disagreement():
    assert distinct_draws([("k0", 4), ("k0", 4), ("k1", 7), ("k0", 4)]) == [4, 7]
    with pytest.raises(PostcodePrivacyError, match="keyed determinism is broken"):
        distinct_draws([("k0", 4), ("k0", 5)])


# -- key compromise --------------------------------------------------------------------------------


def test_collision_counts_match_brute_force(geo):
    graph, _ = geo
    mechanism = Mechanism(graph, "1.2")
    exact = ExactMechanism(mechanism)
    key = Key.from_bytes(b"k" * 32)
    truths = [1, 30, 64, 99, 140]
    subjects = [f"p{i}" for i in range(len(truths))]
    outputs = [
        graph.index_of(mechanism.perturb(key, s, graph.label(t))) for s, t in zip(subjects, truths)
    ]
    summary = key_compromise(exact, key, subjects, truths, outputs, hops=3)
    expected = []
    for s, t, y in zip(subjects, truths, outputs):
        near = {c for c in range(len(graph)) if c != t and exact.node_hops(y, [c])[0] <= 3}
        expected.append(
            sum(1 for c in near if mechanism.perturb(key, s, graph.label(c)) == graph.label(y))
        )
    hist: dict[int, int] = {}
    for c in expected:
        hist[c] = hist.get(c, 0) + 1
    assert summary.histogram == hist
    assert summary.max_collisions == max(expected)
    assert summary.mean_collisions == pytest.approx(sum(expected) / len(expected))


# -- truncation ------------------------------------------------------------------------------------


def test_truncation_matches_hand_computation(geo):
    graph, laua = geo
    areas = area_codes(graph, laua)
    nodes = [0, 33, 81, 159]
    for level, cut in (("sector", lambda p: p[:-2]), ("district", lambda p: p.split(" ")[0])):
        summary = truncation_baseline(graph, nodes, level, areas.codes)
        labels = graph.postcodes
        coords = graph.location_coordinates[graph.node_location]
        disp, post, ident, ranks, same = [], [], [], [], []
        for x in nodes:
            members = [i for i, p in enumerate(labels) if cut(p) == cut(labels[x])]
            pri = graph.prior[members].astype(float)
            centre = (coords[members] * pri[:, None]).sum(axis=0) / pri.sum()
            disp.append(float(np.hypot(*(coords[x] - centre))))
            total = int(graph.prior[members].sum())
            post.append(Fraction(int(graph.prior[x]), total))
            greater = sum(1 for m in members if graph.prior[m] > graph.prior[x])
            tied = sum(1 for m in members if graph.prior[m] == graph.prior[x])
            ranks.append(greater + (tied + 1) / 2)
            ident.append(Fraction(1, tied) if greater == 0 else Fraction(0))
            same.append(
                Fraction(int(sum(graph.prior[m] for m in members if laua[m] == laua[x])), total)
            )
        assert summary.median_displacement_km == pytest.approx(sorted(disp)[1] / 1000)
        assert summary.p95_displacement_km == pytest.approx(max(disp) / 1000)
        assert summary.median_posterior == pytest.approx(float(np.median([float(p) for p in post])))
        assert summary.identification_rate == pytest.approx(float(sum(ident) / len(nodes)))
        assert summary.median_rank == np.median(ranks)
        assert summary.same_area_share == pytest.approx(float(sum(same) / len(same)))


def test_truncation_needs_postcode_labels():
    graph = graphs.colocated()
    assert group_codes(graph, "sector") is None
    assert truncation_baseline(graph, [0, 1], "sector") is None


# -- the whole run ---------------------------------------------------------------------------------


def test_sample_is_seeded_distinct_and_follows_the_prior():
    prior = [1] * 50 + [10**9]
    graph = graphs.path(51, prior)
    a = select_sample(graph, 5, seed=1)
    assert np.array_equal(a, select_sample(graph, 5, seed=1))
    assert len(set(a.tolist())) == 5 and 50 in a.tolist()
    assert len(select_sample(graph, 500, seed=1)) == 51
    keys = evaluation_keys(3, 4)
    assert len({k.fingerprint for k in keys}) == 4
    assert [k.fingerprint for k in evaluation_keys(3, 4)] == [k.fingerprint for k in keys]


def test_evaluate_release_is_reproducible_and_keyed_equals_one(geo):
    graph, laua = geo
    kwargs = dict(sample=10, releases=4, seed=7, laua=laua, match_truncation=False)
    first = evaluate_release(graph, "1", **kwargs)
    assert first == evaluate_release(graph, "1", **kwargs)
    assert first["format"] == "postcode-privacy-evaluation" and first["format_version"] == 2
    assert first["graph_sha256"] == graph.sha256
    adv = first["adversary"]
    assert adv["keyed_releases"] == adv["one_release"]
    assert adv["independent_draws"]["median_candidates"] >= adv["one_release"]["median_candidates"]
    assert set(first["truncation"]) == {"sector", "district"}
    assert first["utility"]["same_local_authority_share"] is not None
    other = evaluate_release(graph, "1", **{**kwargs, "seed": 8})
    assert other["utility"] != first["utility"]


def test_independent_draws_leak_more_than_keyed_releases():
    graph, laua = postcode_graph(200, seed=2, colocated=0)
    result = evaluate_release(
        graph, "2", sample=25, releases=12, seed=1, laua=laua, match_truncation=False
    )
    adv = result["adversary"]
    assert adv["independent_draws"]["identified"] > adv["keyed_releases"]["identified"]
    assert adv["independent_draws"]["median_posterior"] > adv["keyed_releases"]["median_posterior"]


def test_keyed_determinism_failure_is_detected(geo, monkeypatch):
    graph, laua = geo
    from postcode_privacy.evaluate import run

    calls = {"n": 0}
    real = run.perturb_nodes

    def flaky(mechanism, key, subjects, nodes):
        calls["n"] += 1
        out = real(mechanism, key, subjects, nodes)
        if calls["n"] == 2:  # the second keyed run: move one output
            out = out.copy()
            out[0] = (out[0] + 1) % len(graph)
        return out

    monkeypatch.setattr(run, "perturb_nodes", flaky)
    with pytest.raises(PostcodePrivacyError, match="determinism"):
        evaluate_release(
            graph, "1", sample=3, releases=3, seed=0, laua=laua, match_truncation=False
        )


def test_evaluate_notes_what_it_skips():
    graph = graphs.colocated()
    result = evaluate_release(graph, "1", sample=4, releases=2, laua=[None] * len(graph))
    assert result["truncation"] == {}
    assert result["utility"]["same_local_authority_share"] is None
    assert any("local authority" in n for n in result["notes"])
    assert any("sector truncation skipped" in n for n in result["notes"])


def test_matching_epsilon_has_the_truncations_utility(geo):
    graph, laua = geo
    result = evaluate_release(graph, "1", sample=8, releases=2, seed=3, laua=laua)
    nodes = select_sample(graph, 8, 3)
    for level, entry in result["truncation"].items():
        eps = entry["matching_epsilon"]
        assert eps is not None, level
        got = measure_utility(ExactMechanism(Mechanism(graph, eps)), nodes)
        assert got.median_displacement_km <= entry["median_displacement_km"]


@pytest.fixture
def no_directory(monkeypatch):
    """Keep CLI tests fast: no bundled ONS directory (the run then notes the skipped measure)."""
    from postcode_privacy.errors import SourceDataError
    from postcode_privacy.sources import directory

    def unavailable(postcodes):
        raise SourceDataError("not in this test")

    monkeypatch.setattr(directory, "bundled_laua", unavailable)


def test_cli_evaluate_json(geo, tmp_path, no_directory):
    graph, _ = geo
    path = tmp_path / "g.ppg"
    graph.save(path)
    out = tmp_path / "eval.json"
    code = main(
        [
            "evaluate",
            "--epsilon",
            "1.5",
            "--graph",
            str(path),
            "--sample",
            "5",
            "--releases",
            "2",
            "--no-matching-epsilon",
            "-o",
            str(out),
            "-q",
        ]
    )
    assert code == 0
    data = json.loads(out.read_text())
    assert data["epsilon"] == "1.5" and data["sample_size"] == 5
    assert data["graph_sha256"] == graph.sha256
    assert any("local authority" in n for n in data["notes"])
    assert not list(tmp_path.glob(".*.tmp"))


def test_cli_evaluate_text_and_bad_epsilon(geo, tmp_path, capsys, no_directory):
    graph, _ = geo
    path = tmp_path / "g.ppg"
    graph.save(path)
    assert main(["evaluate", "--epsilon", "0", "--graph", str(path)]) == 8
    assert (
        main(
            [
                "evaluate",
                "--epsilon",
                "2",
                "--graph",
                str(path),
                "--sample",
                "4",
                "--releases",
                "2",
                "--no-matching-epsilon",
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert (
        "Bayesian adversary" in text and "keyed releases" in text and "truncation to sector" in text
    )


@pytest.mark.parametrize("seed", range(6))
def test_expected_identification_is_the_exact_expectation_over_every_output(seed):
    """``expected_identification`` rules most outputs out with integer bounds and works out
    the rest; it must equal the expectation summed over every output y of K(x), each with
    its own posterior, on graphs with uniform, skewed and co-located priors, small radii
    (a tail) and a limit small enough to leave an interval that must contain the truth."""
    import random

    from postcode_privacy.evaluate.adversary import expected_identification

    rng = random.Random(700 + seed)
    checked = ruled_by_bound = 0
    for case in range(4):
        kind = case % 3
        n = 9 if kind == 2 else rng.randrange(6, 16)  # the co-located graph has 9 postcodes
        prior = None if kind == 0 else [rng.choice([1, 1, 2, 5, 40]) for _ in range(n)]
        if kind == 2:
            graph = graphs.colocated(prior)
        else:
            graph = graphs.random_graph(n, rng.choice([0.25, 0.4]), rng.randrange(10**6), prior)
        mechanism = Mechanism(graph, rng.choice(["0.4", "1", "2.5"]), rng.choice([None, 2, 3]))
        exact = ExactMechanism(mechanism)
        for x in rng.sample(range(len(graph)), min(4, len(graph))):
            truth = sum(
                (
                    exact.probability(x, y) * posterior_outcome(exact, x, [y], hops=50).identified
                    for y in range(len(graph))
                ),
                Fraction(0),
            )
            got = expected_identification(exact, x, hops=50)
            assert got.low == truth == got.high, (seed, case, x)
            assert got.self_probability == exact.probability(x, x)
            tight = expected_identification(exact, x, hops=50, limit=0)
            assert tight.low <= truth <= tight.high
            ruled_by_bound += tight.high < 1
            checked += 1
    assert checked >= 12 and ruled_by_bound > 0
