"""The per-record release rules (docs/release.md, "Records that cannot be released").

Every way of releasing records goes through :meth:`RecordRules.check_records`, via
:meth:`ReleasePlan.check_records <postcode_privacy.release.plan.ReleasePlan.check_records>`:

* each row needs a subject identifier, turned into its canonical text by
  :func:`~postcode_privacy.mechanism.subject.canonical_subject_id`;
* each row needs a postcode that is a UK postcode in form after case and whitespace
  normalisation and is a node of the graph; with ``terminated="nearest"`` a located terminated
  postcode is first mapped to the nearest live node (``terminated.py``);
* a row that fails is counted under the first failure kind that applies; the error policy
  (``on_error``) decides what happens to it (``plan.py``).

Reasons name 1-based record numbers (the header is not a record), never the identifier or
postcode values.
"""

from __future__ import annotations

import math
import numbers
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ..errors import InputDataError, option, option_name
from ..graph.graph import Graph
from ..mechanism.subject import canonical_subject_id, holds_unassigned
from ..postcodes import is_normalised, try_normalise
from .options import ReleaseOptions

if TYPE_CHECKING:
    from .terminated import NearestLive

__all__ = [
    "COUNT_KEYS",
    "FAILURE_KINDS",
    "MAX_LISTED_ERRORS",
    "ChunkCheck",
    "CheckedRecords",
    "RecordRules",
    "Screen",
    "failure_error",
    "merge_counts",
    "over_budget_error",
    "OverBudgetError",
]

# The ledger's budget screen (ledger/recording.py): releasable records in, refused positions out.
Screen = Callable[[list, np.ndarray, int], Sequence[int]]

MAX_LISTED_ERRORS = 20

# Why a row cannot be released, in the order they are tested (the first that applies counts).
FAILURE_KINDS = (
    "missing_identifier",
    "invalid_identifier",
    "missing_postcode",
    "malformed_postcode",
    "unknown_postcode",
    "over_budget",
)
_FAILURE_LABELS = {
    "missing_identifier": "missing or blank identifier",
    "invalid_identifier": "unusable identifier",
    "missing_postcode": "missing or blank postcode",
    "malformed_postcode": "malformed postcode",
    "unknown_postcode": "postcode not in the graph",
    "over_budget": "privacy budget exceeded (ledger)",
}
COUNT_KEYS = (
    "records",
    "released",
    "terminated_mapped",
    *FAILURE_KINDS,
    "failed",
    "nulled",
    "dropped",
    "rows_out",
)


def _empty_counts() -> dict[str, int]:
    return dict.fromkeys(COUNT_KEYS, 0)


def merge_counts(total: dict[str, int], part: dict[str, int]) -> dict[str, int]:
    """Add ``part`` into ``total`` (in place) and return it."""
    for key, value in part.items():
        total[key] = total.get(key, 0) + int(value)
    return total


def failure_error(
    row_errors: Sequence[tuple[int, str]],
    counts: dict[str, int],
    row_lines: dict[int, int] | None = None,
    *,
    terminated: str,
) -> InputDataError:
    """The error for records that cannot be released under ``on_error="error"``;
    ``row_lines``: the file line each listed record starts on, for a CSV file; ``terminated``:
    the release's policy for postcodes not in the graph, whose other choice the message names
    when it could help."""
    failed = counts.get("failed", 0)
    reasons = ", ".join(
        f"{_FAILURE_LABELS[k]}: {counts[k]}" for k in FAILURE_KINDS if counts.get(k)
    )
    # A record the budget refuses stops the release under every policy (over_budget_error).
    budget = (
        f"; a record the budget refuses stops it whatever {option_name('on_error')} says"
        if counts.get("over_budget")
        else ""
    )
    nearest = (
        f"; {option('terminated', 'nearest')} releases a terminated postcode as the live one "
        "nearest it"
        if counts.get("unknown_postcode") and terminated == "error"
        else ""
    )
    # The way on: the other policies, whose empty cells or missing rows then show which
    # records failed (docs/release.md), a choice the user makes knowingly.
    others = (
        f"; {option('on_error', 'null')} (an empty cell) or {option('on_error', 'drop')} (no "
        "row) releases the other records"
        if failed > counts.get("over_budget", 0)
        else ""
    )
    return InputDataError(
        f"{failed} of {counts.get('records', 0)} records cannot be released ({reasons}); "
        f"with {option('on_error', 'error')} nothing is released{budget}{others}{nearest}",
        row_errors=list(row_errors[:MAX_LISTED_ERRORS]),
        total_errors=failed,
        row_lines=row_lines,
    )


class OverBudgetError(InputDataError):
    """Records a ledger's budget refuses (:func:`over_budget_error`)."""


def over_budget_error(check: ChunkCheck, row_lines: dict[int, int] | None = None) -> InputDataError:
    """The error for records the ledger's budget refuses, whatever ``on_error`` says.

    Only a record that draws anew can be refused (a repeated draw costs nothing): under an
    unchanged key, graph, epsilon and radius, that is a subject whose true postcode differs from
    the one an earlier release drew for.  So an empty cell or a missing row in its place would
    tell the release's readers that the subject was refused a new draw, a fact about their true
    postcodes that the guarantee does not cover: the release stops instead, naming the rows
    (docs/ledger.md, "Budgets")."""
    counts = check.counts
    over = counts.get("over_budget", 0)
    return OverBudgetError(
        f"{over} of {counts.get('records', 0)} records would take their subjects over the "
        f"budget; nothing is released. A record the budget refuses stops the release "
        f"whatever {option_name('on_error')} says: an empty cell or a missing row in its place "
        "would tell the release's readers that its subject was refused a new draw, a fact "
        "about their true postcodes (if the key, graph, epsilon and radius are those of the "
        "releases before, that they moved)",
        row_errors=sorted(check.budget_errors)[:MAX_LISTED_ERRORS],
        total_errors=over,
        row_lines=row_lines,
    )


def _is_missing(value: object) -> bool:
    if value is None or value is pd.NA or value is pd.NaT:
        return True
    if isinstance(value, Decimal):  # (not a numbers.Real): NaN is missing, as a float's is
        return Decimal(value).is_nan()
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
        try:
            return math.isnan(float(value))
        except Exception:  # (a Fraction too large for a float, an odd type's own error): a
            return False  # number, not missing, and judged by ``canonical_subject_id``
    return False


class _OtherType:
    """Stands for a cell of an Arrow type no identifier or postcode has (a date, time,
    timestamp or duration, a list, struct, map or union): its record is refused as any such
    value is ("identifier has an unsupported type", "not a UK postcode in form"), and the cell
    is never made a Python object, which fails for a date past year 9999 quoting its year."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<a cell of another type>"


_OTHER_TYPE = _OtherType()


def never_usable(kind) -> bool:
    """Whether no cell of the Arrow type ``kind`` can be an identifier or a postcode."""
    import pyarrow as pa

    while pa.types.is_dictionary(kind):
        kind = kind.value_type
    return pa.types.is_temporal(kind) or pa.types.is_nested(kind)


def cells_of(column: pd.Series) -> list:
    """The Python values of an identifier or postcode column, which the record rules judge.
    A 16- or 32-bit float keeps its width (as a numpy scalar): it holds every integer only up
    to 2^11 or 2^24, not a Python float's 2^53, and two people must not merge by rounding."""
    dtype = column.dtype
    if isinstance(dtype, pd.ArrowDtype) and never_usable(dtype.pyarrow_dtype):
        # (missing where the column is, a stand-in elsewhere)
        return [_OTHER_TYPE if here else None for here in column.notna().to_numpy().tolist()]
    narrow = _narrow_float(dtype)
    if narrow is not None:  # (a missing cell stays missing: None, NaN, pd.NA alike)
        return [v if _is_missing(v) else narrow(v) for v in column.tolist()]
    return column.tolist()


def _narrow_float(dtype) -> type | None:
    """numpy's scalar type for a float column narrower than 64 bits, else None: a numpy,
    nullable (``Float32``), sparse or categorical column of such floats, or an Arrow one,
    dictionary-encoded or not."""
    import pyarrow as pa

    if isinstance(dtype, pd.CategoricalDtype):
        return _narrow_float(dtype.categories.dtype)
    if isinstance(dtype, pd.ArrowDtype):
        kind = dtype.pyarrow_dtype
        while pa.types.is_dictionary(kind):
            kind = kind.value_type
        if pa.types.is_floating(kind) and kind.bit_width < 64:
            return {16: np.float16, 32: np.float32}[kind.bit_width]
        return None
    for inner in ("numpy_dtype", "subtype"):  # a nullable dtype's, a sparse one's
        if isinstance(getattr(dtype, inner, None), np.dtype):
            dtype = getattr(dtype, inner)
            break
    if isinstance(dtype, np.dtype) and dtype.kind == "f" and dtype.itemsize < 8:
        return dtype.type
    return None


def _identifier(value: object) -> tuple[str | None, str | None, str]:
    """(canonical id, failure kind, reason); the reason never contains the value."""
    if _is_missing(value):
        return None, "missing_identifier", "missing identifier"
    try:
        return canonical_subject_id(value), None, ""
    except ValueError as exc:
        if isinstance(value, str) and not str.strip(value):  # (not a subclass's own strip)
            return None, "missing_identifier", "blank identifier"
        return None, "invalid_identifier", str(exc)


_KIND = {kind: index for index, kind in enumerate(FAILURE_KINDS)}


def _canonical_identifiers(values: list) -> tuple[list[str | None], dict[int, tuple[str, str]]]:
    """Canonical text of every identifier, and ``{row: (failure kind, reason)}`` for the rest.

    Exactly :func:`_identifier` row by row; the common columns (all text, as read from CSV, or
    all Python integers, as from an integer column) take a vectorised route to the same text.
    """
    types = set(map(type, values))
    joined = "".join(values) if types == {str} else None  # (one pass for the whole column)
    all_ascii = joined is not None and joined.isascii()
    if all_ascii or (joined is not None and _bulk_safe(joined)):
        normalize = unicodedata.normalize
        canonical: list[str | None] = (
            [v.strip() for v in values]  # ASCII text is its own NFC form
            if all_ascii
            else [normalize("NFC", v).strip() for v in values]
        )
        blank = [i for i, text in enumerate(canonical) if not text]
        return canonical, {i: ("missing_identifier", "blank identifier") for i in blank}
    if types == {int}:
        try:
            return list(map(str, values)), {}
        except ValueError:  # an integer of too many digits: row by row, to name its rows
            pass
    canonical = []
    failures: dict[int, tuple[str, str]] = {}
    for i, value in enumerate(values):
        text, kind, reason = _identifier(value)
        canonical.append(text)
        if kind is not None:
            failures[i] = (kind, reason)
    return canonical, failures


def _bulk_safe(text: str) -> bool:
    """Whether the joined text of a column has nothing the row-by-row rule refuses: no lone
    surrogate, no code point unassigned in this Python's Unicode version."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return not holds_unassigned(text)


@dataclass
class ChunkCheck:
    """What checking a chunk found: counts by outcome and the failing rows (first few listed).

    ``row_errors`` lists at most :data:`MAX_LISTED_ERRORS` ``(record number, reason)`` pairs;
    ``counts["failed"]`` is the full number.  ``budget_errors`` lists as many of the records a
    ledger's budget refused, on their own: other failures listed first must not crowd them out
    of :func:`over_budget_error`.
    """

    counts: dict[str, int] = field(default_factory=_empty_counts)
    row_errors: list[tuple[int, str]] = field(default_factory=list)
    budget_errors: list[tuple[int, str]] = field(default_factory=list)

    @property
    def failed(self) -> int:
        return self.counts.get("failed", 0)

    def merge(self, other: ChunkCheck) -> ChunkCheck:
        merge_counts(self.counts, other.counts)
        for listed, more in (
            (self.row_errors, other.row_errors),
            (self.budget_errors, other.budget_errors),
        ):
            listed.extend(more[: max(0, MAX_LISTED_ERRORS - len(listed))])
        return self


@dataclass
class CheckedRecords:
    check: ChunkCheck
    ids: list[str | None]
    # node to perturb from (a terminated postcode's is the live node it maps to, as its draw
    # is that node's), -1 for a failed row
    nodes: np.ndarray


class RecordRules:
    """The release rules for one graph and one set of options: which records can be released,
    from which node, and why the others cannot.  Holds no run-wide state."""

    def __init__(self, graph: Graph, options: ReleaseOptions, nearest: NearestLive | None = None):
        self.graph = graph
        self.options = options
        self._nearest = nearest

    def check_records(
        self, df: pd.DataFrame, row_offset: int, screen: Screen | None = None
    ) -> CheckedRecords:
        """Classify every record of ``df``: the release rules, in one place.

        Precondition: ``df`` has the identifier and postcode columns (``check_columns``).
        Postcondition: for each record either ``nodes[i] >= 0`` (releasable, from that node,
        with canonical identifier ``ids[i]``) or exactly one failure is counted, the first that
        applies in ``FAILURE_KINDS`` order; reasons never contain a value.
        """
        n = len(df)
        check = ChunkCheck()
        counts = check.counts
        counts["records"] = n
        ids, id_failures = _canonical_identifiers(cells_of(df[self.options.id_column]))
        # Postcodes are classified once per distinct value (files repeat them), then mapped
        # back to the rows; a postcode is looked at only where the identifier is usable.
        outcomes, which = self._postcode_outcomes(cells_of(df[self.options.postcode_column]))
        kind = outcomes["kind"][which]
        kind[list(id_failures)] = -1  # the identifier's failure comes first
        released = kind == 0
        nodes = np.where(released, outcomes["node"][which], -1)
        counts["terminated_mapped"] = int(np.count_nonzero(outcomes["mapped"][which] & released))
        for i in np.flatnonzero(~released)[:MAX_LISTED_ERRORS].tolist():
            check.row_errors.append(
                (
                    row_offset + i + 1,
                    id_failures[i][1]
                    if i in id_failures
                    else self._postcode_reason(FAILURE_KINDS[kind[i]]),
                )
            )
        for failure in id_failures.values():
            counts[failure[0]] += 1
        by_kind = np.bincount(kind[kind > 0], minlength=len(FAILURE_KINDS))
        for k in range(2, len(FAILURE_KINDS)):  # the postcode kinds
            counts[FAILURE_KINDS[k]] += int(by_kind[k])
        for i in np.flatnonzero(~released).tolist():
            ids[i] = None
        if screen is not None:
            self._apply_screen(screen, check, ids, nodes, row_offset)
        failed = sum(counts[k] for k in FAILURE_KINDS)
        counts["failed"] = failed
        counts["released"] = n - failed
        if self.options.on_error == "null":
            counts["nulled"] = failed
        elif self.options.on_error == "drop":
            counts["dropped"] = failed
        counts["rows_out"] = n - counts["dropped"]
        return CheckedRecords(check, ids, nodes)

    def _apply_screen(
        self,
        screen: Screen,
        check: ChunkCheck,
        ids: list,
        nodes: np.ndarray,
        row_offset: int,
    ) -> None:
        """Fail the records the ledger's budget refuses (docs/ledger.md, "Budgets")."""
        refused = screen(ids, nodes, row_offset)
        for i in refused:
            nodes[i] = -1
            ids[i] = None
            error = (row_offset + i + 1, _FAILURE_LABELS["over_budget"])
            if len(check.row_errors) < MAX_LISTED_ERRORS:
                check.row_errors.append(error)
            if len(check.budget_errors) < MAX_LISTED_ERRORS:
                check.budget_errors.append(error)
        check.counts["over_budget"] += len(refused)
        check.row_errors.sort()

    def _postcode_reason(self, kind: str) -> str:
        if kind == "missing_postcode":
            return "missing or blank postcode"
        if kind == "malformed_postcode":
            return "not a UK postcode in form"
        if self._nearest is not None:
            return (
                "postcode is well-formed but not in the graph, and the postcode directory "
                "gives no location for it"
            )
        return (
            "postcode is well-formed but not in the graph (terminated, non-geographic, or "
            "outside its area)"
        )

    def _normalised(self, value: object) -> str | int:
        """The normalised postcode of a cell, or the index of its failure kind."""
        if _is_missing(value) or (isinstance(value, str) and not value.strip()):
            return _KIND["missing_postcode"]
        norm = try_normalise(value)
        return _KIND["malformed_postcode"] if norm is None else norm

    def _postcode_outcomes(self, values: list) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Outcome arrays per distinct postcode cell and, per row, the index of its cell.

        An outcome is (failure kind index or 0, node to release from, mapped?);
        index 0 of FAILURE_KINDS is an identifier kind, so 0 can mean "no failure" here.
        Text cells are grouped by exact equality (``pd.factorize``); any other cell (missing
        values, numbers) is classified on its own, so grouping can never merge cells that the
        rules treat differently.  The normalised postcodes are looked up in the graph in one
        vectorised call (``Graph.find_labels``, the same answers as ``Graph.find``).
        """
        distinct: list[Any]
        if set(map(type, values)) <= {str}:
            which, uniques = pd.factorize(np.array(values, dtype=object))
            distinct = uniques.tolist()
        else:
            which = np.empty(len(values), dtype=np.int64)
            distinct = []
            position: dict[str, int] = {}
            for i, value in enumerate(values):
                if type(value) is str:
                    at = position.setdefault(value, len(distinct))
                    if at == len(distinct):
                        distinct.append(value)
                else:
                    at = len(distinct)
                    distinct.append(value)
                which[i] = at
        # Cells already in normalised form (most, in practice) are their own normal form.
        norms = [
            v if type(v) is str and is_normalised(v) else self._normalised(v) for v in distinct
        ]
        found = iter(self.graph.find_labels([n for n in norms if type(n) is str]).tolist())
        table = []
        for norm in norms:
            if type(norm) is not str:
                table.append((norm, -1, False))
                continue
            node = next(found)
            if node >= 0:
                table.append((0, node, False))
            else:  # not a node: a terminated postcode the directory locates, or unknown
                table.append(self._unlisted(norm))
        outcomes = {
            "kind": np.array([t[0] for t in table], dtype=np.int64).reshape(-1),
            "node": np.array([t[1] for t in table], dtype=np.int64).reshape(-1),
            "mapped": np.array([t[2] for t in table], dtype=bool).reshape(-1),
        }
        return outcomes, np.asarray(which, dtype=np.int64)

    def _unlisted(self, norm: str) -> tuple[int, int, bool]:
        """Outcome of a well-formed postcode that is not a node of the graph."""
        if self._nearest is not None:
            row = self._nearest.row_of(norm)
            if row is not None:
                return 0, self._nearest.nearest_node(row), True
        return _KIND["unknown_postcode"], -1, False
