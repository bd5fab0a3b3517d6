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
        "postcode,population\nSW1A 1AA,1\n",  # (every prior 1 all the same: uniform)
    ],
    ids=["no-postcode-of-the-graph", "no-rows", "only-zero", "only-one"],
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
    assert "pop.csv: --population gives none of the graph's 8 postcodes a count above 1" in err
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


def test_two_builds_from_different_directories_write_the_same_bytes(tmp_path, monkeypatch):
    import shutil

    from postcode_privacy import Graph

    for name in ("a", "b"):
        (tmp_path / name / "in").mkdir(parents=True)
        shutil.copy(ONSPD, tmp_path / name / "in" / "src.csv")
        shutil.copy(FIXTURES / "population.csv", tmp_path / name / "in" / "pop.csv")
    monkeypatch.chdir(tmp_path / "a")
    args = ["build", "--onspd", "in/src.csv", "--population", "in/pop.csv", "--quiet", "-o"]
    assert main([*args, "g.ppgraph"]) == 0
    monkeypatch.chdir(tmp_path / "b" / "in")
    assert main([*args[:2], "src.csv", args[3], "pop.csv", "--quiet", "-o", "../g.ppgraph"]) == 0
    first, second = tmp_path / "a" / "g.ppgraph", tmp_path / "b" / "g.ppgraph"
    assert first.read_bytes() == second.read_bytes()
    provenance = Graph.load(first).provenance
    assert "seconds" not in provenance["build"]
    assert provenance["sources"][0]["path"] == "src.csv"
    assert provenance["population"]["path"] == "pop.csv"


def test_a_codepoint_directory_is_recorded_by_names_not_absolute_paths(tmp_path):
    from postcode_privacy import Graph

    out = tmp_path / "cp.ppgraph"
    assert main(["build", "--codepoint", str(FIXTURES / "codepoint"), "-o", str(out)]) == 0
    paths = [source["path"] for source in Graph.load(out).provenance["sources"]]
    assert paths and all(path.startswith("codepoint/") for path in paths)
    assert not any(str(tmp_path) in p or str(FIXTURES) in p for p in paths)


HEADER = "pcds,oseast1m,osnrth1m,osgrdind,doterm,ctry,laua\n"
ROWS = [
    "LS1 1AA,430000,433000,1,,E92000001,E08000035\n",
    "LS1 1AB,430100,433000,1,,E92000001,E08000035\n",
    "LS1 1AD,430000,433100,1,,E92000001,E08000035\n",
    "LS1 1AE,430100,433100,1,,E92000001,E08000035\n",
]


@pytest.mark.parametrize(
    "second, lines",
    [
        ("LS1 1AA,439000,439000,1,,E92000001,E08000035\n", "lines 2 and 6"),
        ("LS1 1AA,430000,433000,1,,E92000001,E08000036\n", "lines 2 and 6"),
    ],
    ids=["coordinates", "local-authority"],
)
def test_rows_of_one_postcode_that_disagree_are_refused_in_either_order(
    tmp_path, capsys, second, lines
):
    for name, rows in (("a.csv", [*ROWS, second]), ("b.csv", [second, *ROWS])):
        (tmp_path / name).write_text(HEADER + "".join(rows))
        out = tmp_path / f"{name}.ppgraph"
        assert main(["build", "--onspd", str(tmp_path / name), "-o", str(out), "--quiet"]) == 7
        err = capsys.readouterr().err
        where = lines if name == "a.csv" else "lines 2 and 3"
        assert f"{name}: {where}: two rows of one postcode give it different coordinates" in err
        assert "LS1 1AA" not in err and "LS11AA" not in err
        assert not out.exists()


def test_rows_of_one_postcode_that_agree_are_dropped_as_duplicates(tmp_path, capsys):
    source = tmp_path / "s.csv"
    source.write_text(HEADER + "".join([*ROWS, ROWS[0]]))
    out = tmp_path / "g.ppgraph"
    assert main(["build", "--onspd", str(source), "-o", str(out), "--quiet"]) == 0
    assert "dropped (duplicate): 1" in capsys.readouterr().out


def test_codepoint_rows_of_one_postcode_in_two_files_that_disagree_name_both(tmp_path, capsys):
    import shutil

    source = tmp_path / "cp"
    shutil.copytree(FIXTURES / "codepoint", source)
    files = sorted((source / "Data" / "CSV").glob("*.csv"))
    first_row = files[0].read_text().splitlines()[0].split(",")
    first_row[2] = str(int(float(first_row[2])) + 500)  # the same postcode, moved 500 m
    with open(files[1], "a") as handle:
        handle.write(",".join(first_row) + "\n")
    lines = len(files[1].read_text().splitlines())
    out = tmp_path / "g.ppgraph"
    assert main(["build", "--codepoint", str(source), "-o", str(out), "--quiet"]) == 7
    err = capsys.readouterr().err
    expected = f"{files[0].name}: line 1 and Data/CSV/{files[1].name}: line {lines}"
    assert f"Data/CSV/{expected}: two rows of one postcode" in err
    assert first_row[0].strip('"') not in err
    assert not out.exists()


def test_terminated_rows_of_one_postcode_that_disagree_are_refused(tmp_path, capsys):
    dead = [
        "LS9 9ZZ,431500,433800,1,200101,E92000001,E08000035\n",
        "LS9 9ZZ,431900,433800,1,200101,E92000001,E08000035\n",
    ]
    source = tmp_path / "s.csv"
    source.write_text(HEADER + "".join([*ROWS, *dead]))
    assert main(["build", "--onspd", str(source), "-o", str(tmp_path / "g"), "--quiet"]) == 7
    assert "s.csv: lines 6 and 7: two rows of one postcode" in capsys.readouterr().err


def _source_of(tmp_path, path, *extra) -> tuple[str, str]:
    """The built graph's source kind and sha256 (written to a fresh temporary directory)."""
    import tempfile

    from postcode_privacy import Graph

    out = Path(tempfile.mkdtemp(dir=tmp_path)) / "g.ppgraph"
    assert main(["build", "--onspd", str(path), *extra, "-o", str(out), "--quiet"]) == 0
    graph = Graph.load(out)
    return graph.params["source"], graph.sha256


def test_the_source_kind_comes_from_the_header_not_the_file_name(tmp_path):
    nspl = FIXTURES / "NSPL_FEB_2025_UK.csv"  # header: laua
    renamed = tmp_path / "postcodes.csv"
    renamed.write_bytes(nspl.read_bytes())
    assert _source_of(tmp_path, renamed) == _source_of(tmp_path, nspl)
    assert _source_of(tmp_path, renamed)[0] == "nspl"
    onspd_named_nspl = tmp_path / "my_nspl_copy.csv"  # header: oslaua
    onspd_named_nspl.write_bytes(Path(ONSPD).read_bytes())
    assert _source_of(tmp_path, onspd_named_nspl) == _source_of(tmp_path, ONSPD)
    assert _source_of(tmp_path, onspd_named_nspl)[0] == "onspd"


def test_where_the_header_does_not_say_nspl_is_an_explicit_choice(tmp_path, capsys):
    text = (FIXTURES / "NSPL_FEB_2025_UK.csv").read_text()
    new_names = text.replace(",laua,", ",lad25cd,", 1)  # the 2025 names: ONSPD's too
    standard = tmp_path / "NSPL_NOV_2025_UK.csv"
    standard.write_text(new_names)
    out = tmp_path / "g.ppgraph"
    assert main(["build", "--onspd", str(standard), "-o", str(out), "--quiet"]) == 7
    err = capsys.readouterr().err
    assert "NSPL_NOV_2025_UK.csv: the header does not say whether this is ONSPD or NSPL" in err
    assert "give --nspl if it is NSPL" in err
    assert not out.exists()
    renamed = tmp_path / "postcodes.csv"
    renamed.write_text(new_names)
    old = _source_of(tmp_path, FIXTURES / "NSPL_FEB_2025_UK.csv")
    assert (
        _source_of(tmp_path, standard, "--nspl") == _source_of(tmp_path, renamed, "--nspl") == old
    )
    assert _source_of(tmp_path, renamed)[0] == "onspd"


def test_nspl_is_refused_for_an_onspd_header_and_without_onspd(tmp_path, capsys):
    out = tmp_path / "g.ppgraph"
    assert main(["build", "--onspd", ONSPD, "--nspl", "-o", str(out), "--quiet"]) == 7
    assert "--nspl is given, but the header is ONSPD's" in capsys.readouterr().err
    codepoint = str(FIXTURES / "codepoint")
    assert main(["build", "--codepoint", codepoint, "--nspl", "-o", str(out)]) != 0
    assert "--nspl describes the --onspd file" in capsys.readouterr().err
    assert not out.exists()


def test_rows_that_disagree_are_named_in_file_order_past_the_ninth_file():
    """Code-Point Open has about 120 files: the rows were sorted by the file's number as text,
    so file 10 was named before file 2."""
    import pandas as pd

    from postcode_privacy.sources.table import DisagreeingRows, build_table

    frame = pd.DataFrame(
        {
            "postcode": ["LS1 1AA", "LS1 1AA", "LS1 1AB"],
            "easting": [430000.0, 430500.0, 430100.0],
            "northing": [433000.0, 433000.0, 433000.0],
            "file": [10, 2, 3],
            "record": [4, 1, 0],
        }
    )
    with pytest.raises(DisagreeingRows) as refused:
        build_table(frame, dropped={}, kind="codepoint", sources=[])
    assert [(int(f), int(r)) for f, r in refused.value.rows] == [(2, 1), (10, 4)]
