"""The common result of every postcode source reader: a :class:`PostcodeTable`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from .. import postcodes
from ..errors import SourceDataError
from ..postcodes import try_normalise

__all__ = [
    "GRID_EXTENT",
    "DisagreeingRows",
    "PostcodeTable",
    "build_table",
    "empty_terminated",
    "normalise_postcodes",
    "off_the_grid",
    "outside_the_table",
]

# The extent of the National Grid in metres (easting, northing); the Irish Grid's coordinates
# of Northern Ireland, as ONSPD gives them, lie inside it too.  A coordinate outside is no
# place a postcode can be, and a huge one would overflow the graph's length arithmetic.
GRID_EXTENT = (700_000.0, 1_300_000.0)
GRID_EXTENT_TEXT = "outside the grid (easting 0 to 700,000 m, northing 0 to 1,300,000 m)"


def off_the_grid(easting: np.ndarray, northing: np.ndarray, margin: float = 0.0) -> np.ndarray:
    """Which coordinates lie outside :data:`GRID_EXTENT` widened by ``margin`` metres
    (infinities included; NaN is not flagged here: the readers count a blank coordinate as no
    grid reference)."""
    with np.errstate(invalid="ignore"):
        return (
            (easting < -margin)
            | (easting > GRID_EXTENT[0] + margin)
            | (northing < -margin)
            | (northing > GRID_EXTENT[1] + margin)
        )


# Northern Ireland moved to the National Grid lies a few km west of its origin.
_TABLE_MARGIN = 100_000.0


def outside_the_table(easting: np.ndarray, northing: np.ndarray) -> np.ndarray:
    """Which coordinates, once on the National Grid (Northern Ireland's moved there), lie
    further than a margin outside its extent, or are not finite: no table holds them."""
    finite = np.isfinite(easting) & np.isfinite(northing)
    return ~finite | off_the_grid(easting, northing, _TABLE_MARGIN)


def empty_terminated() -> pd.DataFrame:
    """An empty ``terminated`` frame with the right columns and dtypes."""
    return pd.DataFrame(
        {
            "postcode": pd.Series(dtype=object),
            "easting": pd.Series(dtype="float64"),
            "northing": pd.Series(dtype="float64"),
        }
    )


@dataclass(frozen=True, eq=False)  # eq on arrays is ambiguous; identity is enough
class PostcodeTable:
    """Live postcodes with British National Grid coordinates, sorted and unique.

    ``dropped`` counts rows left out by reason; ``terminated`` keeps terminated postcodes that
    still have coordinates; ``sources`` records the path and SHA-256 of every file read.
    The arrays are read-only: copy them to modify.
    """

    postcodes: np.ndarray
    easting: np.ndarray
    northing: np.ndarray
    laua: np.ndarray | None = None
    dropped: dict[str, int] = field(default_factory=dict)
    terminated: pd.DataFrame = field(default_factory=empty_terminated)
    sources: list[dict[str, str]] = field(default_factory=list)
    kind: str = ""

    def __len__(self) -> int:
        return len(self.postcodes)

    def to_frame(self) -> pd.DataFrame:
        """Columns postcode, easting, northing (and laua when known)."""
        frame = pd.DataFrame(
            {"postcode": self.postcodes, "easting": self.easting, "northing": self.northing}
        )
        if self.laua is not None:
            frame["laua"] = self.laua
        return frame


def normalise_postcodes(values) -> np.ndarray:
    """Normalise each value as :func:`try_normalise` does; malformed ones become None.

    Millions of rows are read at a time, so plain ASCII strings take a vectorised path using
    the same pattern as ``try_normalise``; anything else (non-ASCII, tabs, non-strings) goes
    through ``try_normalise`` itself, so the results are identical.
    """
    series = pd.Series(np.asarray(values, dtype=object), dtype=object)
    out = np.full(len(series), None, dtype=object)
    pattern = getattr(postcodes, "_POSTCODE", None)
    simple = np.zeros(len(series), dtype=bool)
    if pattern is not None and len(series):
        text = series.astype("string[pyarrow]")
        # Only letters, digits and spaces: here regex, upper-casing and whitespace agree
        # between Python and Arrow, so the fast path cannot differ from try_normalise.
        simple = text.str.fullmatch(r"[A-Za-z0-9 ]*").fillna(False).to_numpy(dtype=bool)
        compact = text[simple].str.replace(" ", "", regex=False).str.upper()
        valid = compact.str.fullmatch(pattern.pattern).to_numpy(dtype=bool)
        joined = (compact.str[:-3] + " " + compact.str[-3:]).to_numpy(dtype=object)
        out[np.flatnonzero(simple)[valid]] = joined[valid]
    rest = np.flatnonzero(~simple)
    out[rest] = [try_normalise(v) for v in series.to_numpy()[rest]]
    return out


def _as_object(values) -> np.ndarray:
    # Source readers hand over pandas string columns; the table holds plain Python str/None.
    out = np.asarray(values, dtype=object).copy()
    out[pd.isna(out)] = None
    return out


class DisagreeingRows(SourceDataError):
    """Two rows of one postcode that differ in coordinates or local authority: which one
    stood would depend on the rows' order.  ``rows`` holds each one's (``file`` value or None,
    ``record`` value or None) from the frame given to :func:`build_table`, in file order, so
    that its reader can name the lines (never the postcode)."""

    def __init__(self, rows: list[tuple[Any, Any]]):
        super().__init__(
            "two rows of one postcode give it different coordinates or local authorities"
        )
        self.rows = rows


def disagreeing_message(places: list[tuple[str, int]]) -> SourceDataError:
    """The message for :class:`DisagreeingRows`, naming its two rows by (file label, line):
    "x.csv: lines 4 and 9", or "a.csv: line 4 and b.csv: line 9"."""
    (first, a), (second, b) = places
    where = (
        f"{first}: lines {a} and {b}"
        if first == second
        else f"{first}: line {a} and {second}: line {b}"
    )
    return SourceDataError(
        f"{where}: two rows of one postcode give it different coordinates or "
        "local authorities; a postcode has one location, so one of them must go"
    )


def _repeats(codes: np.ndarray) -> np.ndarray:
    """For sorted ``codes``, whether each is the same postcode as the one before it."""
    repeat = np.zeros(len(codes), dtype=bool)
    repeat[1:] = codes[1:] == codes[:-1]
    return repeat


def _refuse_disagreeing(frame: pd.DataFrame, repeat: np.ndarray, order: np.ndarray, columns):
    """Raise :class:`DisagreeingRows` if rows of one postcode (sorted rows at frame positions
    ``order``, ``repeat`` from :func:`_repeats`) differ in any of ``columns``; rows that agree
    are duplicates."""
    if not repeat.any():
        return
    head = np.maximum.accumulate(np.where(repeat, 0, np.arange(len(repeat))))
    differ = np.zeros(len(repeat), dtype=bool)
    for column in columns:
        values = _as_object(frame[column]) if column == "laua" else frame[column].to_numpy()
        values = values[order]
        differ |= repeat & (values != values[head])
    if differ.any():
        at = int(np.argmax(differ))
        positions = sorted({int(order[head[at]]), int(order[at])})

        def field(name: str, position: int):
            return frame[name].iloc[position] if name in frame else None

        rows = [(field("file", i), field("record", i)) for i in positions]
        # (in file order: by the file's number, not its text, where "10" comes before "2")
        raise DisagreeingRows(
            sorted(rows, key=lambda r: (-1 if r[0] is None else int(r[0]), int(r[1] or 0)))
        )


def build_table(
    frame: pd.DataFrame,
    *,
    dropped: dict[str, int],
    kind: str,
    sources: list[dict[str, str]],
    terminated: pd.DataFrame | None = None,
    with_laua: bool = False,
) -> PostcodeTable:
    """Sort and de-duplicate kept rows and wrap them in a table.

    ``frame`` has columns postcode (already normalised), easting, northing and optionally
    laua, and, to name a row in a message, ``file`` and ``record``.  Rows of one postcode
    that agree (coordinates, and local authority when known) are duplicates, counted under
    ``"duplicate"``; rows that differ raise :class:`DisagreeingRows`, as keeping either would
    make the table depend on the rows' order.  So do terminated rows that differ.
    """
    dropped = dict(dropped)
    codes = _as_object(frame["postcode"])
    # (rows of one postcode left after the check agree, so which of them is kept is no matter)
    order = np.argsort(codes, kind="stable")
    codes = codes[order]
    located = ["easting", "northing"]
    repeat = _repeats(codes)
    _refuse_disagreeing(frame, repeat, order, located + (["laua"] if with_laua else []))
    dropped["duplicate"] = dropped.get("duplicate", 0) + int(repeat.sum())
    order, codes = order[~repeat], codes[~repeat]
    frame = frame.iloc[order]
    laua = _as_object(frame["laua"]) if with_laua and "laua" in frame else None

    if terminated is None or terminated.empty:
        terminated = empty_terminated()
    else:
        # A postcode is either live or terminated: a live row wins over a terminated one.
        terminated = terminated.loc[~terminated["postcode"].isin(frame["postcode"])]
        dead = _as_object(terminated["postcode"])
        by_code = np.argsort(dead, kind="stable")
        _refuse_disagreeing(terminated, _repeats(dead[by_code]), by_code, located)
        terminated = terminated.drop_duplicates("postcode", keep="first")
        terminated = terminated.sort_values("postcode", kind="stable").reset_index(drop=True)
        terminated = pd.DataFrame(
            {
                "postcode": _as_object(terminated["postcode"]),
                "easting": terminated["easting"].astype("float64"),
                "northing": terminated["northing"].astype("float64"),
            }
        )

    easting = frame["easting"].to_numpy(dtype="float64", copy=True)
    northing = frame["northing"].to_numpy(dtype="float64", copy=True)
    for east, north in (
        (easting, northing),
        (terminated["easting"].to_numpy(), terminated["northing"].to_numpy()),
    ):
        if outside_the_table(east, north).any():
            # (the readers name the line first; this guards every other caller)
            raise SourceDataError("a coordinate of the source is missing or off the grid")
    for array in (codes, easting, northing, laua):
        if array is not None:
            array.flags.writeable = False
    return PostcodeTable(
        postcodes=codes,
        easting=easting,
        northing=northing,
        laua=laua,
        dropped=dropped,
        terminated=terminated,
        sources=list(sources),
        kind=kind,
    )
