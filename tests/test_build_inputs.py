"""``build`` on inputs a review found mishandled: empty paths, duplicate rows, population
files that cover nothing, non-ASCII digits, the source kind and byte-reproducible artefacts."""

from __future__ import annotations

from pathlib import Path

import pytest

from postcode_privacy.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "sources"
ONSPD = str(FIXTURES / "ONSPD_FEB_2024_UK.csv")


@pytest.mark.parametrize(
    "args, option",
    [
        (["--onspd", ""], "--onspd"),
        (["--codepoint", ""], "--codepoint"),
        (["--onspd", ONSPD, "--population", ""], "--population"),
    ],
)
def test_an_empty_source_path_names_its_option(tmp_path, capsys, args, option):
    out = tmp_path / "g.ppgraph"
    assert main(["build", *args, "-o", str(out), "--quiet"]) == 7
    err = capsys.readouterr().err
    assert f"the {option} path is empty" in err
    assert "does not exist" not in err
    assert not out.exists()


@pytest.mark.parametrize("digit", ["\u0663", "\uff13"])  # Arabic-Indic three, fullwidth three
def test_a_count_in_non_ascii_digits_is_not_a_number(tmp_path, capsys, digit):
    population = tmp_path / "pop.csv"
    population.write_text(f"postcode,population\nSW1A 1AA,{digit}\n", encoding="utf-8")
    out = tmp_path / "g.ppgraph"
    code = main(["build", "--onspd", ONSPD, "--population", str(population), "-o", str(out)])
    assert code == 7
    err = capsys.readouterr().err
    assert "pop.csv: line 2: column 2 (the count) is not a non-negative integer" in err
    assert digit not in err
    assert not out.exists()


@pytest.mark.parametrize(
    "content",
    [
        "postcode,population\nZZ9 9ZZ,100\n",
        "postcode,population\n",
        "postcode,population\nSW1A 1AA,0\n",
    ],
    ids=["no-postcode-of-the-graph", "no-rows", "only-zero"],
)
def test_a_population_file_that_counts_no_postcode_of_the_graph_is_refused(
    tmp_path, capsys, content
):
    population = tmp_path / "pop.csv"
    population.write_text(content)
    out = tmp_path / "g.ppgraph"
    code = main(["build", "--onspd", ONSPD, "--population", str(population), "-o", str(out)])
    assert code == 7
    err = capsys.readouterr().err
    assert "pop.csv: --population gives none of the graph's 8 postcodes a count of 1 or more" in err
    assert not out.exists()


def test_a_population_file_covering_part_of_the_graph_is_noted(tmp_path, capsys):
    out = tmp_path / "g.ppgraph"
    population = str(FIXTURES / "population.csv")
    assert main(["build", "--onspd", ONSPD, "--population", population, "-o", str(out)]) == 0
    captured = capsys.readouterr()
    note = (
        "note: --population gives a count of 1 or more to 2 of the graph's 8 postcodes; "
        "the other 6 have the floor of 1"
    )
    assert note in captured.err
    assert "note:" not in captured.out
