"""``calibrate``: the grid, target parsing, the bisection's answer, warnings, and the CLI."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from test_evaluate_graphs import postcode_graph

from postcode_privacy import Mechanism
from postcode_privacy.cli import main
from postcode_privacy.errors import InvalidParameterError
from postcode_privacy.evaluate import calibrate, measure_utility, parse_target, select_sample
from postcode_privacy.evaluate.calibrate import GRID
from postcode_privacy.evaluate.exact import ExactMechanism


@pytest.fixture(scope="module")
def setup():
    graph, _ = postcode_graph(150, seed=8, colocated=3)
    return graph, select_sample(graph, 10, seed=2)


def _measure(graph, nodes, epsilon):
    return measure_utility(ExactMechanism(Mechanism(graph, epsilon)), nodes)


def test_grid_is_two_significant_figures_from_001_to_10():
    assert GRID[0] == Decimal("0.01") and GRID[-1] == Decimal(10)
    assert list(GRID) == sorted(set(GRID))
    assert len(GRID) == 271
    assert all(len(g.normalize().as_tuple().digits) <= 2 for g in GRID)
    ratios = [float(b / a) for a, b in zip(GRID, GRID[1:])]
    assert max(ratios) <= 1.1 + 1e-12 and min(ratios) > 1.01  # log-spaced within a decade


@pytest.mark.parametrize(
    "text",
    [
        "median-displacement-km",
        "median-displacement-km=x",
        "nonsense=2",
        "median-displacement-km=-1",
        "max-self-probability=1.5",
        "median-displacement-km=inf",
    ],
)
def test_bad_targets_are_refused(text):
    with pytest.raises(InvalidParameterError):
        parse_target(text)


def test_displacement_target_gives_smallest_epsilon_meeting_it(setup):
    graph, nodes = setup
    target = _measure(graph, nodes, "0.8").median_displacement_km
    result = calibrate(graph, {"median-displacement-km": target}, nodes)
    assert result.met and result.epsilon is not None
    i = GRID.index(result.epsilon)
    assert _measure(graph, nodes, result.epsilon).median_displacement_km <= target
    assert _measure(graph, nodes, GRID[i - 1]).median_displacement_km > target
    assert result.epsilon <= Decimal("0.8")
    assert result.achieved["median-displacement-km"] <= target
    assert len(result.evaluations) <= 12  # bisection, not a scan


def test_self_probability_target_gives_largest_epsilon_meeting_it(setup):
    graph, nodes = setup
    target = _measure(graph, nodes, "1.3").max_self_probability
    result = calibrate(graph, {"max-self-probability": target}, nodes)
    i = GRID.index(result.epsilon)
    assert _measure(graph, nodes, result.epsilon).max_self_probability <= target
    assert _measure(graph, nodes, GRID[i + 1]).max_self_probability > target


def test_unreachable_and_conflicting_targets_warn(setup):
    graph, nodes = setup
    unreachable = calibrate(graph, {"max-self-probability": 1e-9}, nodes)
    assert not unreachable.met and unreachable.epsilon is None
    assert any("cannot be met" in w for w in unreachable.warnings)
    loose = _measure(graph, nodes, "0.3")
    conflict = calibrate(
        graph,
        {
            "median-displacement-km": _measure(graph, nodes, "3").median_displacement_km,
            "max-self-probability": loose.max_self_probability,
        },
        nodes,
    )
    assert conflict.epsilon is None and any("conflict" in w for w in conflict.warnings)


def test_cli_calibrate(setup, tmp_path, capsys):
    graph, _ = setup
    path = tmp_path / "g.ppg"
    graph.save(path)
    assert (
        main(
            [
                "calibrate",
                "--graph",
                str(path),
                "--sample",
                "6",
                "--target",
                "median-displacement-km=1",
                "--json",
                "-q",
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert data["format"] == "postcode-privacy-calibration"
    assert data["graph_sha256"] == graph.sha256
    assert data["met"] and Decimal(data["epsilon"]) in GRID
    # No epsilon meets the target: say why and exit non-zero, so a script cannot carry on.
    assert (
        main(
            [
                "calibrate",
                "--graph",
                str(path),
                "--target",
                "max-self-probability=0.000000001",
                "--sample",
                "4",
            ]
        )
        == 1
    )
    captured = capsys.readouterr()
    assert "warning:" in captured.err and "error: no epsilon" in captured.err
    assert captured.out == ""
    assert (
        main(
            [
                "calibrate",
                "--graph",
                str(path),
                "--target",
                "max-self-probability=0.000000001",
                "--sample",
                "4",
                "--json",
                "-q",
            ]
        )
        == 1
    )
    captured = capsys.readouterr()
    assert json.loads(captured.out)["met"] is False and "error: no epsilon" in captured.err
    assert main(["calibrate", "--graph", str(path), "--target", "bogus=1"]) == 8


def test_a_self_probability_target_is_compared_exactly(setup):
    """A target just below the exact largest self-probability at some epsilon must not be met
    there, however many digits it takes (a float comparison met it)."""
    from fractions import Fraction

    graph, nodes = setup
    eps = Decimal("0.5")
    summary = measure_utility(ExactMechanism(Mechanism(graph, eps)), nodes)
    exact = max(r.self_probability for r in summary.per_postcode)
    below = exact - Fraction(1, 10**40)
    digits = below.numerator * 10**60 // below.denominator  # rounded down to 60 places
    text = f"0.{digits:060d}"
    assert Fraction(Decimal(text)) < exact and float(Fraction(Decimal(text))) == float(exact)
    name, value = parse_target(f"max-self-probability={text}")
    result = calibrate(graph, {name: value}, nodes)
    assert result.epsilon is None or result.epsilon < eps
    assert calibrate(graph, {name: exact}, nodes).epsilon >= eps


def test_a_displacement_target_equal_to_a_median_is_met_there(setup):
    """A median displacement is a whole number of metres; a target equal to it, as decimal
    text, is met at that epsilon.  Its float was compared (0.762 as a float is above 0.762), so
    an epsilon meeting the target exactly was passed over (a hostile review of round 27)."""
    from fractions import Fraction

    graph, nodes = setup
    float_above_it = 0
    for eps in ("0.4", "0.8", "1", "1.5", "2.5", "4"):
        metres = round(_measure(graph, nodes, eps).median_displacement_km * 1000)
        if metres == 0:  # (no target: it must be positive)
            continue
        name, value = parse_target(f"median-displacement-km={Decimal(metres) / 1000}")
        assert value == Fraction(metres, 1000)
        result = calibrate(graph, {name: value}, nodes)
        assert result.met and result.epsilon <= Decimal(eps)
        float_above_it += Fraction(metres / 1000) > value
    assert float_above_it  # (so the float comparison would have failed one of them)


def test_a_target_named_twice_keeps_its_strictest_value(setup, capsys):
    graph, nodes = setup
    from postcode_privacy.evaluate.calibrate import combine_targets

    both = combine_targets(
        [parse_target("median-displacement-km=0.2"), parse_target("median-displacement-km=50")]
    )
    assert both == dict([parse_target("median-displacement-km=0.2")])
    with pytest.raises(InvalidParameterError, match="plain decimal"):
        parse_target("median-displacement-km=1_0")


@pytest.mark.parametrize("output", ["", ".", "/", ".."])
def test_an_output_that_names_no_file_and_a_negative_seed_are_refused(setup, tmp_path, output):
    graph, _ = setup
    graph.save(tmp_path / "g.ppgraph")
    base = ["calibrate", "--graph", str(tmp_path / "g.ppgraph"), "--target",
            "median-displacement-km=1", "-q"]  # fmt: skip
    assert main([*base, "-o", output]) == 8
    assert main([*base, "--seed", "-1"]) == 2
    assert main(["report", "--epsilon", "1", "--graph", str(tmp_path / "g.ppgraph"), "-q",
                 "-o", output]) == 8  # fmt: skip


@pytest.mark.parametrize(
    "target",
    ["median-displacement-km=1e999", "median-displacement-km=1e99999",
     "median-displacement-km=1e-999", "max-self-probability=1e-99999",
     "median-displacement-km=2000000"],
)  # fmt: skip
def test_a_huge_or_tiny_target_is_refused_at_once(setup, tmp_path, capsys, target):
    """``median-displacement-km=1e999`` passed the parser and overflowed a float in the
    warnings (a traceback); ``1e999999999`` would have built a billion-digit integer."""
    graph, _ = setup
    graph.save(tmp_path / "g.ppgraph")
    argv = ["calibrate", "--graph", str(tmp_path / "g.ppgraph"), "--target", target, "-q",
            "--sample", "2"]  # fmt: skip
    assert main(argv) == 8
    err = capsys.readouterr().err
    assert "must be from" in err and "Traceback" not in err
