"""Messages advise only what the running command offers, and print no Python ``None``: on a
graph whose prior is very uneven (two postcodes hold almost all of it) small epsilons have no
default radius, and each command says so in its own terms."""

from __future__ import annotations

import pytest
from graphs import leeds_grid

from postcode_privacy.cli import main


@pytest.fixture(scope="module")
def uneven_graph(tmp_path_factory):
    prior = [999_999_999_999_999_999] * 2 + [1] * 34
    graph, _ = leeds_grid(prior=prior)
    path = tmp_path_factory.mktemp("uneven") / "g.ppgraph"
    graph.save(path)
    return str(path)


def test_example_does_not_advise_a_radius_it_has_no_option_for(capsys):
    """``example --epsilon 0.001`` said "give --radius too", an option ``example`` lacks."""
    assert main(["example", "--epsilon", "0.001"]) == 8
    err = capsys.readouterr().err
    assert "too small for a default radius" in err and "give a larger --epsilon" in err
    assert "--radius" not in err


def test_evaluate_which_has_a_radius_still_advises_it(uneven_graph, capsys):
    assert main(["evaluate", "--graph", uneven_graph, "--epsilon", "0.01", "-q"]) == 8
    assert "give --radius too, or a larger --epsilon" in capsys.readouterr().err


def test_calibrate_says_which_epsilon_it_cannot_measure(uneven_graph, capsys):
    """calibrate has neither --epsilon nor --radius, yet was told to give them."""
    args = ["calibrate", "--graph", uneven_graph, "--target", "max-self-probability=0.1", "-q"]
    assert main(args) == 8
    err = capsys.readouterr().err
    assert "epsilon 0.01, which the search must measure, has no default radius" in err
    assert "--radius" not in err and "--epsilon" not in err


@pytest.mark.slow  # a whole evaluation: about 3 s
def test_evaluate_says_why_no_epsilon_matches_a_truncation(uneven_graph, capsys):
    """Its text printed "epsilon with the same median displacement: None"."""
    assert main(["evaluate", "--graph", uneven_graph, "--epsilon", "1", "-q"]) == 0
    out = capsys.readouterr().out
    assert "None" not in out
    assert "epsilon with the same median displacement: none in [0.01, 10] (" in out
    assert "cannot be met for epsilon in [0.01, 10]" in out  # (the sectors)
    # the districts: matching them needs an epsilon whose radius this prior puts out of reach
    assert "median displacement: not searched: an epsilon the search must measure" in out
