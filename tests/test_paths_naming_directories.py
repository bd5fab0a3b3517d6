"""A path that ends in a separator (``out.csv/``) or in ``.`` names a directory, whichever
command and option it is given to: it is refused with the exit code of that option's other
path errors, and nothing is written.  (pathlib drops the trailing ``/``, so ``out.csv/`` used
to be written as ``out.csv``, and ``in.csv/`` read as ``in.csv``.)"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from postcode_privacy import Key
from postcode_privacy.cli import main
from postcode_privacy.graph.build import build_graph
from postcode_privacy.keyfile import ENV_VAR, write_key_file

UNITS = "ABDEFGHJLNPQRSTUWXYZ"
RELEASE = "--epsilon 1 --id-column subject --postcode-column postcode"


@pytest.fixture
def place(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    codes = [f"BD{r + 1} {c + 1}{UNITS[r]}{UNITS[c]}" for r in range(2) for c in range(3)]
    east = [410000.0 + 120 * c for r in range(2) for c in range(3)]
    north = [432000.0 + 90 * r for r in range(2) for c in range(3)]
    build_graph(codes, east, north).save(tmp_path / "g.ppgraph")
    write_key_file(Key.from_bytes(b"p" * 32), tmp_path / "a.key")
    (tmp_path / "in.csv").write_text(
        "subject,postcode\n" + "".join(f"{i},{c}\n" for i, c in enumerate(codes))
    )
    assert main(["ledger", "init", str(tmp_path / "l.db")]) == 0
    return tmp_path


# (argv with {d} for the directory, {end} where the path ends and {r} for the release
# options, exit code)
CASES = {
    "perturb -o": (
        "perturb {d}/in.csv -o {d}/out.csv{end} --key {d}/a.key --graph {d}/g.ppgraph {r} -q",
        8,
    ),
    "perturb INPUT": (
        "perturb {d}/in.csv{end} -o {d}/out.csv --key {d}/a.key --graph {d}/g.ppgraph {r} -q",
        3,
    ),
    "perturb --key": (
        "perturb {d}/in.csv -o {d}/out.csv --key {d}/a.key{end} --graph {d}/g.ppgraph {r} -q",
        4,
    ),
    "perturb --ledger-secret": (
        "perturb {d}/in.csv -o {d}/out.csv --key {d}/a.key --graph {d}/g.ppgraph "
        "--ledger {d}/l.db --ledger-secret {d}/l.db.key{end} {r} -q",
        4,
    ),
    "report -o": ("report --epsilon 1 --graph {d}/g.ppgraph -q -o {d}/r.html{end}", 8),
    "evaluate -o": ("evaluate --epsilon 1 --graph {d}/g.ppgraph -q -o {d}/e.json{end}", 8),
    "calibrate -o": (
        "calibrate --target median-displacement-km=1 --graph {d}/g.ppgraph -q -o {d}/c.json{end}",
        8,
    ),
    "build -o": ("build --onspd {d}/in.csv --quiet -o {d}/b.ppgraph{end}", 8),
    "keygen -o": ("keygen -o {d}/k.key{end}", 4),
    "ledger init": ("ledger init {d}/new.db{end}", 8),
    "ledger init --ledger-secret": ("ledger init {d}/new.db --ledger-secret {d}/s.key{end}", 4),
    "ledger show": ("ledger show {d}/l.db{end}", 8),
    "ledger check INPUT": (
        "ledger check {d}/in.csv{end} --ledger {d}/l.db --key {d}/a.key --graph {d}/g.ppgraph {r}",
        3,
    ),
}


def tree(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file()}


@pytest.mark.parametrize("end", ["/", "/."], ids=["slash", "slash-dot"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_path_naming_a_directory_is_refused_and_nothing_is_written(place, capsys, case, end):
    template, code = CASES[case]
    argv = template.format(d=place, end=end, r=RELEASE).split()
    before = tree(place)
    assert main(argv) == code
    err = capsys.readouterr().err
    assert "path names a directory, not a file" in err and "Traceback" not in err
    assert tree(place) == before


def test_the_checks_see_the_path_as_given_not_as_pathlib_makes_it(tmp_path):
    from postcode_privacy.atomic import refuse_directory_path
    from postcode_privacy.errors import InvalidParameterError

    for named in ("", ".", "..", "/", "a/", "a//", "a/.", "a/..", f"a{os.sep}"):
        with pytest.raises(InvalidParameterError, match="names a directory"):
            refuse_directory_path(named)
    for fine in ("a", "a.csv", "./a.csv", "../a.csv", "a/b.csv", ".a", "a."):
        refuse_directory_path(fine)


def test_an_output_that_is_a_directory_is_named_so_before_its_missing_extension(place, capsys):
    (place / "results").mkdir()
    argv = f"perturb {place}/in.csv -o {place}/results --key {place}/a.key --graph "
    argv += f"{place}/g.ppgraph {RELEASE} -q"
    before = tree(place)
    assert main(argv.split()) == 8
    assert f"the output path {place}/results is a directory" in capsys.readouterr().err
    assert tree(place) == before
