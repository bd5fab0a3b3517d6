"""Numeric options of ``evaluate``, ``calibrate`` and ``report`` against absurd values: each is
refused by click before any work, in the option's own name, and the library refuses the same
values through the same constants (``postcode_privacy._limits``)."""

from __future__ import annotations

import pytest
from test_evaluate_graphs import postcode_graph

from postcode_privacy.cli import main
from postcode_privacy.errors import InvalidParameterError
from postcode_privacy.evaluate import evaluate_release
from postcode_privacy.report import build_report


@pytest.fixture(scope="module")
def small_graph():
    graph, _ = postcode_graph(30, seed=5, colocated=2)
    return graph


@pytest.mark.parametrize(
    ("command", "option", "value"),
    [
        ("evaluate", "--releases", "1001"),
        ("evaluate", "--releases", "10000000000"),
        ("report", "--releases", "1001"),
        ("evaluate", "--adversary-hops", "10001"),
        ("evaluate", "--compromise-hops", "10001"),
        ("evaluate", "--seed", str(2**63)),
        ("calibrate", "--seed", str(10**40)),
        ("report", "--seed", str(2**63)),
    ],
)
def test_absurd_values_are_usage_errors(tmp_path, capsys, command, option, value):
    # A graph that does not exist: refused before it is even looked for.
    args = [command, "--graph", str(tmp_path / "absent.ppg"), option, value]
    args += (
        ["--target", "median-displacement-km=1"] if command == "calibrate" else ["--epsilon", "1"]
    )
    if command == "report":
        args += ["-o", str(tmp_path / "r.html")]
    assert main(args) == 2
    assert f"Invalid value for '{option}'" in capsys.readouterr().err


def test_the_library_refuses_the_same_releases(small_graph):
    with pytest.raises(InvalidParameterError, match="releases must be from 1 to 1,000"):
        evaluate_release(small_graph, 1, sample=1, releases=1001)
    with pytest.raises(InvalidParameterError, match="adversary_hops must be from 1 to 10,000"):
        evaluate_release(small_graph, 1, sample=1, adversary_hops=10_001)
    for releases in (0, 1001):
        with pytest.raises(InvalidParameterError, match="releases must be from 1 to 1,000"):
            build_report(small_graph, 1, sample=1, releases=releases)
