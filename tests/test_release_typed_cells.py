"""Typed cells (a Parquet input) in a release (docs/release.md, "Typed cells in CSV").

A CSV cell's text depends on its value and type alone, never on its neighbours or its chunk
(a float32 was written differently in a chunk that also held a bare carriage return), and
reads back as exactly the same value; what has no such text is refused naming the record and
column, or the column before any work; a Parquet release keeps every type pyarrow can store.
The text is read back here by a parser of its own, not by the writer's code.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import math
import re
import struct
from decimal import Decimal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from postcode_privacy import InputDataError, Key, perturb_frame
from postcode_privacy.cli import main
from postcode_privacy.graph.build import build_graph
from postcode_privacy.keyfile import write_key_file
from postcode_privacy.release import release_file
from postcode_privacy.release.reader import TableReader
from postcode_privacy.release.writers import open_writer

UNITS = "ABDEFGHJLNPQRSTUWXYZ"
KEY = Key.from_bytes(b"t" * 32)
NS = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}
EPOCH = dt.datetime(1970, 1, 1)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    codes, east, north = [], [], []
    for r in range(3):
        for c in range(4):
            codes.append(f"LS{r + 1} {c + 1}{UNITS[r]}{UNITS[c]}")
            east.append(400000.0 + 150 * c)
            north.append(430000.0 + 120 * r)
    graph = build_graph(codes, east, north)
    base = tmp_path_factory.mktemp("typed")
    graph.save(base / "g.ppgraph")
    write_key_file(KEY, base / "k.key")
    return graph, codes, base


# -- reading a cell back, independently of the writer ---------------------------------------------

_STAMP = re.compile(r"(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{6}|\d{9}))?([+-].*)?")
_CLOCK = re.compile(r"(\d\d):(\d\d):(\d\d)(?:\.(\d{6}|\d{9}))?")
_DURATION = re.compile(r"(-?\d+) days \+?(\d\d):(\d\d):(\d\d)(?:\.(\d{6}|\d{9}))?")


def _ns(fraction: str | None) -> int:
    return 0 if fraction is None else int(fraction.ljust(9, "0"))


def _offset_seconds(text: str) -> int:
    sign = -1 if text[0] == "-" else 1
    parts = [int(p) for p in text[1:].split(":")]
    return sign * (parts[0] * 3600 + parts[1] * 60 + (parts[2] if len(parts) > 2 else 0))


def read_cell(text: str, kind):
    """The value a CSV cell's text stands for, in the form ``stored`` gives the Arrow value."""
    if text == "":
        return None
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    if pa.types.is_integer(kind):
        assert re.fullmatch(r"-?\d+", text)
        return int(text)
    if pa.types.is_floating(kind):
        value = float(text)
        return "nan" if math.isnan(value) else struct.pack(">d", value)
    if pa.types.is_boolean(kind):
        return {"True": True, "False": False}[text]
    if pa.types.is_decimal(kind):
        return Decimal(text).as_tuple()
    if pa.types.is_date(kind):
        return dt.date.fromisoformat(text)
    if pa.types.is_time(kind):
        h, m, s, f = _CLOCK.fullmatch(text).groups()
        return (int(h) * 3600 + int(m) * 60 + int(s)) * 10**9 + _ns(f)
    if pa.types.is_duration(kind):
        d, h, m, s, f = _DURATION.fullmatch(text).groups()
        return ((int(d) * 24 + int(h)) * 3600 + int(m) * 60 + int(s)) * 10**9 + _ns(f)
    if pa.types.is_timestamp(kind):
        *fields, fraction, offset = _STAMP.fullmatch(text).groups()
        y, mo, d, h, mi, s = map(int, fields)
        seconds = (dt.datetime(y, mo, d, h, mi, s) - EPOCH) // dt.timedelta(seconds=1)
        assert (offset is None) == (kind.tz is None)
        if offset is not None:
            seconds -= _offset_seconds(offset)
        return seconds * 10**9 + _ns(fraction)
    return text


def stored(array: pa.Array) -> list:
    """Each value of ``array`` as ``read_cell`` gives it back."""
    kind = array.type
    if pa.types.is_dictionary(kind):
        return stored(array.dictionary_decode())
    if pa.types.is_floating(kind):
        return [
            None if v is None else "nan" if math.isnan(v) else struct.pack(">d", v)
            for v in array.cast(pa.float64()).to_pylist()
        ]
    if pa.types.is_decimal(kind):
        return [None if v is None else v.as_tuple() for v in array.to_pylist()]
    if pa.types.is_time(kind) or pa.types.is_duration(kind) or pa.types.is_timestamp(kind):
        width = pa.int32() if kind.bit_width == 32 else pa.int64()
        return [None if v is None else v * NS[kind.unit] for v in array.view(width).to_pylist()]
    return array.to_pylist()


# -- the typed columns --------------------------------------------------------------------------

FLOAT_EDGES = [0.1, -0.0, 0.0, math.inf, -math.inf, math.nan, 5e-324, 1e-310, 1e16, 1e-5, 1 / 3]


def _floats(dtype):
    finite = st.floats(allow_nan=False, width=np.finfo(dtype).bits)
    with np.errstate(over="ignore"):  # an edge past float16's range is its infinity
        edges = [float(dtype(v)) for v in FLOAT_EDGES]
    return st.one_of(finite, st.sampled_from(edges))


def _ints(kind):
    info = np.iinfo(kind.to_pandas_dtype())
    return st.integers(int(info.min), int(info.max))


def _in_units(unit, low, high):
    return st.integers(low * 10**9 // NS[unit], high * 10**9 // NS[unit])


# seconds from 1970 to 0001-01-02 and to 9999-12-30: any time zone keeps these in years 1-9999
FIRST, LAST = -62135510400, 253402041600
COLUMNS = {
    "f16": (pa.float16(), _floats(np.float16)),
    "f32": (pa.float32(), _floats(np.float32)),
    "f64": (pa.float64(), _floats(np.float64)),
    "i8": (pa.int8(), _ints(pa.int8())),
    "u16": (pa.uint16(), _ints(pa.uint16())),
    "i32": (pa.int32(), _ints(pa.int32())),
    "u64": (pa.uint64(), _ints(pa.uint64())),
    "i64": (pa.int64(), _ints(pa.int64())),
    "flag": (pa.bool_(), st.booleans()),
    "money": (
        pa.decimal128(38, 9),
        st.integers(-(10**38) + 1, 10**38 - 1).map(lambda i: Decimal(f"{i}E-9")),
    ),
    "wide": (
        pa.decimal256(76, 3),
        st.integers(-(10**76) + 1, 10**76 - 1).map(lambda i: Decimal(f"{i}E-3")),
    ),
    "day": (pa.date32(), st.integers(-719162, 2932896)),
    "naive_s": (pa.timestamp("s"), _in_units("s", FIRST, LAST)),
    "naive_ns": (pa.timestamp("ns"), st.integers(-(2**63) + 1, 2**63 - 1)),
    "london_us": (pa.timestamp("us", tz="Europe/London"), _in_units("us", FIRST, LAST)),
    "kolkata_ms": (pa.timestamp("ms", tz="Asia/Kolkata"), _in_units("ms", FIRST, LAST)),
    "offset_ns": (pa.timestamp("ns", tz="-03:30"), st.integers(-(2**63) + 1, 2**63 - 1)),
    "utc_s": (pa.timestamp("s", tz="UTC"), _in_units("s", FIRST, LAST)),
    "clock_ms": (pa.time32("ms"), st.integers(0, 86_399_999)),
    "clock_ns": (pa.time64("ns"), st.integers(0, 86_399_999_999_999)),
    "wait_s": (pa.duration("s"), st.integers(-(2**63) + 1, 2**63 - 1)),
    "wait_ns": (pa.duration("ns"), st.integers(-(2**63) + 1, 2**63 - 1)),
    "nothing": (pa.null(), st.none()),
}


def _column(kind, values):
    if pa.types.is_floating(kind):
        dtype = {16: np.float16, 32: np.float32, 64: np.float64}[kind.bit_width]
        mask = np.array([v is None for v in values])
        data = np.array([0.0 if v is None else v for v in values], dtype=dtype)
        return pa.array(data, kind, mask=mask)
    if pa.types.is_temporal(kind) and not pa.types.is_date(kind):
        width = pa.int32() if kind.bit_width == 32 else pa.int64()
        return pa.array(values, width).view(kind)
    if pa.types.is_date32(kind):
        return pa.array(values, pa.int32()).view(kind)
    return pa.array(values, kind)


@st.composite
def typed_tables(draw):
    n = draw(st.integers(1, 12))
    columns = {}
    for name, (kind, values) in COLUMNS.items():
        cells = draw(st.lists(st.one_of(st.none(), values), min_size=n, max_size=n))
        columns[name] = _column(kind, cells)
    carriage = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    return n, columns, carriage


def _csv_of(path, chunk_size: int) -> bytes:
    """What the CSV writer makes of ``path`` read in chunks of ``chunk_size`` records."""
    reader = TableReader(path, chunk_size)
    reader.refuse_values_csv_cannot_show(reader.columns)
    out = io.BytesIO()
    writer = open_writer(out, "out.csv", reader.columns)
    for chunk in reader.chunks():
        writer.write(chunk)
    writer.close(reader.columns)
    return out.getvalue()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@pytest.mark.slow  # over 2 s (CONTRIBUTING.md, "Running the tests")
@given(drawn=typed_tables())
def test_a_typed_cell_is_the_same_text_whatever_its_chunk_holds(tmp_path_factory, drawn):
    """Every type's text reads back as its value, and neither the chunk size nor a bare
    carriage return elsewhere in the chunk (which took pandas' quoting path, where float16
    and float32 were written in their own shortest form) changes a byte of it."""
    n, columns, carriage = drawn
    base = tmp_path_factory.mktemp("cells")
    texts = {}
    for variant, notes in (("plain", ["x"] * n), ("cr", ["a\rb" if c else "x" for c in carriage])):
        path = base / f"{variant}.parquet"
        pq.write_table(pa.table({"note": notes, **columns}), path)
        outputs = {_csv_of(path, size) for size in (1, 2, 5, n)}
        assert len(outputs) == 1
        rows = list(csv.reader(io.StringIO(outputs.pop().decode(), newline="")))
        assert rows[0] == ["note", *columns] and len(rows) == n + 1
        assert [row[0] for row in rows[1:]] == notes
        texts[variant] = [row[1:] for row in rows[1:]]
    assert texts["plain"] == texts["cr"]
    for position, (name, array) in enumerate(columns.items()):
        back = [read_cell(row[position], array.type) for row in texts["plain"]]
        assert back == stored(array), name


def test_float32_is_written_as_its_exact_value_in_every_chunk(small, tmp_path):
    """The defect as reported: the float32 nearest 0.1 was "0.10000000149011612" in a chunk of
    plain text and "0.1" in one holding a bare CR.  Now the first everywhere (it reads back as
    the same float, as float32 or float64), whatever the chunk size."""
    graph, codes, _ = small
    n = 9
    table = pa.table(
        {
            "person": pa.array(range(n), pa.int64()),
            "pc": [codes[i % len(codes)] for i in range(n)],
            "note": ["x\ry" if i == 7 else "x" for i in range(n)],
            "f32": pa.array(np.full(n, 0.1, np.float32)),
            "f16": pa.array(np.full(n, 0.1, np.float16)),
        }
    )
    pq.write_table(table, tmp_path / "in.parquet")
    outputs = []
    for chunk in (1, 4, 100):
        out = tmp_path / f"out{chunk}.csv"
        release_file(
            tmp_path / "in.parquet",
            out,
            key=KEY,
            graph=graph,
            epsilon=1,
            id_column="person",
            postcode_column="pc",
            chunk_size=chunk,
        )
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1] == outputs[2]
    back = pd.read_csv(tmp_path / "out1.csv", dtype=str, keep_default_na=False)
    assert back["f32"].tolist() == ["0.10000000149011612"] * n
    assert back["f16"].tolist() == ["0.0999755859375"] * n
    assert back["note"][7] == "x\ry"


# -- the edges of time --------------------------------------------------------------------------

ZONES = [None, "UTC", "Europe/London", "America/New_York", "Asia/Tokyo", "+05:30", "-03:30"]


def _cli(small, src, out, *extra):
    _, _, base = small
    return main(
        [
            "perturb",
            str(src),
            "-o",
            str(out),
            "--epsilon",
            "1",
            "--id-column",
            "person",
            "--postcode-column",
            "pc",
            "--graph",
            str(base / "g.ppgraph"),
            "--key",
            str(base / "k.key"),
            "-q",
            *extra,
        ]
    )


def _written_year(seconds: int, zone: str | None) -> int:
    """The year a UTC instant is written in: its year in ``zone``, by pandas (not the writer's
    code), or in UTC when the zone's offset then has seconds (local mean time)."""
    stamp = pd.Timestamp(seconds, unit="s")
    if zone is not None:
        local = stamp.tz_localize("UTC").tz_convert(zone)
        offset = local.tz_localize(None) - stamp  # (utcoffset() fails outside years 1-9999)
        if not offset % pd.Timedelta(minutes=1):
            return local.year
    return stamp.year


@pytest.mark.parametrize("unit", ["s", "ms", "us"])
@pytest.mark.parametrize("zone", ZONES)
def test_timestamps_at_the_ends_of_time_round_trip_or_are_refused_naming_the_record(
    small, tmp_path, capsys, unit, zone
):
    """9999-12-31 23:59 UTC is year 10000 in Tokyo: such a cell has no CSV text and is
    refused, naming its record and column, with no output and no traceback (it was a
    NotImplementedError from pandas).  0001-01-01 00:00 UTC, year 0 in London's local mean
    time (-0:01:15), is written in UTC, as every moment of local mean time is.  Every other
    cell reads back as the same instant; Parquet keeps them all."""
    _, codes, _ = small
    edges = [-62135596800, -62135596800 + 3600, 0, 253402300799 - 3600, 253402300799]
    kind = pa.timestamp(unit, tz=zone)
    values = pa.array([s * 10**9 // NS[unit] for s in edges], pa.int64()).view(kind)
    table = pa.table(
        {
            "person": range(5),
            "pc": codes[:5],
            "when": values,
            "day": pa.array(edges).cast(pa.int64()),
        }
    )
    src = tmp_path / "in.parquet"
    pq.write_table(table.drop_columns(["day"]), src)
    read = pq.read_table(src).column("when").combine_chunks()  # seconds are stored as ms
    assert _cli(small, src, tmp_path / "out.parquet") == 0
    assert pq.read_table(tmp_path / "out.parquet").column("when").combine_chunks().equals(read)
    capsys.readouterr()
    refused = [i for i, s in enumerate(edges) if not 1 <= _written_year(s, zone) <= 9999]
    code = _cli(small, src, tmp_path / "out.csv")
    err = capsys.readouterr().err
    assert "Traceback" not in err
    if refused:
        assert code == 3
        assert f"record {refused[0] + 1}, column 3 holds a timestamp outside years 1 " in err
        assert sorted(p.name for p in tmp_path.iterdir()) == [
            "in.parquet",
            "out.parquet",
            "out.parquet.audit.json",
            "out.parquet.manifest.json",
        ]
    else:
        assert code == 0, err
        back = pd.read_csv(tmp_path / "out.csv", dtype=str, keep_default_na=False)
        assert [read_cell(t, kind) for t in back["when"]] == stored(values)


@pytest.mark.parametrize(
    "values",
    [
        pa.array([0, -719163], pa.date32()),  # 0000-12-31
        pa.array([0, 2932897], pa.date32()),  # 10000-01-01
        pa.array([0, -(2**62)], pa.timestamp("ms")),
        pa.array([0, 2**62], pa.timestamp("us", tz="Europe/London")),
        pa.array([0, 2932897 * 86_400_000], pa.date64()),
    ],
    ids=["date-before-1", "date-after-9999", "far-past", "far-future-zoned", "date64"],
)
def test_a_date_outside_years_1_to_9999_is_refused_for_csv(small, tmp_path, capsys, values):
    _, codes, _ = small
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"person": [1, 2], "pc": codes[:2], "when": values}), src)
    assert _cli(small, src, tmp_path / "out.csv") == 3
    err = capsys.readouterr().err
    assert "record 2, column 3 holds a " in err and "outside years 1 to 9999" in err
    assert "Traceback" not in err and not (tmp_path / "out.csv").exists()


# -- every type pyarrow can store ---------------------------------------------------------------

STORABLE = {
    "large_string": pa.array(["a", None, "b"], pa.large_string()),
    "string_view": pa.array(["a", None, "b\rc"], pa.string_view()),
    "large_binary": pa.array([b"a", None, b"\x00"], pa.large_binary()),
    "binary_view": pa.array([b"a", None, b"\x00"], pa.binary_view()),
    "fixed_size_binary": pa.array([b"ab", None, b"\x00\x01"], pa.binary(2)),
    "list": pa.array([[1], None, []], pa.list_(pa.int32())),
    "large_list": pa.array([[1], None, []], pa.large_list(pa.int32())),
    "fixed_size_list": pa.array([[1, 2], None, [3, 4]], pa.list_(pa.int32(), 2)),
    "list_of_views": pa.array([["a"], None, []], pa.list_(pa.string_view())),
    "struct": pa.array([{"a": 1}, None, {"a": None}], pa.struct([("a", pa.int8())])),
    "map": pa.array([[("k", 1)], None, []], pa.map_(pa.string(), pa.int32())),
    "dictionary_of_ints": pa.array([7, None, 7]).dictionary_encode(),
    "dictionary_of_dates": pa.array(
        [dt.date(2000, 1, 1), None, dt.date(1, 1, 1)]
    ).dictionary_encode(),
    "null": pa.nulls(3),
    "float16": pa.array(np.array([0.1, np.nan, -0.0], np.float16)),
    "decimal256": pa.array([Decimal("9" * 76), Decimal("-1"), None], pa.decimal256(76, 0)),
    "decimal32": pa.array([Decimal("1.50"), None, Decimal("-2.25")], pa.decimal32(5, 2)),
    "date64": pa.array([0, 86_400_000, None], pa.date64()),
    "time32": pa.array([0, 86_399, None], pa.time32("s")),
    "time64_ns": pa.array([1, 86_399_999_999_999, None], pa.time64("ns")),
    "duration_extremes": pa.array([-(2**63) + 1, 2**63 - 1, None], pa.duration("s")),
    "uuid": pa.array([b"0" * 16, None, b"1" * 16], pa.uuid()),
    "json": pa.array(['{"a": 1}', None, "[]"], pa.json_()),
    "bool8": pa.array([1, 0, None], pa.int8()).cast(pa.bool8()),
}
NO_CSV_TEXT = {
    "large_binary",
    "binary_view",
    "fixed_size_binary",
    "list",
    "large_list",
    "fixed_size_list",
    "list_of_views",
    "struct",
    "map",
    "uuid",
}


@pytest.mark.parametrize("name", sorted(STORABLE))
@pytest.mark.parametrize("policy", ["error", "drop"])
def test_every_storable_type_round_trips_or_is_refused_for_csv_up_front(
    small, tmp_path, capsys, name, policy
):
    """Parquet keeps every type exactly (a view column could not lose a dropped record: pandas
    has no kernel to take its rows); CSV holds the scalar ones exactly and refuses the others,
    naming the column, before anything is written.  Never a traceback."""
    _, codes, _ = small
    values = STORABLE[name]
    pcs = [codes[0], "ZZ9 9ZZ" if policy == "drop" else codes[1], codes[2]]
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"person": [1, 2, 3], "pc": pcs, "x": values}), src)
    kept = [0, 2] if policy == "drop" else [0, 1, 2]
    read = pq.read_table(src).column("x").combine_chunks()
    assert _cli(small, src, tmp_path / "out.parquet", "--on-error", policy) == 0
    back = pq.read_table(tmp_path / "out.parquet").column("x").combine_chunks()
    assert back.type == read.type
    want = pa.concat_arrays([read.slice(i, 1) for i in kept])  # slices: no take for views
    if pa.types.is_floating(want.type) or pa.types.is_temporal(want.type):
        assert stored(back) == stored(want)  # NaN, and durations past Python's timedelta
    else:
        assert back.to_pylist() == want.to_pylist()
    capsys.readouterr()
    code = _cli(small, src, tmp_path / "out.csv", "--on-error", policy)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    if name in NO_CSV_TEXT:
        assert code == 8 and "column 3 holds " in err and "Parquet" in err
        assert not (tmp_path / "out.csv").exists()
    else:
        assert code == 0, err
        cells = pd.read_csv(tmp_path / "out.csv", dtype=str, keep_default_na=False)["x"]
        storage = want.storage if isinstance(want.type, pa.BaseExtensionType) else want
        assert [read_cell(t, storage.type) for t in cells] == stored(storage)


# -- pandas indexes -----------------------------------------------------------------------------


def test_a_range_index_kept_only_in_pandas_metadata_is_named_as_such(small, tmp_path, capsys):
    """``df.set_index("id").to_parquet()`` with consecutive ids stores no "id" column, only a
    RangeIndex in the pandas metadata: the error says so and how to store it, instead of
    asking about a header line a Parquet file does not have."""
    _, codes, _ = small
    people = pd.DataFrame({"person": range(4), "pc": codes[:4]})
    people.set_index("person").to_parquet(tmp_path / "in.parquet")
    assert "person" not in pq.read_schema(tmp_path / "in.parquet").names
    assert _cli(small, tmp_path / "in.parquet", tmp_path / "out.csv") == 3
    err = capsys.readouterr().err
    assert "'person' is a pandas index of consecutive numbers (a RangeIndex)" in err
    assert "df.reset_index()" in err and "header line" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet"]
    # The remedy the message gives works.
    people.set_index("person").reset_index().to_parquet(tmp_path / "fixed.parquet")
    assert _cli(small, tmp_path / "fixed.parquet", tmp_path / "out.csv") == 0
    # A column that is simply missing from a Parquet file: no header-line hint either.
    pd.DataFrame({"other": range(2), "pc": codes[:2]}).to_parquet(tmp_path / "x.parquet")
    assert _cli(small, tmp_path / "x.parquet", tmp_path / "x.csv") == 3
    err = capsys.readouterr().err
    assert "no column 'person' (it has 2 columns)" in err and "header line" not in err


def test_a_stored_index_column_can_be_the_identifier_column(small, tmp_path):
    """A non-range index is a stored column (``__index_level_0__``, or the index's own name):
    it can be named as the identifier column, in CSV and Parquet releases alike."""
    _, codes, _ = small
    people = pd.DataFrame({"pc": codes[:4], "note": list("abcd")}, index=[10, 3, 7, 42])
    people.to_parquet(tmp_path / "in.parquet")
    for out in ("out.csv", "out.parquet"):
        assert (
            main(
                [
                    "perturb",
                    str(tmp_path / "in.parquet"),
                    "-o",
                    str(tmp_path / out),
                    "--epsilon",
                    "1",
                    "--id-column",
                    "__index_level_0__",
                    "--postcode-column",
                    "pc",
                    "--graph",
                    str(small[2] / "g.ppgraph"),
                    "--key",
                    str(small[2] / "k.key"),
                    "-q",
                ]
            )
            == 0
        )
    back = pd.read_csv(tmp_path / "out.csv", dtype=str)
    assert back["__index_level_0__"].tolist() == ["10", "3", "7", "42"]
    assert pq.read_table(tmp_path / "out.parquet").column("__index_level_0__").to_pylist() == [
        10,
        3,
        7,
        42,
    ]


def test_perturb_frame_names_an_index_given_as_a_column(small):
    graph, codes, _ = small
    people = pd.DataFrame({"person": ["a", "b"], "pc": codes[:2]}).set_index("person")
    with pytest.raises(InputDataError, match=r"'person' is its index; pass df.reset_index\(\)"):
        perturb_frame(
            people, key=KEY, graph=graph, epsilon=1, id_column="person", postcode_column="pc"
        )
    with pytest.raises(InputDataError, match=r"no column 'nope' \(it has 1 column\)$"):
        perturb_frame(
            people, key=KEY, graph=graph, epsilon=1, id_column="nope", postcode_column="pc"
        )


def test_perturb_frame_names_column_labels_that_are_a_multiindex(small):
    graph, codes, _ = small
    people = pd.DataFrame(
        [["a", codes[0]]], columns=pd.MultiIndex.from_tuples([("who", "person"), ("who", "pc")])
    )
    with pytest.raises(InputDataError, match=r"column labels have 2 levels \(a MultiIndex\)"):
        perturb_frame(
            people, key=KEY, graph=graph, epsilon=1, id_column="person", postcode_column="pc"
        )


def test_a_dictionary_inside_a_list_view_is_refused_rather_than_leaked(small, tmp_path, capsys):
    """A dictionary nested in a list view was written whole, with the cell of the record
    ``--on-error drop`` left out; Arrow cannot rewrite it, so it is refused, naming the column
    (no traceback, no output)."""
    _, codes, _ = small
    notes = pa.DictionaryArray.from_arrays(pa.array([0, 1, 0], pa.int32()), ["ok", "SECRET"])
    offsets, sizes = pa.array([0, 1, 2], pa.int32()), pa.array([1, 1, 1], pa.int32())
    views = pa.ListViewArray.from_arrays(offsets, sizes, notes)
    src = tmp_path / "in.parquet"
    pcs = [codes[0], "ZZ9 9ZZ", codes[2]]
    pq.write_table(pa.table({"person": [1, 2, 3], "pc": pcs, "x": views}), src)
    assert _cli(small, src, tmp_path / "out.parquet", "--on-error", "drop") == 3
    err = capsys.readouterr().err
    assert "column 3 is dictionary-encoded in a way this release cannot rewrite" in err
    assert "Traceback" not in err and not (tmp_path / "out.parquet").exists()


@pytest.mark.parametrize("nesting", ["struct", "list"])
def test_a_dictionary_nested_in_a_file_of_several_row_groups_is_released(small, tmp_path, nesting):
    """pyarrow cannot make a batch across row groups of a dictionary inside a struct or a list,
    and the release called such a valid file "damaged or truncated" (a review of round 28).
    It is read one row group at a time; the output is the same at every chunk size."""
    _, codes, _ = small
    words = pa.array(["ab", "cd", "ab", "ef"] * 3).dictionary_encode()
    if nesting == "struct":
        column = pa.StructArray.from_arrays([words], ["w"])
    else:
        column = pa.ListArray.from_arrays(pa.array(range(13), pa.int32()), words)
    src = tmp_path / "in.parquet"
    people = pa.table(
        {"person": [str(i) for i in range(12)], "pc": [codes[i % 5] for i in range(12)]}
    )
    pq.write_table(people.append_column("x", column), src, row_group_size=5)
    outputs = []
    for size in ("1", "2", "7", "100000"):
        out = tmp_path / f"out-{size}.parquet"
        assert _cli(small, src, out, "--chunk-size", size) == 0
        outputs.append(out.read_bytes())
        back = pq.read_table(out)
        assert back.column("x").to_pylist() == column.to_pylist()
        assert back.schema.field("x").type == column.type
    assert len(set(outputs)) == 1


# -- plain decimals, and times of local mean time -----------------------------------------------

DECIMALS = {
    "d10": (pa.decimal128(20, 10), ["0", "1E-7", "-12.5", "1E+9"]),
    "d2": (pa.decimal32(5, 2), ["1.5", "0", "-0.01", "999.99"]),
    "d0": (pa.decimal64(18, 0), ["0", "1E+17", "-7", "5"]),
    "d30": (pa.decimal256(40, 30), ["0", "1E-30", "-1E-29", "9"]),
}
PLAIN = {
    "d10": ["0.0000000000", "0.0000001000", "-12.5000000000", "1000000000.0000000000"],
    "d2": ["1.50", "0.00", "-0.01", "999.99"],
    "d0": ["0", "100000000000000000", "-7", "5"],
    "d30": [
        "0.000000000000000000000000000000",
        "0.000000000000000000000000000001",
        "-0.000000000000000000000000000010",
        "9.000000000000000000000000000000",
    ],
}


def test_decimals_are_written_in_plain_form_with_their_scale_and_read_back_equal(small, tmp_path):
    """Not "1.000E-7" or "0E-10" (docs/release.md, "Typed cells in CSV"): every digit of the
    column's scale, no exponent; pyarrow and pandas read the same values back."""
    import pyarrow.csv as pacsv

    _, codes, _ = small
    columns = {
        name: pa.array([Decimal(v) for v in values], kind)
        for name, (kind, values) in DECIMALS.items()
    }
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"person": [1, 2, 3, 4], "pc": codes[:4], **columns}), src)
    assert _cli(small, src, tmp_path / "out.csv") == 0
    text = pd.read_csv(tmp_path / "out.csv", dtype=str, keep_default_na=False)
    for name in DECIMALS:
        assert text[name].tolist() == PLAIN[name]
    # (pyarrow reads decimals from CSV only as decimal128: these values fit one)
    types = {
        name: pa.decimal128(min(k.precision, 38), k.scale) for name, (k, _) in DECIMALS.items()
    }
    back = pacsv.read_csv(
        tmp_path / "out.csv", convert_options=pacsv.ConvertOptions(column_types=types)
    )
    by_pandas = pd.read_csv(tmp_path / "out.csv", converters=dict.fromkeys(DECIMALS, Decimal))
    for name, column in columns.items():
        assert back.column(name).combine_chunks().cast(column.type).equals(column)
        assert by_pandas[name].tolist() == column.to_pylist()


LMT = {
    # zone: UTC instants (seconds) of local mean time, then of a zone offset in whole minutes
    "Europe/London": [-4_418_438_400, -3_786_825_600, 1_593_561_600],  # 1829, 1850, 2020-07
    "America/New_York": [-3_155_673_600, 0],  # 1870, 1970
    "Africa/Monrovia": [-315_619_200, 946_684_800],  # 1960 (-00:44:30), 2000
}


@pytest.mark.parametrize("zone", list(LMT))
def test_local_mean_time_is_written_in_utc_and_reads_back_as_the_same_instant(
    small, tmp_path, zone
):
    """An offset with seconds ("-00:01:15", London before December 1847) reads back as no time
    in pandas or pyarrow; such a moment is written in UTC, every other in its local time."""
    import pyarrow.csv as pacsv

    _, codes, _ = small
    seconds = LMT[zone]
    values = pa.array(seconds, pa.int64()).view(pa.timestamp("s", tz=zone))
    src = tmp_path / "in.parquet"
    n = len(seconds)
    pq.write_table(pa.table({"person": range(n), "pc": codes[:n], "when": values}), src)
    assert _cli(small, src, tmp_path / "out.csv") == 0
    cells = pd.read_csv(tmp_path / "out.csv", dtype=str)["when"].tolist()
    assert cells[0].endswith("+00:00")  # in UTC
    assert cells[-1][19:] == {"Europe/London": "+01:00", "America/New_York": "-05:00"}.get(
        zone, "+00:00"
    )  # in local time
    assert not any(re.search(r"[+-]\d\d:\d\d:\d\d$", c) for c in cells)
    utc = pa.timestamp("s", tz="UTC")
    back = pacsv.read_csv(
        tmp_path / "out.csv", convert_options=pacsv.ConvertOptions(column_types={"when": utc})
    ).column("when")
    assert back.combine_chunks().equals(values.cast(utc))
    by_pandas = pd.to_datetime(
        pd.read_csv(tmp_path / "out.csv")["when"], utc=True, format="ISO8601"
    )
    assert [int(t.timestamp()) for t in by_pandas] == seconds
    for cell, second in zip(cells, seconds, strict=True):  # parse_dates, one cell at a time
        one = pd.read_csv(io.StringIO(f"t\n{cell}\n"), parse_dates=["t"])["t"]
        assert int(one.iloc[0].timestamp()) == second


# -- identifiers of a decimal type --------------------------------------------------------------


def test_decimal_identifiers_of_scale_0_release_as_the_integers_they_hold(small, tmp_path):
    """A decimal(20, 0) identifier column (Spark reads an unsigned 64-bit Parquet column as one)
    was refused; it now releases exactly as the same integers.  A decimal column of another
    scale is refused naming its records, even for whole values: written as CSV, 1.00 reads back
    as the text "1.00", another subject."""
    _, codes, _ = small
    ids = [1, 2**64 - 1, 17, 0]
    pcs = codes[: len(ids)]
    columns = {
        "u64": pa.array(ids, pa.uint64()),
        "d20": pa.array([Decimal(i) for i in ids], pa.decimal128(20, 0)),
        "d256": pa.array([Decimal(i) for i in ids], pa.decimal256(40, 0)),
    }
    released = {}
    for name, column in columns.items():
        src, out = tmp_path / f"{name}.parquet", tmp_path / f"{name}.csv"
        pq.write_table(pa.table({"person": column, "pc": pcs}), src)
        assert _cli(small, src, out) == 0
        back = pd.read_csv(out, dtype=str, keep_default_na=False)
        released[name] = back["postcode_dp"].tolist()
        assert back["person"].tolist() == [str(i) for i in ids]
    assert released["u64"] == released["d20"] == released["d256"]
    for scaled in (
        pa.array([Decimal("1.00"), Decimal("2.00")], pa.decimal128(10, 2)),
        pa.array([Decimal("1.00"), Decimal("2.50")], pa.decimal128(10, 2)),
    ):
        src = tmp_path / "scaled.parquet"
        pq.write_table(pa.table({"person": scaled, "pc": pcs[:2]}), src)
        assert _cli(small, src, tmp_path / "scaled.csv") == 3
        assert not (tmp_path / "scaled.csv").exists()


def test_every_float16_is_written_as_the_float64_it_widens_to():
    """A float16 column is written without pyarrow's cast to float64, which pyarrow 15 (the
    least pyproject allows) lacks: such a file was refused there as "a value of no known type"
    (a review of round 28). Every one of the 65,536 bit patterns, NaNs and infinities
    included, is written as the shortest text of its exact float64 value."""
    from postcode_privacy.release.csv_text import column_text

    values = np.arange(65536, dtype=np.uint16).view(np.float16)
    texts = column_text(pa.array(values, pa.float16()))
    assert texts == [repr(float(v)) for v in values]
    assert texts[0x3C00] == "1.0" and texts[0x0001] == "5.960464477539063e-08"


@pytest.mark.parametrize(
    "column",
    [
        pa.array([2_932_897, None], pa.date32()),  # 10000-01-01: past what Python's dates hold
        pa.array(
            [{"t": -62_135_596_800_000_000}, None],
            pa.struct([("t", pa.timestamp("us", tz="America/New_York"))]),
        ),
        pa.array([[2_932_897], None], pa.list_(pa.date32())),
        pa.array([10**18, None], pa.duration("ns")),
    ],
)
@pytest.mark.parametrize("role", ["identifier", "postcode"])
def test_an_identifier_or_postcode_of_another_type_is_refused_by_record_never_converted(
    small, column, role
):
    """A date past year 9999 (or a nested timestamp before year 1 in its zone) in the
    identifier or postcode column stopped the check with a raw traceback quoting the year,
    under every policy, in the CLI and on Spark (a hostile review of round 29): such a cell is
    refused by record, with the words any date or list gets, and never made a Python object."""
    from postcode_privacy.release import ReleasePlan
    from postcode_privacy.release.records import cells_of

    graph, codes, _ = small
    text = pa.array([codes[0], codes[1]])
    ids, pcs = (column, text) if role == "identifier" else (pa.array(["1", "2"]), column)
    df = pa.table({"id": ids, "pc": pcs}).to_pandas(types_mapper=pd.ArrowDtype)
    cells = cells_of(df["id" if role == "identifier" else "pc"])
    assert cells[1] is None and repr(cells[0]) == "<a cell of another type>"
    plan = ReleasePlan(
        key=KEY, epsilon="1", id_column="id", postcode_column="pc", graph=graph, on_error="null"
    )
    checked = plan.check_records(df, 0)
    reason = "identifier has an unsupported type" if role == "identifier" else "not a UK postcode"
    assert checked.check.row_errors[0][0] == 1 and reason in checked.check.row_errors[0][1]
    assert checked.check.counts["failed"] == 2


def test_a_narrow_float_identifier_is_refused_where_its_width_stops_holding_every_integer(small):
    """A 32-bit float holds every integer only below 2^24: ids 16777216 and 16777217 in a
    float32 column both read as 16777216 and were released as one person, on Spark and in the
    CLI (a hostile review of round 29). Its width now sets the bound (2^11 for float16)."""
    import numpy as np

    from postcode_privacy.release import ReleasePlan

    graph, codes, _ = small
    plan = ReleasePlan(
        key=KEY, epsilon="1", id_column="id", postcode_column="pc", graph=graph, on_error="null"
    )
    for width, below in ((np.float32, 2**24), (np.float16, 2**11)):
        ids = np.array([below - 1, below, -below, np.nan], dtype=width)
        arrow = pa.array(ids, mask=np.array([False, False, False, True]))  # a null, not NaN
        columns = [
            pd.Series(ids),
            pd.Series(arrow.to_pandas(types_mapper=pd.ArrowDtype)),
            pd.Series(arrow.dictionary_encode().to_pandas(types_mapper=pd.ArrowDtype)),
        ]
        if width is np.float32:  # (pandas has no nullable nor categorical float16)
            columns += [pd.Series(ids).astype("Float32"), pd.Series(ids).astype("category")]
        for column in columns:
            checked = plan.check_records(pd.DataFrame({"id": column, "pc": codes[:4]}), 0)
            assert checked.ids[0] == str(below - 1)
            refused = [row for row, why in checked.check.row_errors if "too large" in why]
            assert refused == [2, 3], (width, column.dtype)
            assert checked.check.row_errors[-1] == (4, "missing identifier"), column.dtype
    wide = plan.check_records(pd.DataFrame({"id": [16777217.0], "pc": codes[:1]}), 0)
    assert wide.ids == ["16777217"]  # a 64-bit float holds it
