"""The CSV text of a typed cell (a Parquet input released to CSV; docs/release.md, "Typed
cells in CSV").

A cell's text depends on its value and its column's Arrow type alone: never on the other
cells of its record, its chunk or the writer's quoting, and not on the pandas version.  Each
type has one rule, chosen so that the text reads back as the same value:

* integers in decimal; booleans ``True``/``False``; text as it is;
* floats (16, 32 or 64 bits) as the shortest text that reads back as the same 64-bit float
  (a narrower float is widened first, exactly): ``0.1``, ``0.10000000149011612`` for the
  float32 nearest 0.1, ``nan``, ``inf``, ``-inf``, ``-0.0``;
* decimals in plain positional form with their column's scale (``1.50``, ``0.0000001000``,
  ``0.0000000000``), never with an exponent, at full precision;
* dates as ``YYYY-MM-DD``; times of day as ``HH:MM:SS``; timestamps as ``YYYY-MM-DD HH:MM:SS``
  in their time zone's local time followed by its offset (``+01:00``) when they have one,
  except that a moment whose offset is not a whole number of minutes (local mean time, such
  as Europe/London's -00:01:15 before December 1847) is written in UTC (``+00:00``): pandas
  and Arrow read no offset with seconds as a time;
  durations as ``D days HH:MM:SS`` (``-1 days +23:59:59`` for minus one second).  A fraction
  of a second is written only when it is not zero: six digits, or nine when it has
  nanoseconds;
* a null (any type) as an empty cell; a dictionary by its values, an extension type by what
  it stores.

Binary values, lists, structs, maps and unions have no such text (:func:`has_text`); nor has
a date or timestamp outside years 1 to 9999 (:func:`first_unshowable` finds them).
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable
from typing import Any

from .type_words import type_words

__all__ = ["has_text", "column_text", "first_unshowable", "Unshowable"]

_EPOCH = datetime.datetime(1970, 1, 1)
_EPOCH_UTC = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_NS_PER = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}
_DAY_NS = 86_400 * 10**9
_DAY_MS = 86_400_000
_MINUTE = datetime.timedelta(minutes=1)
# Days from 1970-01-01 to the first and last dates Python (and ISO 8601) can write.
_FIRST_DAY = datetime.date(1, 1, 1).toordinal() - datetime.date(1970, 1, 1).toordinal()
_LAST_DAY = datetime.date(9999, 12, 31).toordinal() - datetime.date(1970, 1, 1).toordinal()
_FIXED_OFFSET = re.compile(r"([+-])(\d\d):(\d\d)")


class Unshowable(ValueError):
    """A value with no CSV text: ``row`` (0-based, in its array) and why, never the value."""

    def __init__(self, row: int, why: str):
        super().__init__(why)
        self.row, self.why = row, why


def _fraction(ns: int) -> str:
    if ns == 0:
        return ""
    return f".{ns // 1000:06d}" if ns % 1000 == 0 else f".{ns:09d}"


def _clock(ns_of_day: int) -> str:
    seconds, ns = divmod(ns_of_day, 10**9)
    hours, rest = divmod(seconds, 3600)
    return f"{hours:02d}:{rest // 60:02d}:{rest % 60:02d}{_fraction(ns)}"


def time_zone(name: str) -> datetime.tzinfo:
    """The tzinfo of an Arrow time zone: a fixed offset (``+05:30``) or a name of the tz
    database (``Europe/London``); ValueError (a KeyError for an unknown name) otherwise."""
    import zoneinfo

    fixed = _FIXED_OFFSET.fullmatch(name)
    if fixed:
        sign = -1 if fixed.group(1) == "-" else 1
        offset = datetime.timedelta(hours=int(fixed.group(2)), minutes=int(fixed.group(3)))
        return datetime.timezone(sign * offset)
    if name.upper() == "UTC":
        return datetime.UTC
    return zoneinfo.ZoneInfo(name)


def named_time_zones(schema) -> list[str]:
    """The names of the tz database's zones (not fixed offsets, not UTC) that the timestamp
    columns of ``schema`` are in: their local times are what the database says."""
    import pyarrow as pa

    names = set()
    for field in schema:
        kind = _plain(field.type)
        if pa.types.is_timestamp(kind) and kind.tz is not None:
            if not _FIXED_OFFSET.fullmatch(kind.tz) and kind.tz.upper() != "UTC":
                names.add(kind.tz)
    return sorted(names)


def tz_database(names: list[str]) -> dict[str, str]:
    """Where ``zoneinfo`` reads the zones ``names`` from, for the manifest's ``written_with``.

    zoneinfo takes a zone's file from the first directory of ``zoneinfo.TZPATH`` that has it,
    else from the ``tzdata`` package.  ``tz_database`` is the version of each source used: a
    directory's ``tzdata.zi`` says it on its first line, the package by its own version; a
    directory without that file (as on macOS) is "system, version unknown".  ``tz_zones_sha256``
    digests the zone files themselves (name and bytes, in name order), which binds the local
    times written whatever the sources say of their versions."""
    import hashlib

    versions = []
    parts = []  # zone files are a few kilobytes each
    for name in sorted(names):
        zone, version = _zone_file(name)
        if version not in versions:
            versions.append(version)
        encoded = name.encode("utf-8")
        parts += [len(encoded).to_bytes(4, "big"), encoded, len(zone).to_bytes(8, "big"), zone]
    zones_sha256 = hashlib.sha256(b"".join(parts)).hexdigest()
    return {"tz_database": " + ".join(versions), "tz_zones_sha256": zones_sha256}


def _zone_file(name: str) -> tuple[bytes, str]:
    """The bytes of zone ``name`` where zoneinfo reads them, and that source's version."""
    import importlib.metadata
    import importlib.resources
    import os
    import zoneinfo

    root = next((r for r in zoneinfo.TZPATH if os.path.isfile(os.path.join(r, name))), None)
    if root is not None:
        with open(os.path.join(root, name), "rb") as handle:
            return handle.read(), _directory_version(root)
    zone = importlib.resources.files("tzdata.zoneinfo").joinpath(*name.split("/")).read_bytes()
    try:
        return zone, "tzdata " + importlib.metadata.version("tzdata")
    except importlib.metadata.PackageNotFoundError:  # (zoneinfo found it there)
        return zone, "tzdata, version unknown"


def _directory_version(root: str) -> str:
    import os

    try:
        with open(os.path.join(root, "tzdata.zi"), encoding="ascii", errors="replace") as f:
            first = f.readline(100)
    except OSError:
        return "system, version unknown"
    return first.split()[2] if first.startswith("# version ") else "system, version unknown"


def _plain(kind):
    """The type whose values a column of ``kind`` holds: an extension type's storage, a
    dictionary's values."""
    import pyarrow as pa

    while True:
        if isinstance(kind, pa.BaseExtensionType):
            kind = kind.storage_type
        elif pa.types.is_dictionary(kind):
            kind = kind.value_type
        else:
            return kind


def _cells(array, text: Callable[[Any], str]) -> list[str | None]:
    return [None if value is None else text(value) for value in array.to_pylist()]


def _ints(array) -> list[str | None]:
    import pyarrow as pa

    return array.cast(pa.string()).to_pylist()


def _floats(array) -> list[str | None]:
    import pyarrow as pa

    # widening to 64 bits is exact; repr is the shortest text that reads back the same
    if pa.types.is_float16(array.type):
        # pyarrow 15 (the least pyproject allows) has no cast from 16 bits: numpy's float16,
        # which to_pylist gives, widens exactly too
        return _cells(array, lambda value: repr(float(value)))
    return _cells(array.cast(pa.float64()), repr)


def _decimals(array) -> list[str | None]:
    # str() would write 1E-7 or 0E-10; "f" keeps every digit of the scale, with no exponent.
    return _cells(array, lambda value: format(value, "f"))


def _dates(array) -> list[str | None]:
    per = _DAY_MS if array.type.bit_width == 64 else 1  # date64 counts milliseconds
    return [
        None if count is None else _text_of_day(row, count // per)
        for row, count in enumerate(_counts(array))
    ]


def _text_of_day(row: int, day: int) -> str:
    if not _FIRST_DAY <= day <= _LAST_DAY:
        raise Unshowable(row, "a date outside years 1 to 9999")
    return (datetime.date(1970, 1, 1) + datetime.timedelta(days=day)).isoformat()


def _counts(array) -> list[int | None]:
    """The integers a date, time, duration or timestamp array stores (days, or units)."""
    import pyarrow as pa

    return array.view(pa.int32() if array.type.bit_width == 32 else pa.int64()).to_pylist()


def _times(array) -> list[str | None]:
    per = _NS_PER[array.type.unit]
    counts = _counts(array)
    return [None if count is None else _clock(count * per) for count in counts]


def _durations(array) -> list[str | None]:
    per = _NS_PER[array.type.unit]

    def text(count: int) -> str:
        days, rest = divmod(count * per, _DAY_NS)  # pandas' form: the days round down
        return f"{days} days {'+' if days < 0 else ''}{_clock(rest)}"

    return [None if count is None else text(count) for count in _counts(array)]


def _timestamps(array) -> list[str | None]:
    kind = array.type
    per = _NS_PER[kind.unit]
    zone = None if kind.tz is None else time_zone(kind.tz)
    counts = _counts(array)
    return [
        None if count is None else _timestamp_text(row, count * per, zone)
        for row, count in enumerate(counts)
    ]


def _timestamp_text(row: int, ns: int, zone: datetime.tzinfo | None) -> str:
    seconds, fraction = divmod(ns, 10**9)
    try:
        if zone is None:
            moment = _EPOCH + datetime.timedelta(seconds=seconds)
            return f"{moment.isoformat(sep=' ')}{_fraction(fraction)}"
        moment = _EPOCH_UTC + datetime.timedelta(seconds=seconds)
    except OverflowError:  # before year 1 or after 9999 in UTC
        raise Unshowable(row, "a timestamp outside years 1 to 9999") from None
    try:
        local: datetime.datetime | None = moment.astimezone(zone)
        offset = local.utcoffset() if local is not None else None
    except OverflowError:  # the local time is before year 1 or after 9999
        local, offset = None, _offset_inward(moment, zone)
    if offset is not None and offset % _MINUTE:
        # Local mean time: "-00:01:15" reads back as no time in pandas or Arrow; UTC does.
        local = moment
    if local is None:
        raise Unshowable(row, "a timestamp outside years 1 to 9999 in its time zone")
    text = local.isoformat(sep=" ")  # "YYYY-MM-DD HH:MM:SS+HH:MM"
    return f"{text[:19]}{_fraction(fraction)}{text[19:]}"


def _offset_inward(moment: datetime.datetime, zone: datetime.tzinfo) -> datetime.timedelta | None:
    """The offset of ``zone`` two days after ``moment`` (before it, near year 9999), for a
    moment whose local time has no datetime: no zone's offset changes within two days of
    either end of time."""
    inward = datetime.timedelta(days=2 if moment.year < 5000 else -2)
    return (moment + inward).astimezone(zone).utcoffset()


def _formatter(kind) -> Callable[[Any], list[str | None]] | None:
    import pyarrow.types as types

    kind = _plain(kind)
    if types.is_null(kind):
        return lambda array: [None] * len(array)
    if types.is_string(kind) or types.is_large_string(kind) or str(kind) == "string_view":
        return lambda array: array.to_pylist()
    if types.is_boolean(kind):
        return lambda array: _cells(array, str)
    if types.is_integer(kind):
        return _ints
    if types.is_floating(kind):
        return _floats
    if types.is_decimal(kind):
        return _decimals
    if types.is_date(kind):
        return _dates
    if types.is_time(kind):
        return _times
    if types.is_duration(kind):
        return _durations
    if types.is_timestamp(kind):
        return _timestamps
    return None


def has_text(kind) -> bool:
    """Whether every value of the Arrow type ``kind`` has CSV text (dates and timestamps
    outside years 1 to 9999 aside), and a time zone, if any, is known."""
    import pyarrow.types as types

    if _formatter(kind) is None:
        return False
    plain = _plain(kind)
    if types.is_timestamp(plain) and plain.tz is not None:
        try:
            time_zone(plain.tz)
        except (KeyError, ValueError):
            return False
    return True


def _values(array):
    """``array`` (an Arrow array of any type with text) as an array of the plain type."""
    import pyarrow as pa

    if isinstance(array.type, pa.BaseExtensionType):
        return _values(array.storage)
    if pa.types.is_dictionary(array.type):
        return _values(array.dictionary_decode())
    return array


def column_text(array) -> list[str | None]:
    """The CSV text of every cell of the Arrow ``array`` (None for a null); :class:`Unshowable`
    for a value that has none.  Precondition: ``has_text(array.type)``."""
    formatter = _formatter(array.type)
    if formatter is None:
        raise Unshowable(0, type_words(array.type))
    return formatter(_values(array))


def first_unshowable(array) -> Unshowable | None:
    """The first value of ``array`` that has no CSV text, or None; cheap: only dates and
    timestamps can fail, and only near or past the ends of years 1 to 9999 are they
    formatted to find out."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.types as types

    values = _values(array)
    kind = values.type
    if types.is_date32(kind):
        counts, low, high = values.view(pa.int32()), _FIRST_DAY, _LAST_DAY
    elif types.is_date64(kind):
        counts = values.view(pa.int64())
        low, high = _FIRST_DAY * _DAY_MS, (_LAST_DAY + 1) * _DAY_MS - 1
    elif types.is_timestamp(kind):
        # A time zone moves a timestamp by less than a day (Python's bound on an offset).
        per = _NS_PER[kind.unit]
        counts = values.view(pa.int64())
        low = -(-(_FIRST_DAY + 1) * _DAY_NS // per)
        high = ((_LAST_DAY - 1) * _DAY_NS) // per
    else:
        return None
    # In nanoseconds the bounds lie past what 64 bits hold: no value is beyond them.
    low, high = (
        pa.scalar(max(low, -(2**63)), pa.int64()),
        pa.scalar(min(high, 2**63 - 1), pa.int64()),
    )
    outside = pc.or_(pc.less(counts, low), pc.greater(counts, high)).fill_null(False)
    near = pc.indices_nonzero(outside)
    for row in near.to_pylist():
        try:
            column_text(values.slice(row, 1))
        except Unshowable as exc:
            return Unshowable(row, exc.why)
    return None


def series_text(column) -> list[str | None]:
    """The CSV text of every cell of a pandas Series (None for a missing cell).  A text
    column (``object`` of ``str`` and ``None``, as read from CSV) is taken as it is; any other
    through its Arrow type (:func:`column_text`), so that a Parquet input's typed cells and the
    same values in a pandas column are written alike."""
    import pandas as pd
    import pyarrow as pa

    if column.dtype == object:
        cells = column.tolist()
        if set(map(type, cells)) <= {str, type(None)}:
            return cells
    if isinstance(column.dtype, pd.ArrowDtype):
        array = pa.array(column.array)  # the column's own Arrow data, chunked
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
    else:
        array = pa.Array.from_pandas(column)
    return column_text(array)
