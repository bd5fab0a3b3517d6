"""The pandas recipe: :func:`perturb_frame`, the Python form of ``postcode-privacy perturb``
(docs/release.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, overload

import numpy as np
import pandas as pd

from ..errors import InputDataError
from ..graph.graph import Graph
from ..mechanism import Key
from .options import ReleaseOptions
from .plan import ReleasePlan, checked_row_offset
from .records import ChunkCheck, _empty_counts, failure_error, merge_counts

__all__ = ["perturb_frame"]


@overload
def perturb_frame(
    df: pd.DataFrame,
    *,
    key: Key,
    graph: Graph | Callable[[], Graph] | None = ...,
    options: ReleaseOptions | None = ...,
    row_offset: int = ...,
    progress: bool = ...,
    with_counts: Literal[False] = ...,
    terminated_locations: pd.DataFrame | None = ...,
    **option_kwargs: Any,
) -> pd.DataFrame: ...


@overload
def perturb_frame(
    df: pd.DataFrame,
    *,
    key: Key,
    graph: Graph | Callable[[], Graph] | None = ...,
    options: ReleaseOptions | None = ...,
    row_offset: int = ...,
    progress: bool = ...,
    with_counts: Literal[True],
    terminated_locations: pd.DataFrame | None = ...,
    **option_kwargs: Any,
) -> tuple[pd.DataFrame, dict[str, int]]: ...


def perturb_frame(
    df: pd.DataFrame,
    *,
    key: Key,
    graph: Graph | Callable[[], Graph] | None = None,
    options: ReleaseOptions | None = None,
    row_offset: int = 0,
    progress: bool = False,
    with_counts: bool = False,
    terminated_locations: pd.DataFrame | None = None,
    **option_kwargs: Any,
) -> pd.DataFrame | tuple[pd.DataFrame, dict[str, int]]:
    """Release the postcodes of a pandas DataFrame: the Python form of ``postcode-privacy perturb``.

    The release options (:class:`ReleaseOptions`) are given either as ``options=`` or as
    keywords (``epsilon=1, id_column="person_id", postcode_column="postcode"``, ...), not both.
    Returns a new frame with every column of ``df`` except ``postcode_column`` (kept when
    ``keep_source_postcode``) followed by the released postcode in ``out_column`` (of the true
    postcodes' dtype if that is a pandas string dtype, as pandas 3's ``dtype=str`` gives;
    object otherwise); ``df`` is not modified.  ``graph=None`` uses the embedded national
    graph; ``radius=None`` the default radius for ``epsilon``.  ``on_error`` is ``"error"`` (raise :class:`InputDataError` listing
    every failing record, up to 20, and release nothing), ``"null"`` (empty released cell) or
    ``"drop"`` (leave the row out; no label, level value, category or Arrow dictionary entry
    that only left-out rows held stays in the result's index or columns; a run-end-encoded
    column, or one holding Arrow text, binary or list views, is refused, and so is a sparse
    column whose fill value only left-out rows held).  ``terminated="nearest"`` maps located
    terminated postcodes to the nearest live one first; with a graph artefact that ``build``
    made from ONSPD or NSPL, pass its sidecar as ``terminated_locations=read_sidecar(path)``
    (:func:`read_sidecar`), as the command line uses it.  Record numbers in errors count from
    ``row_offset + 1`` (a whole number, 0 or more).

    ``result.attrs["postcode_privacy"]`` describes the release as its manifest does (epsilon,
    radius, graph hash, key fingerprint): publishable, and pandas writes it into any Parquet
    file made from the result.  The counts per outcome are returned only with
    ``with_counts=True``, as ``(result, counts)``: they are PRIVATE, exact statistics of the
    true records for the custodian only (docs/release.md, "The manifest"), so they are kept
    out of ``attrs``, which pandas carries into every copy and every Parquet file it writes.
    For the same reason ``df.attrs`` is not carried over (it may describe the true records):
    the result's ``attrs`` holds only ``"postcode_privacy"``, and ``df.attrs`` is left as it was;
    nor is a DataFrame subclass's ``_metadata``: the result is a plain DataFrame.  An index
    level named like ``out_column`` (as text, and but for invisible characters or Unicode
    form, as columns are) is refused.
    The index is released as it is, so an index level named like ``postcode_column`` (but
    for case, surrounding spaces or Unicode form, as for columns) is refused unless
    ``keep_source_postcode``: it may hold the true postcodes.
    An identifier seen with two different postcodes gives one
    :class:`DuplicateSubjectWarning`.
    """
    if not isinstance(df, pd.DataFrame):
        raise TypeError("df must be a pandas DataFrame")
    row_offset = checked_row_offset(row_offset)
    plan = ReleasePlan(
        key=key,
        options=ReleaseOptions.build(options, **option_kwargs),
        graph=graph,
        terminated_locations=terminated_locations,
    )
    _refuse_index_columns(df, plan.options)
    plan.check_columns(df.columns, header_line=False)
    if plan.on_error == "drop":
        _refuse_untakeable_arrow(df)
    step = 10_000 if progress else max(len(df), 1)
    if plan.on_error == "error" and len(df) > step:
        check = ChunkCheck()
        for start in range(0, len(df), step):
            check.merge(plan.check_chunk(df.iloc[start : start + step], row_offset + start))
        if check.failed:
            raise failure_error(check.row_errors, check.counts, terminated=plan.terminated)
    from .._progress import count_bar

    parts, counts = [], _empty_counts()
    with count_bar(progress, len(df), "releasing", prefix="perturb_frame") as bar:
        for start in range(0, max(len(df), 1), step):
            out, part = plan.process_chunk(
                df.iloc[start : start + step], row_offset + start, warn=False
            )
            parts.append(out)
            merge_counts(counts, part)
            bar.update(part["records"])
    result = parts[0] if len(parts) == 1 else pd.concat(parts)
    if plan.on_error == "drop" and len(result) < len(df):
        result = _without_dropped_categories(result, df)
    source_kind = df[plan.postcode_column].dtype
    if isinstance(source_kind, pd.StringDtype) and plan.out_column in result.columns:
        # Released postcodes are text of the same kind as the true ones (pandas 3 reads text
        # as "str"), so a release compares equal to the same file read back.
        result[plan.out_column] = result[plan.out_column].astype(source_kind)
    counts["identifiers_with_several_postcodes"] = plan.subjects_with_several_postcodes
    plan.warn_subjects()
    if type(result) is not pd.DataFrame:
        # A subclass's ``_metadata`` attributes, like ``attrs``, ride along with every slice
        # and may describe the true records: the release is a plain DataFrame.
        result = pd.DataFrame(result)
    # A new dict, not an update: pandas copied the caller's attrs into every slice, and they
    # may describe the true records; the release carries only its own description.
    result.attrs = {"postcode_privacy": plan.describe()}
    return (result, counts) if with_counts else result


def _refuse_untakeable_arrow(df: pd.DataFrame) -> None:
    """Under ``on_error="drop"`` rows are taken from every column, and Arrow can take no rows
    of a run-end-encoded array or of a text or binary view, and rows taken from a list view keep
    the left-out rows' items: name such a column (or index level) up front, by position,
    instead of Arrow's own error halfway through or a release that still holds them."""
    from .arrow_types import without_list_views, without_run_ends, without_views

    remedies = (
        (without_run_ends, "is run-end encoded", "decode it (pyarrow.compute.run_end_decode)"),
        (
            without_views,
            "holds Arrow string or binary views",
            "cast it to large_string or large_binary (pd.ArrowDtype(pyarrow.large_string()))",
        ),
        (
            without_list_views,
            "holds Arrow list views",
            "cast it to a list type (pd.ArrowDtype(pyarrow.large_list(...)))",
        ),
    )
    levels = df.index.levels if isinstance(df.index, pd.MultiIndex) else [df.index]
    places = [(f"column {i}", dtype) for i, dtype in enumerate(df.dtypes, start=1)]
    places += [(f"index level {i}", level.dtype) for i, level in enumerate(levels, start=1)]
    for where, dtype in places:
        if not isinstance(dtype, pd.ArrowDtype):
            continue
        for without, what, remedy in remedies:
            if without(dtype.pyarrow_dtype) != dtype.pyarrow_dtype:
                raise InputDataError(
                    f'{where} {what}, and rows cannot be left out of it (on_error="drop"); '
                    f"{remedy} and release again"
                )
        if _extension_storage_untakeable(dtype.pyarrow_dtype):
            raise InputDataError(
                f"{where} holds an Arrow extension type stored as a dictionary, run-end "
                'encoded array or view, and rows cannot be left out of it (on_error="drop"); '
                "store its plain values and release again"
            )


def _extension_storage_untakeable(kind) -> bool:
    """Whether an extension type within ``kind`` is stored in a form that rows cannot be
    cleanly left out of (a dictionary, which cannot be encoded afresh inside it; run ends;
    a view): the checks above look through every other type, but not into an extension's
    storage."""
    from .arrow_types import (
        extension_stored_as,
        without_dictionaries,
        without_list_views,
        without_run_ends,
        without_views,
    )

    forms = (without_dictionaries, without_run_ends, without_views, without_list_views)
    return extension_stored_as(kind, forms)


def _refuse_index_columns(df: pd.DataFrame, options: ReleaseOptions) -> None:
    """Name a wanted column that is the frame's index (``df.set_index("id")``), not a column:
    the generic message would only say it is missing.  So is a frame whose column labels
    are tuples (a MultiIndex), which no column name given as text can match."""
    if isinstance(df.columns, pd.MultiIndex):
        raise InputDataError(
            f"the frame's column labels have {df.columns.nlevels} levels (a MultiIndex); give "
            "each column a single name first (e.g. df.columns = ['_'.join(map(str, c)) for c "
            "in df.columns])"
        )
    for name in (options.id_column, options.postcode_column):
        if name not in df.columns and name in df.index.names:
            raise InputDataError(
                f"the frame has no column {name!r}: {name!r} is its index; pass "
                "df.reset_index() to release it as a column"
            )
    from .column_labels import looks_like

    released = looks_like(str(options.out_column))
    for position, level_name in enumerate(df.index.names, start=1):
        # As text, as a Parquet file names its columns (an index level named 0 becomes "0"),
        # and as it looks, as input columns are compared with it (``check_columns``).
        if level_name is not None and looks_like(str(level_name)) == released:
            raise InputDataError(
                f"index level {position} has the name given as out_column "
                f"{options.out_column!r}: a Parquet file, or reset_index(), would then hold two "
                "columns of that name; choose another out_column or rename the index"
            )
    if not options.keep_source_postcode:
        _refuse_postcode_index(df.index, options)


def _refuse_postcode_index(index: pd.Index, options: ReleaseOptions) -> None:
    """Refuse an index level named like the postcode column, even but for case, surrounding
    spaces or Unicode form (``df.set_index("postcode", drop=False)``): it may hold the true
    postcodes, and the index is released as it is, as ``check_columns`` refuses such a
    column (docs/release.md)."""
    from .column_labels import loosely

    wanted = loosely(options.postcode_column)
    for position, name in enumerate(index.names, start=1):
        if name is not None and loosely(name) == wanted:
            raise InputDataError(
                f"index level {position} is named like postcode_column "
                f"{options.postcode_column!r}: it may hold true postcodes, and the index is "
                "released as it is; drop it (df.reset_index(drop=True)) if it does, rename it "
                "if it does not"
            )


def _without_dropped_categories(result: pd.DataFrame, df: pd.DataFrame) -> pd.DataFrame:
    """``result`` with each categorical column's categories that only dropped records held
    removed (categories the input did not use stay, as the caller's own): a category is a
    value, and keeping it would publish a dropped record's cell in the release's dtype and in
    any Parquet file written from it.  Done once, on the joined result, so that the dtype does
    not depend on the chunks (``progress``)."""
    from .column_labels import column_label

    result = result.copy()
    for name in result.columns:
        column = result[name]
        if isinstance(column.dtype, pd.CategoricalDtype) and name in df.columns:
            gone = _only_dropped(df[name], column)
            if gone:
                result[name] = column.cat.set_categories(
                    _categories_without(column.cat.categories, gone)
                )
        elif isinstance(column.dtype, pd.ArrowDtype) and _holds_dictionary(column.dtype):
            result[name] = _arrow_dictionaries_afresh(column, column_label(name, df.columns))
        elif isinstance(column.dtype, pd.SparseDtype) and name in df.columns:
            _refuse_dropped_fill_value(column, df[name], column_label(name, df.columns))
    result.index = _index_without_dropped_labels(result.index, df.index)
    return result


def _refuse_dropped_fill_value(kept, source, label: str) -> None:
    """A sparse column's or index's fill value is part of its dtype: refuse one that only
    left-out rows held, as such a category would be removed (the dtype cannot lose it
    without changing type).  ``kept`` and ``source`` are the released and the input values."""
    if _holds_fill_value(source, if_unsure=True) and not _holds_fill_value(kept, if_unsure=False):
        raise InputDataError(
            f"{label} is sparse, and its fill value is held only by records left out "
            '(on_error="drop"), so the release\'s dtype would still hold it; make it dense '
            "(.sparse.to_dense()) or choose another fill value, and release again"
        )


def _holds_fill_value(values, *, if_unsure: bool) -> bool:
    """Whether a row of the sparse ``values`` holds its fill value: a row stored as the fill
    (not among the stored points), or a stored value equal to it.  Compared without hashing
    (a cell may be a dict); ``if_unsure`` answers when a comparison raises."""
    array = pd.array(values)
    fill = array.dtype.fill_value
    if pd.isna(fill):
        return False  # a missing value is no record's value
    if array.sp_index.npoints < len(array):
        return True
    try:
        return bool(np.any(np.asarray(array.sp_values, dtype=object) == fill))
    except Exception:
        return if_unsure


def _only_dropped(before, after) -> list:
    """The values ``before`` holds and ``after`` (its kept rows) does not, in a fixed order."""
    return sorted(set(before.dropna().unique()) - set(after.dropna().unique()), key=repr)


def _index_without_dropped_labels(index: pd.Index, source: pd.Index) -> pd.Index:
    """``index`` (the released rows' labels, taken from ``source``) without the labels only
    dropped records held: a MultiIndex keeps every level value of its source, and a
    categorical index every category, so either would publish a dropped record's label
    (``result.index.levels``, the dtype, a Parquet file).  Labels the input did not use stay,
    as for categorical columns."""
    if isinstance(index, pd.MultiIndex):
        levels: list[Any] = []
        codes: list[Any] = []
        for i in range(index.nlevels):
            if isinstance(index.levels[i].dtype, pd.SparseDtype):
                _refuse_dropped_fill_value(
                    index.get_level_values(i), source.get_level_values(i), f"index level {i + 1}"
                )
            gone = _only_dropped(source.get_level_values(i), index.get_level_values(i))
            level, code = _level_without(index.levels[i], np.asarray(index.codes[i]), gone)
            if gone:
                level = _arrow_index_afresh(level)
            levels.append(level)
            codes.append(code)
        return pd.MultiIndex(levels=levels, codes=codes, names=index.names, verify_integrity=False)
    if isinstance(index.dtype, pd.SparseDtype):
        _refuse_dropped_fill_value(index, source, "the index")
    if isinstance(index, pd.CategoricalIndex):
        gone = _only_dropped(source, index)
        return index.set_categories(_categories_without(index.categories, gone)) if gone else index
    return index if len(index) == len(source) else _arrow_index_afresh(index)


def _arrow_index_afresh(index: pd.Index) -> pd.Index:
    """``index`` with its Arrow dictionaries (top-level or nested) encoded afresh from its own
    labels: like categories, a dictionary keeps every value of the index it was taken from
    (``level[keep]`` too), as a dictionary column does (``_arrow_dictionaries_afresh``)."""
    if not (isinstance(index.dtype, pd.ArrowDtype) and _holds_dictionary(index.dtype)):
        return index
    fresh = _arrow_dictionaries_afresh(pd.Series(index.array), "the index")
    return pd.Index(fresh.array, name=index.name)


def _level_without(level: pd.Index, code: np.ndarray, gone: list) -> tuple[pd.Index, np.ndarray]:
    """A MultiIndex level without the values ``gone`` (none of which ``code`` points at), and
    ``code`` renumbered to match; a categorical level loses them from its categories too."""
    if not gone:
        return level, code
    keep = ~level.isin(gone)
    renumbered = np.cumsum(keep) - 1
    code = np.where(code >= 0, renumbered[np.maximum(code, 0)], -1)
    level = level[keep]
    if isinstance(level, pd.CategoricalIndex):
        level = level.set_categories(_categories_without(level.categories, gone))
    return level, code


def _categories_without(categories: pd.Index, gone: list) -> pd.Index:
    """``categories`` less ``gone``, in their order (pandas' ``remove_categories``
    sorts the rest of an unordered categorical's categories) and of their dtype (a list
    would be inferred afresh: int8 categories would come back int64), with any Arrow
    dictionary in them encoded afresh."""
    dropped = set(gone)
    kept = categories[np.array([value not in dropped for value in categories], dtype=bool)]
    # An Arrow dictionary keeps every entry of the array it was filtered from.
    return _arrow_index_afresh(kept)


def _holds_dictionary(dtype: pd.ArrowDtype) -> bool:
    from .arrow_types import without_dictionaries

    return without_dictionaries(dtype.pyarrow_dtype) != dtype.pyarrow_dtype


def _arrow_dictionaries_afresh(column: pd.Series, label: str) -> pd.Series:
    """An Arrow-backed column (``dtype_backend="pyarrow"``) whose dictionaries, top-level or
    nested, are encoded afresh from the values the released rows hold, as a Parquet release's
    are (``arrow_types.dictionaries_of_their_own``): the input's dictionary held dropped cells.
    ``label`` names the column in a message."""
    import pyarrow as pa

    from .arrow_types import dictionaries_of_their_own

    table = pa.table({"column": pa.chunked_array([pa.array(column.array)])})
    fresh = dictionaries_of_their_own(table, [label]).column(0).combine_chunks()
    return pd.Series(pd.arrays.ArrowExtensionArray(fresh), index=column.index, name=column.name)
