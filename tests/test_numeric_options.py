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


@pytest.mark.parametrize("seed", [-1, 2**63, 1.5, True])
def test_the_library_refuses_the_seeds_the_command_line_refuses(small_graph, seed):
    with pytest.raises(InvalidParameterError, match="seed must be"):
        evaluate_release(small_graph, 1, sample=1, seed=seed)
    with pytest.raises(InvalidParameterError, match="seed must be"):
        build_report(small_graph, 1, sample=1, seed=seed)


def test_the_library_defaults_are_the_command_lines():
    """One declaration (``_limits``): ``evaluate_release`` sampled 100 postcodes by default
    where ``evaluate`` sampled 50."""
    import inspect

    from postcode_privacy.cli import cli

    library = inspect.signature(evaluate_release).parameters
    options = {p.name: p.default for p in cli.commands["evaluate"].params}
    for name in ("sample", "releases", "seed", "adversary_hops", "compromise_hops"):
        assert library[name].default == options[name], name
    report = inspect.signature(build_report).parameters
    options = {p.name: p.default for p in cli.commands["report"].params}
    for name in ("sample", "releases", "seed"):
        assert report[name].default == options[name], name


@pytest.mark.parametrize(
    ("command", "option", "value", "message"),
    [
        ("example", "--epsilon", "1e99999999999999999999", "--epsilon above 100 is not supported"),
        ("example", "--epsilon", "1e-99999999999999999999", "--epsilon below 0.0001"),
        ("example", "--epsilon", "0e99999999999999999999", "--epsilon must be greater than zero"),
        ("evaluate", "--epsilon", "7e1000001", "--epsilon above 100 is not supported"),
        ("report", "--epsilon", "1e99999999999999999999", "--epsilon above 100 is not supported"),
        (
            "calibrate",
            "--target",
            "median-displacement-km=1e99999999999999999999",
            "target median-displacement-km",
        ),
        ("ledger", "--budget", "1e99999999999999999999", "--budget above 1000000"),
    ],
)
def test_an_exponent_past_what_decimal_takes_is_refused_as_out_of_range(
    tmp_path, capsys, small_graph, command, option, value, message
):
    """Decimal() refuses an exponent past about 10^18 with InvalidOperation: ``--epsilon
    1e99999999999999999999`` printed a traceback (exit 1) where one digit fewer said "above
    100 is not supported"."""
    if command == "ledger":
        args = ["ledger", "check", str(tmp_path / "in.csv"), "--ledger", str(tmp_path / "l.db")]
        args += ["--key", str(tmp_path / "k.key"), "--epsilon", "1", option, value]
        args += ["--id-column", "id", "--postcode-column", "postcode"]
    else:
        args = [command, option, value]
        if command in ("evaluate", "report", "calibrate"):
            small_graph.save(tmp_path / "g.ppgraph")
            args += ["--graph", str(tmp_path / "g.ppgraph")]
        if command == "report":
            args += ["-o", str(tmp_path / "r.html")]
    code = main(args)
    err = capsys.readouterr().err
    assert code == 8 and "Traceback" not in err, err
    assert message in err


@pytest.mark.parametrize(
    ("command", "option", "value"),
    [
        ("evaluate", "--radius", "\u0663"),  # ARABIC-INDIC DIGIT THREE: int() reads 3
        ("evaluate", "--sample", "\uff13"),  # FULLWIDTH DIGIT THREE
        ("evaluate", "--seed", "1_0"),  # int() reads ten
        ("report", "--radius", "1_0"),
        ("calibrate", "--sample", "\u0663"),
    ],
)
def test_whole_numbers_are_plain_ascii_digits_as_epsilon_is(
    tmp_path, capsys, command, option, value
):
    """``--radius ٣`` was radius 3 and ``--seed 1_0`` ten, where ``--epsilon`` refuses both."""
    args = [command, "--graph", str(tmp_path / "absent.ppg"), option, value]
    args += (
        ["--target", "median-displacement-km=1"] if command == "calibrate" else ["--epsilon", "1"]
    )
    if command == "report":
        args += ["-o", str(tmp_path / "r.html")]
    code = main(args)
    err = capsys.readouterr().err
    assert code == 2 and "is not a whole number (digits 0 to 9 only)" in err, err


def test_ledger_settle_and_perturb_take_plain_digits_only(capsys):
    assert main(["ledger", "settle", "l.db", "1_0", "--abandoned", "--yes"]) == 2
    assert "is not a whole number (digits 0 to 9 only)" in capsys.readouterr().err
    args = ["perturb", "in.csv", "-o", "o.csv", "--epsilon", "1", "--chunk-size", "\uff13"]
    assert main(args + ["--id-column", "i", "--postcode-column", "p"]) == 2
    assert "is not a whole number (digits 0 to 9 only)" in capsys.readouterr().err
