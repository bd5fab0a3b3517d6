"""Source rows that pandas would read wrongly without a word: a row with a field too many or
too few (read shifted or cut short when only some columns are read), and coordinates no
postcode can have (off the National Grid, infinite, or large enough to overflow the graph's
arithmetic).  Each is refused naming its line, never its values."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from postcode_privacy.cli import main
from postcode_privacy.errors import SourceDataError
from postcode_privacy.sources.codepoint import read_codepoint
from postcode_privacy.sources.onspd import read_onspd
from postcode_privacy.sources.population import read_population

FIXTURES = Path(__file__).parent / "fixtures" / "sources"
ONSPD = FIXTURES / "ONSPD_FEB_2024_UK.csv"
SECRET = "QZXSECRETQZX"
EASTING = 11  # 0-based position of oseast1m in the fixture (column 12)


def _onspd_lines() -> list[str]:
    return ONSPD.read_text(encoding="utf-8").splitlines()


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("change", "fields"),
    [
        (lambda row: row + f",{SECRET}", 21),  # a field too many: was read as if whole
        (lambda row: row.replace(",", f",{SECRET},", 1), 21),  # one in front: columns shift
        (lambda row: row.rsplit(",", 1)[0], 19),  # a field too few
    ],
)
def test_onspd_row_with_a_field_too_many_or_few_is_refused(tmp_path, change, fields):
    lines = _onspd_lines()
    lines[3] = change(lines[3])
    path = _write(tmp_path / "onspd.csv", lines)
    with pytest.raises(SourceDataError) as excinfo:
        read_onspd(path)
    message = str(excinfo.value)
    assert message.startswith("onspd.csv is not a well-formed CSV file at line 4: ")
    assert f"it has {fields} fields where the header row has 20" in message
    assert SECRET not in message


def test_onspd_row_shapes_are_checked_inside_a_zip(tmp_path):
    import zipfile

    lines = _onspd_lines()
    lines[5] += ",1"
    target = tmp_path / "ONSPD.zip"
    with zipfile.ZipFile(target, "w") as archive:
        archive.writestr("Data/ONSPD_FEB_2024_UK.csv", "\n".join(lines) + "\n")
    with pytest.raises(
        SourceDataError, match=r"^ONSPD.zip:Data/ONSPD_FEB_2024_UK.csv is not .* line 6"
    ):
        read_onspd(target)


def test_onspd_trailing_comma_on_every_row_keeps_the_columns_in_place(tmp_path):
    """Every row, header included, one field longer: consistent, and read by name as it was."""
    plain = read_onspd(ONSPD)
    path = _write(tmp_path / "onspd.csv", [line + "," for line in _onspd_lines()])
    trailing = read_onspd(path)
    assert list(trailing.postcodes) == list(plain.postcodes)
    assert (trailing.easting == plain.easting).all() and (trailing.northing == plain.northing).all()


def test_onspd_blank_and_whitespace_lines_are_still_skipped(tmp_path):
    lines = _onspd_lines()
    path = _write(tmp_path / "onspd.csv", [lines[0], "", " \t", *lines[1:], ""])
    assert list(read_onspd(path).postcodes) == list(read_onspd(ONSPD).postcodes)


def _codepoint(tmp_path: Path, *, doc: bool = True) -> tuple[Path, Path]:
    source = tmp_path / "cp"
    shutil.copytree(FIXTURES / "codepoint", source)
    if not doc:
        shutil.rmtree(source / "Doc")
    return source, source / "Data" / "CSV" / "ab.csv"


@pytest.mark.parametrize("doc", [True, False])
@pytest.mark.parametrize(("row", "line", "found", "first"), [(1, 2, 10, 11), (2, 2, 11, 10)])
def test_codepoint_row_with_a_field_too_many_is_refused(tmp_path, doc, row, line, found, first):
    """Without Doc/ only four columns are read, so pandas took such a row as it stood; a long
    first row made pandas read every other row with a blank eleventh field."""
    source, data = _codepoint(tmp_path, doc=doc)
    rows = data.read_text(encoding="utf-8").splitlines()
    rows[row - 1] += f',"{SECRET}"'
    data.write_text("\n".join(rows) + "\n", encoding="utf-8")
    with pytest.raises(SourceDataError) as excinfo:
        read_codepoint(source)
    message = str(excinfo.value)
    assert f"Data/CSV/ab.csv is not a well-formed CSV file at line {line}: " in message
    assert f"it has {found} fields where line 1 has {first}" in message
    assert SECRET not in message


def test_population_short_row_is_refused_not_read_as_blank(tmp_path):
    path = tmp_path / "pop.csv"
    path.write_text("postcode,sex,count\nAB1 0AA,1,3\nAB1 0AB,1\n", encoding="utf-8")
    with pytest.raises(
        SourceDataError,
        match=r"^pop.csv is not a well-formed CSV file at line 3: it has 2 fields where the header row has 3",
    ):
        read_population(path)


@pytest.mark.parametrize(
    ("value", "role"),
    [
        ("1e200", "easting"),  # overflowed the graph's length arithmetic (a traceback)
        ("inf", "easting"),
        ("-inf", "northing"),
        ("-5", "easting"),
        ("700001", "easting"),
        ("1300001", "northing"),
    ],
)
def test_onspd_coordinate_off_the_grid_is_refused_naming_line_and_column(tmp_path, value, role):
    lines = _onspd_lines()
    fields = lines[2].split(",")
    fields[EASTING if role == "easting" else EASTING + 1] = value
    lines[2] = ",".join(fields)
    path = _write(tmp_path / "onspd.csv", lines)
    column = 12 if role == "easting" else 13
    with pytest.raises(
        SourceDataError,
        match=rf"^onspd.csv: line 3: column {column} \({role}\) is outside the grid",
    ):
        read_onspd(path)


def test_onspd_grid_bounds_apply_only_to_rows_kept(tmp_path):
    """A row dropped for another reason (here Channel Islands) is counted, not judged."""
    lines = _onspd_lines()
    fields = lines[2].split(",")
    fields[2] = "GY1 1AA"
    fields[EASTING] = "-90000"
    lines[2] = ",".join(fields)
    before = read_onspd(ONSPD).dropped["channel_islands_isle_of_man"]
    table = read_onspd(_write(tmp_path / "onspd.csv", lines))
    assert table.dropped["channel_islands_isle_of_man"] == before + 1


@pytest.mark.parametrize(("value", "field"), [("1e200", 3), ("-1", 4), ("inf", 3)])
def test_codepoint_coordinate_off_the_grid_is_refused(tmp_path, value, field):
    source, data = _codepoint(tmp_path)
    rows = data.read_text(encoding="utf-8").splitlines()
    fields = rows[1].split(",")
    fields[field - 1] = value
    rows[1] = ",".join(fields)
    data.write_text("\n".join(rows) + "\n", encoding="utf-8")
    with pytest.raises(
        SourceDataError, match=rf"ab.csv: line 2: field {field} \(\w+\) is outside the grid"
    ):
        read_codepoint(source)


def test_build_with_a_huge_easting_exits_as_a_source_error(tmp_path, capsys):
    lines = _onspd_lines()
    fields = lines[2].split(",")
    fields[EASTING] = "1e200"
    lines[2] = ",".join(fields)
    path = _write(tmp_path / "onspd.csv", lines)
    code = main(["build", "--onspd", str(path), "-o", str(tmp_path / "g.ppg"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 7, err
    assert "line 3: column 12 (easting) is outside the grid" in err
    assert "Traceback" not in err and not (tmp_path / "g.ppg").exists()


def test_population_per_sex_counts_are_summed_exactly_past_int64(tmp_path):
    """Ten 18-digit counts for one postcode add up past 2**63: an int64 sum wrapped (to a
    negative count, or a wrong positive one) where Python integers do not."""
    big = 999_999_999_999_999_999
    rows = [f"AB1 0AA,{sex},{big}" for sex in range(1, 11)] + ["AB1 0AB,1,7", "AB1 0AB,2,5"]
    path = tmp_path / "pop.csv"
    path.write_text("postcode,sex,count\n" + "\n".join(rows) + "\n", encoding="utf-8")
    assert read_population(path) == {"AB1 0AA": 10 * big, "AB1 0AB": 12}


def test_build_refuses_a_population_past_int64_with_the_prior_message(tmp_path, capsys):
    lines = _onspd_lines()
    postcode = lines[2].split(",")[2]
    big = 999_999_999_999_999_999
    path = tmp_path / "pop.csv"
    rows = [f"{postcode},{sex},{big}" for sex in range(1, 11)]
    path.write_text("postcode,sex,count\n" + "\n".join(rows) + "\n", encoding="utf-8")
    code = main(
        ["build", "--onspd", str(ONSPD), "--population", str(path)]
        + ["-o", str(tmp_path / "g.ppg"), "--quiet"]
    )
    err = capsys.readouterr().err
    assert code == 7, err
    assert "add up to more than 2**62" in err and "Traceback" not in err


def test_a_whitespace_first_line_or_a_quoted_blank_line_is_read_as_before(tmp_path):
    """pyarrow counts a line of spaces, or a lone "", as a row of one field; pandas skips the
    first and reads the second as a blank row.  Such files were refused with no line named;
    the csv module now has the last word, and finds every row of one width."""
    lines = _onspd_lines()
    plain = read_onspd(ONSPD)
    for extra in ("   ", '""'):
        path = _write(
            tmp_path / "onspd.csv",
            [extra, *lines] if extra.strip() == "" else [*lines[:3], extra, *lines[3:]],
        )
        table = read_onspd(path)
        assert list(table.postcodes) == list(plain.postcodes)
    population = tmp_path / "pop.csv"
    population.write_text(" \t\npostcode,population\nAB1 0AA,3\n", encoding="utf-8")
    assert read_population(population) == {"AB1 0AA": 3}
    source, data = _codepoint(tmp_path)
    before = len(read_codepoint(source))
    data.write_text("  \n" + data.read_text(encoding="utf-8"), encoding="utf-8")
    assert len(read_codepoint(source)) == before


def test_a_wide_row_of_invalid_utf8_is_refused_without_a_traceback(tmp_path):
    """pyarrow decoded the row's text to hand it to a callback: a byte that is not UTF-8 made
    Python print "Exception ignored ... can't decode byte 0xe9" with a traceback."""
    import subprocess
    import sys

    source, data = _codepoint(tmp_path)
    rows = data.read_bytes().splitlines()
    rows[1] += b',"QZX\xe9SECRET"'
    data.write_bytes(b"\n".join(rows) + b"\n")
    run = subprocess.run(
        [sys.executable, "-m", "postcode_privacy", "build", "--codepoint", str(source)]
        + ["-o", str(tmp_path / "g.ppg"), "--quiet"],
        capture_output=True,
    )
    assert run.returncode == 7, run.stderr
    assert b"is not a well-formed CSV file at line 2" in run.stderr
    assert b"Traceback" not in run.stderr and b"0xe9" not in run.stderr
    assert b"SECRET" not in run.stderr


def test_a_northern_ireland_row_far_from_northern_ireland_names_its_line(tmp_path):
    lines = _onspd_lines()
    header = lines[0].split(",")
    fields = lines[2].split(",")
    fields[2] = "BT1 1AA"
    fields[header.index("ctry")] = "N92000002"
    fields[EASTING], fields[EASTING + 1] = "1", "1"  # on the Irish Grid, off Ireland
    lines[2] = ",".join(fields)
    with pytest.raises(
        SourceDataError,
        match=r"^onspd.csv: line 3: columns 12 and 13 \(easting, northing\), Irish Grid",
    ):
        read_onspd(_write(tmp_path / "onspd.csv", lines))


def test_codepoint_counts_a_malformed_row_off_the_grid_without_judging_it(tmp_path):
    source, data = _codepoint(tmp_path)
    before = read_codepoint(source).dropped["malformed_postcode"]
    with open(data, "a", encoding="utf-8") as handle:
        handle.write('"NOT A CODE",10,1e200,5,"S92000003","","S08000020","","S12000033",""\n')
    assert read_codepoint(source).dropped["malformed_postcode"] == before + 1


def test_a_directory_named_like_a_codepoint_data_file_is_refused(tmp_path):
    source, _ = _codepoint(tmp_path)
    (source / "Data" / "CSV" / "zz.csv").mkdir()
    with pytest.raises(SourceDataError, match="zz.csv is not a regular file"):
        read_codepoint(source)
