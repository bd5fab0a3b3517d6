"""Every output writer round-trips (docs/release.md, "What `perturb` writes").

Reading a release back with pandas (``dtype=str, keep_default_na=False`` for CSV) gives exactly
the input's records, in order, with every cell other than the postcodes unchanged, whatever the
cells hold: CR, LF, CRLF, quotes, commas, surrounding spaces, NUL, long text, non-ASCII.
"""

from __future__ import annotations

import csv
import gzip
import io

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from postcode_privacy import Key
from postcode_privacy.graph.build import build_graph
from postcode_privacy.release import release_file

UNITS = "ABDEFGHJLNPQRSTUWXYZ"


@pytest.fixture(scope="module")
def small():
    codes, east, north = [], [], []
    for r in range(3):
        for c in range(4):
            codes.append(f"LS{r + 1} {c + 1}{UNITS[r]}{UNITS[c]}")
            east.append(400000.0 + 150 * c)
            north.append(430000.0 + 120 * r)
    return build_graph(codes, east, north), codes


KEY = Key.from_bytes(b"r" * 32)

# Cells chosen to break writers: line breaks of every kind, quotes, delimiters, padding, NUL.
NASTY = st.sampled_from(
    [
        "a\rb",
        "\r",
        "x\r\ny",
        "\n",
        '"',
        'say "hi"',
        ",",
        " padded ",
        "\t",
        "\x00",
        "nul\x00mid",
        "é ü 中文 🙂",
        "",
        "#",
        "\ufeffbom",
        "x" * 5000,
    ]
)
CELL = st.one_of(
    NASTY,
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=30),
    st.lists(NASTY, min_size=2, max_size=4).map("".join),
)


def records(draw_cells, codes):
    n = len(draw_cells)
    return pd.DataFrame(
        {
            "person": [f"{i:03d}" for i in range(n)],
            "pc": [codes[(5 * i) % len(codes)] for i in range(n)],
            "note": [c[0] for c in draw_cells],
            "other": [c[1] for c in draw_cells],
        }
    )


def write_input(df: pd.DataFrame, path):
    # The csv module with QUOTE_ALL writes any cell unambiguously (CR included).
    text = io.StringIO(newline="")
    writer = csv.writer(text, quoting=csv.QUOTE_ALL, lineterminator="\n")
    writer.writerow(df.columns)
    writer.writerows(df.itertuples(index=False))
    path.write_bytes(text.getvalue().encode("utf-8"))


def read_back(path) -> pd.DataFrame:
    if str(path).endswith((".parquet", ".pq")):
        return pd.read_parquet(path).astype(object)
    return pd.read_csv(path, dtype=str, keep_default_na=False)


def check_round_trip(df, out):
    back = read_back(out)
    assert list(back.columns) == ["person", "note", "other", "postcode_dp"]
    assert len(back) == len(df)
    assert back["person"].tolist() == df["person"].tolist()
    assert back["note"].tolist() == df["note"].tolist()
    assert back["other"].tolist() == df["other"].tolist()
    assert back["postcode_dp"].str.fullmatch(r"LS\d \d[A-Z]{2}").all()


@pytest.mark.parametrize("suffix", [".csv", ".csv.gz", ".parquet"])
@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@pytest.mark.slow  # over 2 s (CONTRIBUTING.md, "Running the tests")
@given(cells=st.lists(st.tuples(CELL, CELL), min_size=1, max_size=12))
def test_every_writer_round_trips_any_cell(small, tmp_path_factory, suffix, cells):
    graph, codes = small
    df = records(cells, codes)
    base = tmp_path_factory.mktemp("rt")
    src = base / "in.csv"
    write_input(df, src)
    out = base / f"out{suffix}"
    release_file(
        src,
        out,
        key=KEY,
        epsilon="1",
        id_column="person",
        postcode_column="pc",
        graph=graph,
        chunk_size=5,
    )
    check_round_trip(df, out)


def test_the_pandas_the_package_requires_keeps_nul_and_refuses_extra_fields(small, tmp_path):
    """pandas 2 (allowed until round 29) ended a CSV cell at NUL without a word ("123\\0456"
    read as subject "123"), and released a record's extra field or refused it by chunk size
    (reviews of round 28). pyproject requires pandas 3, which keeps every character and
    refuses a record longer than the header at every chunk size."""
    import tomllib
    from pathlib import Path

    from postcode_privacy.errors import InputDataError

    pyproject = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())
    assert "pandas>=3.0" in pyproject["project"]["dependencies"]
    assert int(pd.__version__.split(".")[0]) >= 3
    graph, codes = small
    df = records([("x", "y"), ("multi\nline", "z"), ("nul\x00mid", "w")], codes)
    src = tmp_path / "in.csv"
    write_input(df, src)
    options = dict(key=KEY, epsilon="1", id_column="person", postcode_column="pc", graph=graph)
    release_file(src, tmp_path / "out.csv", **options)
    check_round_trip(df, tmp_path / "out.csv")
    extra = tmp_path / "extra.csv"
    extra.write_text(f"person,pc\n1,{codes[0]}\n2,{codes[1]},EXTRA\n")
    for size in (1, 2, 100):
        with pytest.raises(InputDataError, match="fields"):
            release_file(extra, tmp_path / f"x{size}.csv", chunk_size=size, **options)


def test_a_bare_carriage_return_does_not_add_a_row(small, tmp_path):
    """The defect as reported: 20 records read back as 21 with a CR inside a quoted cell."""
    graph, codes = small
    df = records([("x", "y")] * 20, codes)
    df.loc[3, "note"] = "before\rafter"
    write_input(df, tmp_path / "in.csv")
    for name in ("out.csv", "out.csv.gz"):
        release_file(
            tmp_path / "in.csv",
            tmp_path / name,
            key=KEY,
            epsilon="1",
            id_column="person",
            postcode_column="pc",
            graph=graph,
        )
        check_round_trip(df, tmp_path / name)
    # A cell with a CR longer than the csv module's default 128 KiB field limit.
    df.loc[5, "other"] = "long\r" * 40_000
    write_input(df, tmp_path / "in.csv")
    release_file(
        tmp_path / "in.csv",
        tmp_path / "long.csv",
        key=KEY,
        epsilon="1",
        id_column="person",
        postcode_column="pc",
        graph=graph,
    )
    check_round_trip(df, tmp_path / "long.csv")
    raw = gzip.decompress((tmp_path / "out.csv.gz").read_bytes())
    assert b'"before\rafter"' in raw
    # Files without a CR are written exactly as before (pandas' own quoting).
    plain = records([("a,b", 'q"q')], codes)
    write_input(plain, tmp_path / "plain.csv")
    release_file(
        tmp_path / "plain.csv",
        tmp_path / "plain_out.csv",
        key=KEY,
        epsilon="1",
        id_column="person",
        postcode_column="pc",
        graph=graph,
    )
    assert (tmp_path / "plain_out.csv").read_text().splitlines()[1].startswith('000,"a,b","q""q",')


def test_parquet_to_parquet_round_trips_types_and_text(small, tmp_path):
    graph, codes = small
    table = pa.table(
        {
            "person": pa.array([1, 2, 3], pa.int64()),
            "pc": pa.array(codes[:3]),
            "note": pa.array(["a\rb", None, "x\x00y"]),
            "when": pa.array([1.5, None, -0.0]),
        }
    )
    pq.write_table(table, tmp_path / "in.parquet")
    release_file(
        tmp_path / "in.parquet",
        tmp_path / "out.parquet",
        key=KEY,
        epsilon="1",
        id_column="person",
        postcode_column="pc",
        graph=graph,
    )
    back = pq.read_table(tmp_path / "out.parquet")
    assert back.column("person").to_pylist() == [1, 2, 3]
    assert back.column("note").to_pylist() == ["a\rb", None, "x\x00y"]
    assert back.column("when").to_pylist() == [1.5, None, -0.0]


PLAIN_CELL = st.one_of(
    st.none(),
    st.sampled_from(["", " ", "\t", "\x00", "é", "#", "nan", "None", "0012", "a;b", "\ufeff"]),
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=8),
    NASTY,
)


@settings(max_examples=300, deadline=None)
@given(
    width=st.integers(1, 4),
    cells=st.lists(st.lists(PLAIN_CELL, min_size=4, max_size=4), max_size=15),
    dtype=st.sampled_from([object, "str"]),
)
@pytest.mark.slow  # over 2 s (CONTRIBUTING.md, "Running the tests")
def test_text_cells_are_written_as_pandas_writes_them(width, cells, dtype):
    """The CSV writer's quoting (writers.py ``_csv_rows``) gives pandas' very text for a CSV
    input's cells, so releases of CSV inputs keep their bytes; pandas (the csv module) leaves
    a bare CR unquoted, which the writer quotes, so such cells are compared quoted."""
    from postcode_privacy.release.csv_text import series_text
    from postcode_privacy.release.writers import _csv_rows

    frame = pd.DataFrame(
        [row[:width] for row in cells], columns=[f"c{k}" for k in range(width)], dtype=object
    ).astype(dtype)
    if len(frame) == 0:
        return
    written = _csv_rows([series_text(frame[name]) for name in frame.columns])
    bare_cr = any("\r" in c for row in cells for c in row[:width] if c is not None)
    quoting = csv.QUOTE_ALL if bare_cr else csv.QUOTE_MINIMAL
    expected = frame.to_csv(index=False, header=False, lineterminator="\n", quoting=quoting)
    if bare_cr:
        assert list(csv.reader(io.StringIO(written, newline=""))) == list(
            csv.reader(io.StringIO(expected, newline=""))
        )
    else:
        assert written == expected
