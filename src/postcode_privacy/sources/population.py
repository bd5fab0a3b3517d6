"""Census postcode population counts, used as the prior weight of each postcode.

Three layouts are recognised from the header (case-insensitive):

* Census 2021 (Nomis ``pcd_p001.csv``): one row per postcode and sex, with a count column;
* Census 2011 (``Postcode,Total,Males,Females,Occupied_Households``): the ``Total`` column;
* plain ``postcode,population``.

Messages name the file, a line and a column by position, never a value or a header name: a
file without a header has a first row of data (docs/graph.md, "Building from source files").
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
from collections.abc import Iterable

import numpy as np
import pandas as pd

from .._input_files import read_small_file
from .._limits import MAX_TOTAL_PRIOR
from ..errors import SourceDataError, option_name
from ._reading import RecordFault, check_row_shapes, file_label, line_of_record, unreadable
from .table import normalise_postcodes

__all__ = ["read_population", "apply_population"]

_COUNT = re.compile(r"[0-9]+")  # not "\d": that takes Arabic-Indic or fullwidth digits too
_MAX_COUNT_DIGITS = 18  # any count of at most 18 digits fits in int64; no postcode has more


def _postcode_column(names: list[str]) -> int | None:
    """Index of the postcode column; a column named like a postcode beats a geography one."""
    rules = (
        lambda n: "postcode" in n,
        lambda n: n == "geography code",
        lambda n: re.fullmatch(r"pcd\w*", n) is not None,
        lambda n: n == "geography",
    )
    for rule in rules:
        for i, name in enumerate(names):
            if rule(name):
                return i
    return None


def _count_column(names: list[str], candidates: list[int]) -> int | None:
    """An exact count/observation/value name first, then one containing those words."""
    words = ("count", "observation", "value")
    for test in (lambda n: n in words, lambda n: any(w in n for w in words) and "status" not in n):
        found = next((i for i in candidates if test(names[i])), None)
        if found is not None:
            return found
    return None


def _layout(names: list[str], label: str) -> tuple[int, int, int | None]:
    """Return (postcode column, count column, sex column or None)."""
    postcode = _postcode_column(names)
    if postcode is None:
        raise SourceDataError(
            f"{label}: no postcode column in the header row (one named postcode, pcd..., "
            "geography or geography code)"
        )
    others = [i for i in range(len(names)) if i != postcode]
    sex = next((i for i in others if "sex" in names[i]), None)
    count = _count_column(names, others)
    if sex is not None and count is not None:
        return postcode, count, sex
    total = next((i for i in others if names[i] == "total"), None)
    if total is not None:
        return postcode, total, None
    single = next((i for i in others if names[i] == "population"), None)
    if single is None and len(names) == 2:
        single = others[0]
    if single is None:
        raise SourceDataError(
            f"{label}: unrecognised population layout: the header row names no count column "
            "(count, total or population)"
        )
    return postcode, single, None


# Census 2021's pcd_p001.csv (a row per postcode and sex) is a small fraction of this bound,
# which refuses, before it is read into memory, a file that cannot be a population file.
MAX_POPULATION_BYTES = 1 << 30


def read_population(path: str | os.PathLike) -> dict[str, int]:
    """Read a postcode population file into {normalised postcode: count}.

    In the long (per-sex) layout, the sexes are summed; a total row ("All persons", code 0)
    is used only for a postcode that has no per-sex rows, so nothing is counted twice.
    """
    return read_population_source(path)[0]


def read_population_source(path: str | os.PathLike) -> tuple[dict[str, int], str]:
    """:func:`read_population`, and the hex SHA-256 of the very bytes it read (for the graph's
    provenance: a file replaced under its name meanwhile cannot be recorded for another)."""
    label = file_label(path)
    # Read once: the digest is of exactly the bytes parsed, and lines can be counted in them.
    data = read_small_file(path, what=label, limit=MAX_POPULATION_BYTES, error=SourceDataError)
    try:
        frame = pd.read_csv(
            io.BytesIO(data),
            dtype=str,
            keep_default_na=False,
            index_col=False,
            encoding="utf-8-sig",
        )
    except pd.errors.EmptyDataError:
        raise SourceDataError(f"{label} is empty") from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        raise unreadable(label, exc, lambda: contextlib.nullcontext(io.BytesIO(data))) from None
    _layout([str(c).strip().lower() for c in frame.columns], label)
    # pandas reads a short row with blanks: a file with one is refused, naming its line.
    check_row_shapes(lambda: contextlib.nullcontext(io.BytesIO(data)), label, header=True)
    try:
        counts = _counts(frame, label)
    except RecordFault as fault:
        raise fault.with_line(line_of_record(io.BytesIO(data), fault.record, header=True)) from None
    return counts, hashlib.sha256(data).hexdigest()


def _fault(bad: np.ndarray, label: str, what: str) -> RecordFault:
    """``what`` is wrong with the first record flagged in ``bad`` (its line found later)."""
    return RecordFault(int(np.argmax(bad)), f"{label}: ", f": {what}")


def _counts(frame: pd.DataFrame, label: str) -> dict[str, int]:
    names = [str(c).strip().lower() for c in frame.columns]
    pc_col, count_col, sex_col = _layout(names, label)
    frame = frame.fillna("")  # short rows leave NaN even with keep_default_na=False

    postcodes = normalise_postcodes(frame.iloc[:, pc_col].to_numpy())
    bad = pd.isna(postcodes)
    if bad.any():
        raise _fault(bad, label, "not a postcode in form")
    text = frame.iloc[:, count_col].str.strip()
    column = f"column {count_col + 1} (the count)"
    bad = ~text.str.fullmatch(_COUNT.pattern).to_numpy(dtype=bool)
    if bad.any():
        raise _fault(bad, label, f"{column} is not a non-negative integer")
    bad = (text.str.lstrip("0").str.len() > _MAX_COUNT_DIGITS).to_numpy(dtype=bool)
    if bad.any():
        raise _fault(bad, label, f"{column} is too large")
    counts = text.astype("int64").to_numpy()

    if sex_col is None:
        duplicated = pd.Series(postcodes).duplicated().to_numpy()
        if duplicated.any():
            raise _fault(duplicated, label, "postcode repeated")
        return dict(zip(postcodes.tolist(), counts.tolist(), strict=True))

    sex = frame.iloc[:, sex_col].str.strip()
    if (sex == "").any():
        empty = (sex == "").to_numpy()
        raise _fault(empty, label, f"column {sex_col + 1} (the sex) is empty")
    pairs = pd.DataFrame({"postcode": postcodes, "sex": sex.to_numpy(dtype=object)})
    duplicated = pairs.duplicated().to_numpy()
    if duplicated.any():
        raise _fault(duplicated, label, "postcode and sex repeated")
    lowered = sex.str.lower()
    is_total = ((sex == "0") | lowered.str.startswith("all") | (lowered == "total")).to_numpy()
    table = pd.DataFrame({"postcode": postcodes, "count": counts, "total": is_total})
    result = _sums(table.loc[table["total"]])
    result.update(_sums(table.loc[~table["total"]]))  # per-sex sums win over a total row
    return result


def _sums(table: pd.DataFrame) -> dict[str, int]:
    """{postcode: the sum of its counts}, exact: an int64 sum of 18-digit counts can wrap, so
    a postcode whose rows could reach 2**62 (their number times their largest count) is
    summed again in Python integers (``apply_population`` then refuses the total)."""
    grouped = table.groupby("postcode", sort=False)["count"]
    sums = grouped.sum()
    result = {str(k): int(v) for k, v in sums.items()}
    reach = grouped.size().astype("float64") * grouped.max().astype("float64")
    for postcode in sums.index[(reach >= 2.0**62).to_numpy()]:
        result[str(postcode)] = sum(table.loc[table["postcode"] == postcode, "count"].tolist())
    return result


def apply_population(
    postcodes: Iterable[str], population: dict[str, int], label: str = "the population file"
) -> tuple[np.ndarray, dict[str, int]]:
    """Prior weight per postcode: its population when at least 1, otherwise 1.

    The floor of 1 keeps every postcode releasable (the guarantee needs a positive prior).
    ``population_total`` sums the counts of the given postcodes as found in the file.
    The priors must total at most 2**62 (docs/methods.md, "Supported priors"); a file whose
    counts exceed that is refused here, naming the population option and ``label``, with the
    totals summed exactly (an int64 sum of 18-digit counts could wrap).
    """
    postcodes = list(postcodes)
    counts = [population.get(p, 0) for p in postcodes]
    if any(count < 0 for count in counts):
        raise SourceDataError("population counts must be non-negative")
    # exact: Python integers cannot wrap (and a count past int64 is refused before numpy)
    if sum(max(count, 1) for count in counts) > MAX_TOTAL_PRIOR:
        raise SourceDataError(
            f"{label}: the counts of the graph's postcodes add up to more than 2**62, the most "
            f"a prior may total; {option_name('population')} must be a file of population counts"
        )
    raw = np.array(counts, dtype=np.int64)
    present = raw >= 1
    prior = np.where(present, raw, 1).astype(np.int64)
    known = set(postcodes)
    missing = [p for p in population if p not in known]
    coverage = {
        "postcodes_with_population": int(present.sum()),
        "postcodes_floored_to_1": int((~present).sum()),
        "population_total": sum(raw.tolist()),
        "file_postcodes_not_in_graph": len(missing),
        "population_not_in_graph": int(sum(population[p] for p in missing)),
    }
    return prior, coverage
