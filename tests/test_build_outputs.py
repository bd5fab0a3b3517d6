"""``build``'s outputs follow the shared output rules for the artefact and its terminated
sidecar together: neither is replaced without ``--force``, a source the run reads is never
replaced even with it, and a stale sidecar never stays beside a new artefact."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from postcode_privacy.cli import main
from postcode_privacy.graph.artefact import terminated_sidecar
from postcode_privacy.graph.graph import Graph

FIXTURES = Path(__file__).parent / "fixtures" / "sources"
ONSPD = FIXTURES / "ONSPD_FEB_2024_UK.csv"


def _build(capsys, *args) -> tuple[int, str]:
    code = main(["build", *map(str, args), "--quiet"])
    return code, capsys.readouterr().err


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_an_existing_sidecar_is_not_replaced_without_force(tmp_path, capsys):
    output = tmp_path / "g.ppg"
    sidecar = terminated_sidecar(output)
    sidecar.write_bytes(b"someone else's table")
    code, err = _build(capsys, "--onspd", ONSPD, "-o", output)
    assert code == 5, err
    assert f"{sidecar} already exists; --force replaces it" in err
    assert sidecar.read_bytes() == b"someone else's table" and not output.exists()


def test_without_terminated_rows_a_stale_sidecar_needs_force_and_is_then_removed(tmp_path, capsys):
    source = tmp_path / "live.csv"
    lines = ONSPD.read_text(encoding="utf-8").splitlines()
    doterm = lines[0].split(",").index("doterm")
    live = [lines[0]] + [
        ",".join(f if i != doterm else "" for i, f in enumerate(line.split(",")))
        for line in lines[1:]
    ]
    source.write_text("\n".join(live) + "\n", encoding="utf-8")
    output = tmp_path / "g.ppg"
    sidecar = terminated_sidecar(output)
    sidecar.write_bytes(b"stale")
    code, err = _build(capsys, "--onspd", source, "-o", output)
    assert code == 5 and sidecar.read_bytes() == b"stale", err
    code, err = _build(capsys, "--onspd", source, "-o", output, "--force")
    assert code == 0, err
    assert output.exists() and not sidecar.exists()


@pytest.mark.parametrize("which", ["onspd", "population"])
def test_a_source_is_never_the_output_even_with_force(tmp_path, capsys, which):
    onspd = tmp_path / "onspd.csv"
    shutil.copy(ONSPD, onspd)
    population = tmp_path / "pop.csv"
    population.write_text("postcode,population\nAB1 0AA,3\n", encoding="utf-8")
    target = onspd if which == "onspd" else population
    before = _digest(target)
    code, err = _build(
        capsys, "--onspd", onspd, "--population", population, "-o", target, "--force"
    )
    assert code == 5, err
    assert "this run reads; an input is never replaced" in err
    assert _digest(target) == before


def test_the_output_is_never_written_inside_the_codepoint_directory(tmp_path, capsys):
    source = tmp_path / "cp"
    shutil.copytree(FIXTURES / "codepoint", source)
    data = source / "Data" / "CSV" / "ab.csv"
    before = _digest(data)
    code, err = _build(capsys, "--codepoint", source, "-o", data, "--force")
    assert code == 5, err
    assert "inside the Code-Point Open directory this run reads" in err
    assert _digest(data) == before
    code, err = _build(capsys, "--codepoint", source, "-o", source / "new.ppg")
    assert code == 5 and not (source / "new.ppg").exists(), err


def test_force_replaces_artefact_and_sidecar_together(tmp_path, capsys):
    output = tmp_path / "g.ppg"
    code, err = _build(capsys, "--onspd", ONSPD, "-o", output)
    assert code == 0, err
    sidecar = terminated_sidecar(output)
    first = (Graph.load(output).sha256, _digest(sidecar))
    sidecar.write_bytes(b"edited")
    output.write_bytes(b"edited")
    code, err = _build(capsys, "--onspd", ONSPD, "-o", output, "--force")
    assert code == 0, err
    # the same build again (the provenance's build time aside)
    assert (Graph.load(output).sha256, _digest(sidecar)) == first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.ppg", sidecar.name]


@pytest.mark.parametrize("which", ["--onspd", "--codepoint", "--population"])
@pytest.mark.parametrize("kind", ["missing", "directory"])
def test_a_source_that_is_missing_or_a_directory_is_a_source_error(
    tmp_path, capsys, monkeypatch, which, kind
):
    """Exit 7, as for any other fault of a source file (it was click's usage error, exit 2)."""
    bad = tmp_path / "nothing-here"
    if kind == "directory":
        bad.mkdir()
    args = [which, bad] if which != "--population" else ["--onspd", ONSPD, which, bad]
    if which == "--codepoint" and kind == "directory":
        expected = "no Data/CSV/*.csv files found"  # (a directory is what it may be)
    else:
        expected = "does not exist" if kind == "missing" else "(a directory)"
    code, err = _build(capsys, *args, "-o", tmp_path / "g.ppg")
    assert code == 7, err
    assert expected in err and not (tmp_path / "g.ppg").exists()
    # a relative name is not said twice ("nothing-here does not exist: nothing-here (looked for
    # in ...)": a review of round 36)
    if kind == "missing":
        monkeypatch.chdir(tmp_path)
        code, err = _build(capsys, *[a if a != bad else "nothing-here" for a in args], "-o", "g")
        assert code == 7 and "nothing-here does not exist" in err, err
        assert err.count("nothing-here") == 1, err


def test_a_bad_population_file_stops_the_build_before_the_source_is_read(tmp_path, capsys):
    population = tmp_path / "pop.csv"
    population.write_text("postcode,population\nAB1 0AA,x\n", encoding="utf-8")
    onspd = tmp_path / "onspd.csv"
    onspd.write_text("pcds,oseast1m,osnrth1m\nAB1 0AA,abc,1\n", encoding="utf-8")
    code, err = _build(capsys, "--onspd", onspd, "--population", population, "-o", tmp_path / "g")
    assert code == 7 and "pop.csv: line 2" in err and "onspd.csv" not in err, err


def test_a_source_whose_every_row_is_dropped_is_a_source_error(tmp_path, capsys):
    onspd = tmp_path / "onspd.csv"
    onspd.write_text("pcds,oseast1m,osnrth1m\nAB1 0AA,,\nnot a postcode,1,1\n", encoding="utf-8")
    code, err = _build(capsys, "--onspd", onspd, "-o", tmp_path / "g.ppg")
    assert code == 7, err
    assert "onspd.csv: no postcode is left to build a graph from" in err
    assert "1 malformed postcode" in err and "1 no grid reference" in err


@pytest.mark.parametrize("source", ["onspd", "codepoint"])
def test_a_zip_with_two_members_of_one_name_is_refused(tmp_path, capsys, source):
    import warnings
    import zipfile

    target = tmp_path / "source.zip"
    with warnings.catch_warnings(), zipfile.ZipFile(target, "w") as archive:
        warnings.simplefilter("ignore")  # (zipfile warns of the duplicate it writes)
        if source == "onspd":
            for _ in range(2):
                archive.write(ONSPD, "Data/ONSPD_FEB_2024_UK.csv")
        else:
            data = FIXTURES / "codepoint" / "Data" / "CSV"
            for name in ("ab.csv", "b.csv"):
                archive.write(data / name, "Data/CSV/ab.csv")
    code, err = _build(capsys, f"--{source}", target, "-o", tmp_path / "g.ppg")
    assert code == 7, err
    assert "source.zip: the zip holds two files of the same name" in err


def test_a_source_named_like_the_output_s_lock_file_is_not_deleted(tmp_path, capsys):
    """The claim keeps ``.OUTPUT.lock`` beside the output and removes it at the end: a source
    at that name was opened as the lock and deleted, without --force."""
    source = tmp_path / ".g.ppg.lock"
    shutil.copy(ONSPD, source)
    before = _digest(source)
    code, err = _build(capsys, "--onspd", source, "-o", tmp_path / "g.ppg")
    assert code == 5, err
    assert ".g.ppg.lock, the lock file a run keeps beside g.ppg, is the ONSPD file" in err
    assert _digest(source) == before and not (tmp_path / "g.ppg").exists()


@pytest.mark.parametrize("link", ["symbolic", "hard"])
def test_a_codepoint_file_reached_by_a_link_is_never_the_output(tmp_path, capsys, link):
    import os

    source = tmp_path / "cp"
    shutil.copytree(FIXTURES / "codepoint", source)
    outside = tmp_path / "sw_real.csv"
    inside = source / "Data" / "CSV" / "sw.csv"
    shutil.move(inside, outside)
    (os.symlink if link == "symbolic" else os.link)(outside, inside)
    before = _digest(outside)
    code, err = _build(capsys, "--codepoint", source, "-o", outside, "--force")
    assert code == 5, err
    assert "one of its files by another name" in err and _digest(outside) == before
