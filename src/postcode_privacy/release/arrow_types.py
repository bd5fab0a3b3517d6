"""Arrow types rewritten or refused so that a release keeps exactly the records it writes.

A dictionary read from the input lists every value of its column, the left-out records'
included; views and run-end-encoded arrays cannot have rows taken from them; an extension type
stored as a dictionary cannot be rewritten at all.  The functions here look through nested
types (struct, list, map, union) for them.
"""

from __future__ import annotations

from ..errors import InputDataError

__all__ = [
    "refuse_dictionaries_in_extensions",
    "dictionaries_of_their_own",
    "without_dictionaries",
    "without_run_ends",
    "without_views",
    "without_list_views",
    "extension_stored_as",
    "dictionary_in_extension",
    "nested_dictionary",
]


def refuse_dictionaries_in_extensions(schema) -> None:
    """Refuse, by position and before any row is read, a Parquet column whose extension type
    is stored dictionary-encoded (:func:`dictionary_in_extension`)."""
    for position, field in enumerate(schema, start=1):
        if dictionary_in_extension(field.type):
            raise InputDataError(
                f"column {position} has an Arrow extension type stored dictionary-encoded, "
                "which cannot be read safely (pyarrow aborts) nor its dictionary rewritten; "
                "store its plain values and release again"
            )


def dictionaries_of_their_own(table, labels: list[str]):
    """``table`` (one row group) with every dictionary, top-level or nested in a struct, list
    or map, encoded afresh from the values of these rows: a dictionary read from the input
    holds every value of the input's column, the dropped records' (``--on-error drop``) among
    them, and Arrow writes it into the Parquet file whole.  The column's Arrow type is kept.
    An unordered dictionary, and an ordered one nested in another type, lists its values in
    order of first appearance; an ordered one at the top level keeps the input's order, less
    the values these rows do not hold.  Either way it depends
    only on the rows written, so the file's bytes do not depend on the chunk size.
    ``labels[i]`` names the table's i-th column in a message (:func:`column_label`)."""
    import pyarrow as pa

    columns = []
    for position, column in enumerate(table.columns):
        kind = column.type
        plain = without_dictionaries(kind)
        if plain != kind:
            try:  # (Arrow cannot cast a list view of dictionaries: refused, never leaked)
                values = column.cast(plain).combine_chunks()
                # take() compacts: a slice of a nested array still holds its parent's children
                values = values.take(pa.array(range(len(values)), pa.int64()))
                column = (
                    _ordered_afresh(column, values)
                    if pa.types.is_dictionary(kind) and kind.ordered
                    else values.cast(kind)
                )
            except (pa.ArrowNotImplementedError, pa.ArrowInvalid):  # e.g. an index type too
                # small for the values of several input row groups together
                raise InputDataError(
                    f"{labels[position]} is dictionary-encoded in a way this release cannot rewrite; decode it "
                    "(store its plain values) and release again"
                ) from None
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=table.schema)


def without_dictionaries(kind):
    """``kind`` with every dictionary type in it replaced by its value type."""
    import pyarrow as pa

    return _replaced_within(kind, lambda k: k.value_type if pa.types.is_dictionary(k) else k)


def without_run_ends(kind):
    """``kind`` with every run-end-encoded type in it replaced by its value type."""
    import pyarrow as pa

    is_run_end_encoded = getattr(pa.types, "is_run_end_encoded", lambda _: False)
    return _replaced_within(kind, lambda k: k.value_type if is_run_end_encoded(k) else k)


def without_views(kind):
    """``kind`` with every text or binary view type in it replaced by its large (64-bit
    offsets) form: pandas cannot take or filter rows of a view column (``--on-error drop``,
    the CSV writer), and the Parquet writer turns them back into the input's type."""
    import pyarrow as pa

    views = {"string_view": pa.large_string(), "binary_view": pa.large_binary()}
    return _replaced_within(kind, lambda k: views.get(str(k), k))


def without_list_views(kind):
    """``kind`` with every list view in it replaced by the list of the same items: rows taken
    from a list view share its child values, so a left-out row's items would stay in them."""
    import pyarrow as pa

    def as_list(k):
        if getattr(pa.types, "is_list_view", lambda _: False)(k):
            return pa.list_(k.value_field)
        if getattr(pa.types, "is_large_list_view", lambda _: False)(k):
            return pa.large_list(k.value_field)
        return k

    return _replaced_within(kind, as_list)


def _replaced_within(kind, replace):
    """``kind`` with ``replace`` applied to it and to every type nested in it (struct fields,
    list, map and list-view items, union members, run-end-encoded values)."""
    import pyarrow as pa

    types = pa.types
    kind = replace(kind)

    def inner(field):
        return field.with_type(_replaced_within(field.type, replace))

    if types.is_struct(kind):
        return pa.struct([inner(f) for f in kind])
    if types.is_map(kind):
        return pa.map_(inner(kind.key_field), inner(kind.item_field), kind.keys_sorted)
    if types.is_large_list(kind):
        return pa.large_list(inner(kind.value_field))
    if types.is_fixed_size_list(kind):
        return pa.list_(inner(kind.value_field), kind.list_size)
    if types.is_list(kind):
        return pa.list_(inner(kind.value_field))
    if getattr(types, "is_list_view", lambda _: False)(kind):
        return pa.list_view(inner(kind.value_field))
    if getattr(types, "is_large_list_view", lambda _: False)(kind):
        return pa.large_list_view(inner(kind.value_field))
    if types.is_union(kind):
        return pa.union([inner(f) for f in kind], kind.mode, kind.type_codes)
    if getattr(types, "is_run_end_encoded", lambda _: False)(kind):
        return pa.run_end_encoded(kind.run_end_type, _replaced_within(kind.value_type, replace))
    return kind


def _types_within(kind):
    """``kind`` and every type nested in it, an extension type's storage included (which
    ``_replaced_within`` cannot rebuild, and so does not enter)."""
    import pyarrow as pa

    yield kind
    if isinstance(kind, pa.BaseExtensionType):
        yield from _types_within(kind.storage_type)
    elif pa.types.is_dictionary(kind):
        yield from _types_within(kind.value_type)
    elif getattr(pa.types, "is_run_end_encoded", lambda _: False)(kind):
        yield from _types_within(kind.value_type)
    elif pa.types.is_map(kind):
        yield from _types_within(kind.key_type)
        yield from _types_within(kind.item_type)
    else:
        for i in range(getattr(kind, "num_fields", 0)):  # struct, list kinds, union
            yield from _types_within(kind.field(i).type)


def extension_stored_as(kind, forms) -> bool:
    """Whether an extension type within ``kind`` has a storage type that one of ``forms``
    (``without_dictionaries`` and its kin) would change: a form those functions cannot
    rewrite, since they do not enter an extension type."""
    import pyarrow as pa

    return any(
        isinstance(t, pa.BaseExtensionType)
        and any(plain(t.storage_type) != t.storage_type for plain in forms)
        for t in _types_within(kind)
    )


def nested_dictionary(kind) -> bool:
    """Whether a dictionary type lies within ``kind`` (in a struct, list, map or union), not
    at its top level."""
    import pyarrow as pa

    return any(pa.types.is_dictionary(t) for t in list(_types_within(kind))[1:])


def dictionary_in_extension(kind) -> bool:
    """Whether an extension type within ``kind`` is stored as a dictionary (or holds one):
    its dictionary cannot be encoded afresh, and pyarrow aborts the process (a failed C++
    check, no exception) reading such a column of a Parquet file."""
    return extension_stored_as(kind, (without_dictionaries,))


def _ordered_afresh(column, values):
    """An ordered dictionary column re-encoded from ``values`` (its plain values), keeping the
    order of its own dictionary (the input's categories, the same in every chunk) and only the
    entries these rows hold."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = column.type
    # Input row groups may carry different dictionaries: the first one's order, then the
    # values only later ones hold, so that no value is left without an entry.
    dictionaries = [chunk.dictionary for chunk in column.chunks]
    order = pa.concat_arrays(dictionaries) if dictionaries else pa.array([], kind.value_type)
    order = order.unique()
    kept = order.filter(pc.is_in(order, value_set=values.unique()))
    indices = pc.index_in(values, value_set=kept).cast(kind.index_type)
    if indices.null_count != values.null_count:  # never release a value as null
        raise pa.ArrowInvalid("a value has no dictionary entry")
    return pa.DictionaryArray.from_arrays(indices, kept, ordered=True)
