"""``build`` and its source readers against a hostile user: messages that could quote a cell
(a headerless file's first row is data, so its "header names" are cells too), inputs that are
not regular files, and ``--max-edge-km`` values that mean nothing."""

from __future__ import annotations

import hashlib
import os
import shutil
import time
import zipfile
from pathlib import Path

import pandas as pd
import pytest
from hostile_files import fifo_nobody_writes

import postcode_privacy.sources.onspd as onspd_module
from postcode_privacy.cli import main
from postcode_privacy.errors import InvalidParameterError, SourceDataError
from postcode_privacy.graph.build import build_graph
from postcode_privacy.sources.codepoint import read_codepoint
from postcode_privacy.sources.onspd import read_onspd
from postcode_privacy.sources.population import read_population, read_population_source

FIXTURES = Path(__file__).parent / "fixtures" / "sources"
ONSPD = FIXTURES / "ONSPD_FEB_2024_UK.csv"
SECRET = "QZXSECRETQZX"  # a value no message may contain


def _message(excinfo) -> str:
    return str(excinfo.value)


# -- messages never quote a cell ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        # headerless: the first row is data, so it names no column
        (f"{SECRET} 1AA,{SECRET}\nAB1 0AA,3\n", "no postcode column"),
        (f"postcode,{SECRET}\nAB1 0AA,{SECRET}\n", "line 2: column 2 .*not a non-negative"),
        (f"postcode,{SECRET}\nAB1 0AA,1{'9' * 30}\n", "line 2: column 2 .*too large"),
        (f"postcode,sex,count\nAB1 0AA,,{SECRET}\n", "line 2: column 3"),
        (f"postcode,{SECRET},other\nAB1 0AA,1\n", "no count column"),
    ],
)
def test_population_messages_name_positions_not_values(tmp_path, content, expected):
    path = tmp_path / "pop.csv"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(SourceDataError, match=expected) as excinfo:
        read_population(path)
    assert "pop.csv" in _message(excinfo)
    assert SECRET.lower() not in _message(excinfo).lower()


def test_population_sex_column_named_by_position(tmp_path):
    path = tmp_path / "pop.csv"
    path.write_text(f"postcode,{SECRET} sex,count\nAB1 0AA,,1\n", encoding="utf-8")
    with pytest.raises(SourceDataError, match="line 2: column 2 .*empty") as excinfo:
        read_population(path)
    assert SECRET.lower() not in _message(excinfo).lower()


def test_undecodable_bytes_are_not_quoted(tmp_path):
    population = tmp_path / "pop.csv"
    population.write_bytes(b"postcode,population\nAB1 0AA,3\xfe\n")
    with pytest.raises(SourceDataError, match="pop.csv is not UTF-8 text") as excinfo:
        read_population(population)
    assert "0xfe" not in _message(excinfo)

    onspd = tmp_path / "o.csv"
    onspd.write_bytes(b"pcds,oseast1m,osnrth1m\nAB1 0AA,1\xfe,3\n")
    with pytest.raises(SourceDataError, match="o.csv is not UTF-8 text") as excinfo:
        read_onspd(onspd)
    assert "0xfe" not in _message(excinfo)


def test_malformed_csv_names_the_line_only(tmp_path):
    path = tmp_path / "pop.csv"
    path.write_text(f"postcode,population\nAB1 0AA,3\nAB1 0AB,4,{SECRET}\n", encoding="utf-8")
    with pytest.raises(SourceDataError, match="not a well-formed CSV file at line 3") as excinfo:
        read_population(path)
    assert SECRET not in _message(excinfo)


@pytest.mark.parametrize(
    ("rows", "line"),
    [
        # a row with an extra field, after a quoted field spanning three lines: line 6
        (["AB1 0AA,3", '"AB1\n\n0AB",4', "AB1 0AD,4,x"], 6),
        # the same after blank and whitespace-only lines, the quoted break a CRLF
        (["", " \t", "AB1 0AA,3", '"AB1\r\n0AB",4', "AB1 0AD,4,x"], 7),
        # an unterminated quote, after a quoted field spanning two lines: it opens on line 5
        (['"AB1\n0AA",3', "AB1 0AB,4", '"AB1 0AD,4', "AB1 0AE,5"], 5),
    ],
)
def test_malformed_csv_names_the_line_an_editor_counts(tmp_path, rows, line):
    """pandas counts a quoted field spanning lines as one line; an editor, and the message,
    count every line of it, in every source reader."""
    body = "\n".join(rows) + "\n"
    expected = rf"is not a well-formed CSV file at line {line}\b"
    population = tmp_path / "pop.csv"
    population.write_text("postcode,population\n" + body, encoding="utf-8", newline="")
    with pytest.raises(SourceDataError, match=expected):
        read_population(population)

    # (ONSPD is read by column name, so pandas took a row with an extra field as it stood)
    onspd = tmp_path / "onspd.csv"
    onspd_rows = body.replace(",3", ",3,1").replace(",4", ",4,1").replace(",5", ",5,1")
    onspd.write_text("pcds,oseast1m,osnrth1m\n" + onspd_rows, encoding="utf-8", newline="")
    with pytest.raises(SourceDataError, match=rf"^onspd.csv {expected}"):
        read_onspd(onspd)

    source = tmp_path / "cp"
    shutil.copytree(FIXTURES / "codepoint", source)
    data = sorted((source / "Data" / "CSV").glob("*.csv"))[0]
    # headerless: the rows start on line 1, so every line is one less than above
    cp_rows = body.replace(",3", ",10,1,2").replace(",4", ",10,1,2").replace(",5", ",10,1,2")
    data.write_text(cp_rows, encoding="utf-8", newline="")
    with pytest.raises(SourceDataError, match=rf"{data.name} .*at line {line - 1}\b"):
        read_codepoint(source)


def test_onspd_bad_coordinate_names_column_by_position_and_role(tmp_path):
    path = tmp_path / "o.csv"
    path.write_text(f"pcds,OSEAST1M,osnrth1m\nAB1 0AA,{SECRET},3\n", encoding="utf-8")
    with pytest.raises(SourceDataError, match=r"line 2: column 2 \(easting\) is not a number"):
        read_onspd(path)


def test_codepoint_bad_gzip_does_not_quote_its_bytes(tmp_path):
    data = tmp_path / "cp" / "Data" / "CSV"
    data.mkdir(parents=True)
    (data / "ab.csv.gz").write_bytes(b"QZ" + SECRET.encode())
    with pytest.raises(SourceDataError, match="ab.csv.gz is truncated or not in") as excinfo:
        read_codepoint(tmp_path / "cp")
    assert "QZ" not in _message(excinfo)


# -- inputs must be regular files --------------------------------------------------------------


def test_fifo_inputs_are_refused_without_waiting(tmp_path):
    fifo = fifo_nobody_writes(tmp_path / "fifo.csv", after=3)
    for reader in (read_population, read_onspd, read_codepoint):
        with pytest.raises(SourceDataError, match="fifo.csv is not a regular file"):
            reader(fifo)


def test_a_fifo_among_codepoint_data_files_is_refused(tmp_path):
    data = tmp_path / "cp" / "Data" / "CSV"
    data.mkdir(parents=True)
    fifo_nobody_writes(data / "ab.csv", after=3)
    with pytest.raises(SourceDataError, match="ab.csv is not a regular file"):
        read_codepoint(tmp_path / "cp")


@pytest.mark.skipif(not os.path.exists("/dev/null"), reason="needs /dev/null")
def test_a_device_is_refused(tmp_path):
    # /dev/null stands for every device: /dev/zero would never end (and fill memory).
    for reader in (read_population, read_onspd):
        with pytest.raises(SourceDataError, match="null is not a regular file"):
            reader("/dev/null")
    data = tmp_path / "cp" / "Data" / "CSV"
    data.mkdir(parents=True)
    (data / "ab.csv").symlink_to("/dev/null")
    with pytest.raises(SourceDataError, match="ab.csv is not a regular file"):
        read_codepoint(tmp_path / "cp")


def test_build_refuses_a_fifo_population_file(tmp_path, capsys):
    fifo = fifo_nobody_writes(tmp_path / "pop.csv", after=3)
    out = tmp_path / "g.ppgraph"
    args = ["build", "--onspd", str(ONSPD), "--population", str(fifo), "-o", str(out), "--quiet"]
    assert main(args) == 7
    assert "pop.csv is not a regular file" in capsys.readouterr().err
    assert not out.exists()


# -- provenance records the bytes read -------------------------------------------------------------


def test_provenance_hashes_the_population_bytes_read_not_a_file_swapped_in_later(
    tmp_path, monkeypatch
):
    """The population file replaced under its name after it was read (here, while its counts
    are applied): the graph records the digest of what shaped its prior, not of the newcomer."""
    import postcode_privacy.sources.population as population_module
    from postcode_privacy.graph.national import build_from_sources

    path = tmp_path / "pop.csv"
    shutil.copy(FIXTURES / "population.csv", path)
    read_digest = hashlib.sha256(path.read_bytes()).hexdigest()
    real_apply = population_module.apply_population

    def apply_then_swap(*args, **kwargs):
        path.write_text("postcode,population\nAB1 0AA,999\n", encoding="utf-8")
        return real_apply(*args, **kwargs)

    monkeypatch.setattr(population_module, "apply_population", apply_then_swap)
    graph = build_from_sources(onspd=ONSPD, population=path)
    assert graph.provenance["population"]["sha256"] == read_digest


def test_provenance_hashes_each_codepoint_file_as_read_not_as_it_is_later(tmp_path, monkeypatch):
    """A Code-Point directory's data files are hashed from the handle they were parsed from: a
    file rewritten after it was read (while the next one is read) keeps its first digest."""
    import postcode_privacy.sources.codepoint as codepoint_module

    source = tmp_path / "cp"
    shutil.copytree(FIXTURES / "codepoint", source)
    files = sorted((source / "Data" / "CSV").glob("*.csv"))
    assert len(files) >= 2
    digests = {
        f"cp/{f.relative_to(source).as_posix()}": hashlib.sha256(f.read_bytes()).hexdigest()
        for f in files
    }
    real_read = codepoint_module._read_file

    def read_then_rewrite_the_first(files_, name, district):
        frame = real_read(files_, name, district)
        with open(files[0], "a", encoding="utf-8") as handle:
            handle.write("\n")  # after its own read, so only its later bytes differ
        return frame

    monkeypatch.setattr(codepoint_module, "_read_file", read_then_rewrite_the_first)
    table = read_codepoint(source)
    assert {s["path"]: s["sha256"] for s in table.sources} == digests


def _one_digit_changed(data: bytes) -> bytes:
    """``data`` with its last digit changed: the same size, so only the file's times tell."""
    at = max(data.rfind(bytes([d])) for d in b"0123456789")
    return data[:at] + (b"1" if data[at : at + 1] == b"0" else b"0") + data[at + 1 :]


def _rewrite_in_place(path: Path, data: bytes) -> None:
    """A writer that changes the file itself (same inode), as an editor saving over it may."""
    time.sleep(0.02)  # past the file system's timestamp granularity
    with open(path, "r+b") as handle:
        handle.write(data)
        handle.truncate()


def test_a_source_rewritten_in_place_while_read_is_refused_not_hashed_afresh(tmp_path, monkeypatch):
    """ONSPD and Code-Point digests are taken by reading the open file again: a file rewritten
    in place after it was parsed would be recorded with bytes the build never used, so the
    build stops.  (The population file is hashed from the very bytes parsed.)"""
    import postcode_privacy.sources.codepoint as codepoint_module
    import postcode_privacy.sources.population as population_module

    population = tmp_path / "pop.csv"
    shutil.copy(FIXTURES / "population.csv", population)
    real_read_csv = pd.read_csv

    def parse_then_rewrite(target):
        def read_csv(*args, **kwargs):
            frame = real_read_csv(*args, **kwargs)
            _rewrite_in_place(target, _one_digit_changed(target.read_bytes()))
            return frame

        return read_csv

    # The population file is read once, into memory: its digest is of the bytes parsed, and
    # a rewrite after that changes neither.
    parsed = population.read_bytes()
    monkeypatch.setattr(population_module.pd, "read_csv", parse_then_rewrite(population))
    counts, digest = read_population_source(population)
    monkeypatch.undo()
    assert (
        digest
        == hashlib.sha256(parsed).hexdigest()
        != hashlib.sha256(population.read_bytes()).hexdigest()
    )
    assert counts == read_population(FIXTURES / "population.csv")

    onspd = tmp_path / "onspd.csv"
    shutil.copy(ONSPD, onspd)
    real_filter = onspd_module._filter_chunk

    def filter_then_rewrite(*args, **kwargs):
        kept = real_filter(*args, **kwargs)
        _rewrite_in_place(onspd, b"pcd,oseast1m,osnrth1m\n")
        return kept

    monkeypatch.setattr(onspd_module, "_filter_chunk", filter_then_rewrite)
    with pytest.raises(SourceDataError, match="^onspd.csv changed while it was being read"):
        read_onspd(onspd)
    monkeypatch.undo()

    source = tmp_path / "cp"
    shutil.copytree(FIXTURES / "codepoint", source)
    first = sorted((source / "Data" / "CSV").glob("*.csv"))[0]
    monkeypatch.setattr(codepoint_module.pd, "read_csv", parse_then_rewrite(first))
    with pytest.raises(SourceDataError, match=f"{first.name} changed while it was being read"):
        read_codepoint(source)


def test_a_codepoint_file_replaced_before_its_bad_line_is_located_is_refused(tmp_path, monkeypatch):
    """A blank coordinate makes the reader parse the file again (as text) to name the line; if
    the name holds another file by then, nothing there is bad: the build stops rather than
    keep the first file's rows under the second file's digest."""
    import postcode_privacy.sources.codepoint as codepoint_module

    source = tmp_path / "cp"
    shutil.copytree(FIXTURES / "codepoint", source)
    data = sorted((source / "Data" / "CSV").glob("*.csv"))[0]
    clean = data.read_bytes()
    lines = clean.split(b"\n")
    fields = lines[0].split(b",")
    fields[2] = b""  # a blank easting
    lines[0] = b",".join(fields)
    data.write_bytes(b"\n".join(lines))
    real_parse = codepoint_module._parse
    parsed = []

    def parse_then_replace(files, name, usecols, dtype):
        frame = real_parse(files, name, usecols, dtype)
        parsed.append(name)
        if name.endswith(data.name) and parsed.count(name) == 1:
            replacement = data.with_suffix(".new")
            replacement.write_bytes(clean)
            os.replace(replacement, data)
        return frame

    monkeypatch.setattr(codepoint_module, "_parse", parse_then_replace)
    with pytest.raises(SourceDataError, match="changed while it was being read"):
        read_codepoint(source)


# -- --max-edge-km -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    ["nan", "NaN", "inf", "-1", "0", "10000.5", "1e308", "1e400", "-1e400", "0" * 1200 + "5"]
    # (a typo or another script's digits meant a number: a review of round 36)
    + ["1_0", "\u0661", "\uff15\uff10", "0x10", "2,5", ""],
)
def test_max_edge_km_out_of_range_is_a_usage_error(tmp_path, capsys, value):
    out = tmp_path / "g.ppgraph"
    args = ["build", "--onspd", str(ONSPD), "--max-edge-km", value, "-o", str(out), "--quiet"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "Invalid value for '--max-edge-km'" in err and "inf" not in err.replace("'inf'", "")
    assert "too large" not in err and len(err) < 500  # (a long value is never echoed)
    assert not out.exists()


def test_build_graph_refuses_a_limit_with_no_finite_length_in_metres():
    with pytest.raises(InvalidParameterError, match="max_edge_km must be a positive finite"):
        build_graph(["AB1 0AA", "AB1 0AB"], [0, 1], [0, 0], max_edge_km=1e306)


# -- compressed sources: bounded, and their failures are messages -------------------------------


def _onspd_zip(path, flag_bits=0):
    import zipfile

    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("Data/ONSPD_FEB_2024_UK.csv", ONSPD.read_bytes())
    if flag_bits:
        data = bytearray(path.read_bytes())
        data[6] |= flag_bits
        central = data.rfind(b"PK\x01\x02")
        data[central + 8] |= flag_bits
        path.write_bytes(bytes(data))
    return path


def test_onspd_zip_member_larger_than_the_bound_is_refused(tmp_path, monkeypatch, capsys):
    import postcode_privacy.sources._reading as reading

    monkeypatch.setattr(reading, "MAX_MEMBER_BYTES", 1000)  # the fixture is larger than this
    out = tmp_path / "g.ppgraph"
    args = ["build", "--onspd", str(_onspd_zip(tmp_path / "o.zip")), "-o", str(out), "--quiet"]
    assert main(args) == 7
    assert "decompresses to more than" in capsys.readouterr().err
    assert not out.exists()


def test_encrypted_onspd_zip_member_is_a_message(tmp_path, capsys):
    out = tmp_path / "g.ppgraph"
    zipped = _onspd_zip(tmp_path / "o.zip", flag_bits=1)
    assert main(["build", "--onspd", str(zipped), "-o", str(out), "--quiet"]) == 7
    assert "is encrypted" in capsys.readouterr().err
    assert not out.exists()


def test_codepoint_gzip_bomb_is_refused(tmp_path, monkeypatch):
    import gzip

    import postcode_privacy.sources.codepoint as codepoint

    monkeypatch.setattr(codepoint, "MAX_FILE_BYTES", 1 << 20)
    data = tmp_path / "cp" / "Data" / "CSV"
    data.mkdir(parents=True)
    with gzip.open(data / "ab.csv.gz", "wb") as handle:
        handle.write(b'"AB1 0AA",10,385386,801193\n' * 100_000)  # 2.7 MB from a few kB
    with pytest.raises(SourceDataError, match="ab.csv.gz decompresses to more than 1 MiB"):
        read_codepoint(tmp_path / "cp")


def test_population_total_above_the_prior_bound_names_the_option(tmp_path, capsys):
    import csv

    from postcode_privacy.postcodes import try_normalise

    with ONSPD.open(encoding="utf-8") as handle:
        postcodes = {try_normalise(row["pcds"]) for row in csv.DictReader(handle)} - {None}
    population = tmp_path / "pop.csv"
    population.write_text(
        "postcode,population\n" + "".join(f"{p},{'9' * 18}\n" for p in sorted(postcodes)),
        encoding="utf-8",
    )
    out = tmp_path / "g.ppgraph"
    args = ["build", "--onspd", str(ONSPD), "--population", str(population), "-o", str(out)]
    assert main([*args, "--quiet"]) == 7
    err = capsys.readouterr().err
    assert "pop.csv" in err and "--population" in err and "2**62" in err
    assert not out.exists()


def test_population_messages_name_the_line_blank_lines_included(tmp_path):
    """pandas skips blank lines, and a quoted field may span lines: the line named is the
    record's own line in the file, as an editor numbers it."""
    path = tmp_path / "pop.csv"
    path.write_text(
        'postcode,population\n\nAB10 1AB,20\n\n\n"SW1A\n1AA",3\nSW1A 2AA,xx\n', encoding="utf-8"
    )
    with pytest.raises(SourceDataError, match=r"^pop.csv: line 8: column 2 \(the count\)"):
        read_population(path)  # (the quoted postcode spans lines 6 and 7)
    path.write_text("postcode,population\n\nAB10 1AB,20\n\n\nSW1A 1AA,xx\n", encoding="utf-8")
    with pytest.raises(SourceDataError, match=r"^pop.csv: line 6: column 2 \(the count\)"):
        read_population(path)


def test_onspd_and_codepoint_messages_name_the_line_blank_lines_included(tmp_path):
    """As for the population file: the line named is the record's line in the file, though
    pandas skipped the blank lines before it."""
    lines = ONSPD.read_text(encoding="utf-8").splitlines()
    fields = lines[3].split(",")
    fields[lines[0].split(",").index("oseast1m")] = "abc"
    lines[3] = ",".join(fields)  # the third record, after two blank lines: line 6
    onspd = tmp_path / "onspd.csv"
    onspd.write_text("\n".join([lines[0], "", "", *lines[1:]]) + "\n", encoding="utf-8")
    with pytest.raises(SourceDataError, match=r"^onspd.csv: line 6: column 12 \(easting\)"):
        read_onspd(onspd)

    source = tmp_path / "cp"
    shutil.copytree(FIXTURES / "codepoint", source)
    data = sorted((source / "Data" / "CSV").glob("*.csv"))[0]
    rows = data.read_text(encoding="utf-8").splitlines()
    fields = rows[1].split(",")
    fields[2] = "abc"  # the second record's easting, after one blank line: line 3
    rows[1] = ",".join(fields)
    data.write_text("\n".join([rows[0], "", *rows[1:]]) + "\n", encoding="utf-8")
    with pytest.raises(SourceDataError, match=rf"{data.name}: line 3: field 3 is not a number"):
        read_codepoint(source)


def test_lines_pandas_skips_or_reads_whole_are_counted_as_it_does(tmp_path):
    """pandas skips a line of spaces and tabs as blank, and reads a field of any length; the
    csv module that counts lines must do the same (its default field limit is 128 KiB)."""
    path = tmp_path / "pop.csv"
    path.write_text("postcode,population\n  \t \nAB10 1AB,20\nSW1A 1AA,xx\n", encoding="utf-8")
    with pytest.raises(SourceDataError, match=r"^pop.csv: line 4: column 2 \(the count\)"):
        read_population(path)
    long_name = "x" * 200_000
    path.write_text(
        f'postcode,population,note\n\nAB10 1AB,20,"{long_name}"\nSW1A 1AA,xx,y\n', encoding="utf-8"
    )
    with pytest.raises(SourceDataError, match=r"^pop.csv: line 4: column 2 \(the count\)"):
        read_population(path)


def test_a_codepoint_zip_member_is_named_after_its_zip(tmp_path):
    """A message about a file inside a Code-Point zip names the zip first, as ONSPD's do: a
    member's own name ("Data/CSV/sw.csv") does not say which of several downloads is at fault."""
    archive = tmp_path / "codepo_gb.zip"
    with zipfile.ZipFile(archive, "w") as out:
        for path in sorted((FIXTURES / "codepoint").rglob("*")):
            if path.is_file():
                data = path.read_text(encoding="utf-8")
                if path.suffix == ".csv" and "Data" in path.parts:
                    rows = data.splitlines()
                    fields = rows[1].split(",")
                    fields[2] = "abc"  # the second record's easting
                    rows[1] = ",".join(fields)
                    data = "\n".join(rows) + "\n"
                out.writestr(path.relative_to(FIXTURES / "codepoint").as_posix(), data)
    first = sorted((FIXTURES / "codepoint" / "Data" / "CSV").glob("*.csv"))[0].name
    with pytest.raises(
        SourceDataError, match=rf"^codepo_gb\.zip:Data/CSV/{first}: line 2: field 3 is not a number"
    ):
        read_codepoint(archive)


def test_an_onspd_file_rewritten_before_its_bad_line_is_counted_is_refused(tmp_path, monkeypatch):
    """The line of a bad record is counted by reading the file again; if it was rewritten in
    place meanwhile, that count is of other bytes, so the build stops instead of naming it."""
    lines = ONSPD.read_text(encoding="utf-8").splitlines()
    fields = lines[3].split(",")
    fields[lines[0].split(",").index("oseast1m")] = "abc"
    lines[3] = ",".join(fields)
    onspd = tmp_path / "onspd.csv"
    onspd.write_text("\n".join(lines) + "\n", encoding="utf-8")
    real_line_of_record = onspd_module.line_of_record

    def rewrite_then_count(handle, record, *, header):
        _rewrite_in_place(onspd, ("\n".join([lines[0], "", "", *lines[1:]]) + "\n").encode())
        return real_line_of_record(handle, record, header=header)

    monkeypatch.setattr(onspd_module, "line_of_record", rewrite_then_count)
    with pytest.raises(SourceDataError, match="^onspd.csv changed while it was being read"):
        read_onspd(onspd)


@pytest.mark.parametrize(
    ("value", "km"),
    [("2.5", 2.5), (" 3 ", 3.0), ("1e1", 10.0), (".5", 0.5), ("\u00a02", 2.0), ("+1.", 1.0)],
)
def test_max_edge_km_takes_plain_decimals(value, km):
    from postcode_privacy._click_types import PlainDecimals

    assert PlainDecimals(min=0, max=10_000, min_open=True).convert(value, None, None) == km
