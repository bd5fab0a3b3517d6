"""Arrow types as a message names them: in plain words, never in pyarrow's own text.

Why: pyarrow's text of a type is library jargon (``map<string, list<element: int64>>``), and it
can carry the input's own words: a struct lists its fields' names, a map read from Parquet
names its entries after the column, a timestamp carries its time zone's text.  Messages name
a column by its position and never quote the input (docs/release.md, "Limits and unusual
files"), so they describe a column's kind with :func:`type_words` instead.
"""

from __future__ import annotations

__all__ = ["type_words"]


def type_words(kind) -> str:
    """What a column of Arrow type ``kind`` holds, in a few plain words ("lists", "maps",
    "binary values", "dictionary-encoded text"...), naming nothing the input chose."""
    import pyarrow as pa

    types = pa.types
    if types.is_dictionary(kind):
        return f"dictionary-encoded {type_words(kind.value_type)}"
    if isinstance(kind, pa.BaseExtensionType):
        return "values of an extension type"
    if _holds(types, "is_run_end_encoded", kind):
        return f"run-end-encoded {type_words(kind.value_type)}"
    for test, words in _WORDS:
        if _holds(types, test, kind):
            return words
    return "values of an unusual type"


def _holds(types, test: str, kind) -> bool:
    """pyarrow.types' predicate ``test`` holds of ``kind`` (False where this pyarrow is too old
    to have it, and so to have such a type: views came in pyarrow 16)."""
    predicate = getattr(types, test, None)
    return predicate is not None and predicate(kind)


# Checked in order: the first test that holds names the type (pyarrow.types' own predicates).
_WORDS = [
    ("is_null", "nulls"),
    ("is_boolean", "true-or-false values"),
    ("is_integer", "whole numbers"),
    ("is_floating", "floating-point numbers"),
    ("is_decimal", "decimal numbers"),
    ("is_string", "text"),
    ("is_large_string", "text"),
    ("is_string_view", "text"),
    ("is_binary", "binary values"),
    ("is_large_binary", "binary values"),
    ("is_fixed_size_binary", "binary values"),
    ("is_binary_view", "binary values"),
    ("is_date", "dates"),
    ("is_timestamp", "timestamps"),
    ("is_time", "times of day"),
    ("is_duration", "durations"),
    ("is_interval", "intervals"),
    ("is_map", "maps"),  # before lists: a map is stored as a list of entries
    ("is_list", "lists"),
    ("is_large_list", "lists"),
    ("is_fixed_size_list", "lists"),
    ("is_list_view", "lists"),
    ("is_large_list_view", "lists"),
    ("is_struct", "structs"),
    ("is_union", "unions"),
]
