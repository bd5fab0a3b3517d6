"""How messages name an input's columns: by place, never by a name that may be a value.

A CSV file without a header line has its first record taken for the header, so its "column
names" can be identifiers or postcodes.
"""

from __future__ import annotations

__all__ = ["column_label", "duplicate_columns_message"]


def column_label(name, columns) -> str:
    """How a message names the column ``name``: by its 1-based place among the input's
    ``columns`` (the column the user sees in the file, wherever the output puts it) only.
    Its header name is not echoed: a CSV file without a header line has its first record
    taken for the header, so a name may be a cell value.  A name the input lacks (the
    released column, named by the caller's own option) is named alone."""
    position = next((i for i, c in enumerate(columns, start=1) if c == name), None)
    if position is None:
        return f"column {name!r}"
    return f"column {position}"


def duplicate_columns_message(columns: list, *, header_line: bool = True) -> str:
    """Name duplicated columns by position: a file without a header line would otherwise have
    its first record (identifiers, postcodes) echoed as "column names".  ``header_line``: the
    input is a CSV file, which may lack one."""
    first: dict = {}
    pairs = []
    for position, name in enumerate(columns, start=1):
        if name in first:
            pairs.append(f"{first[name]} and {position}")
        else:
            first[name] = position
    hint = "; does the file start with a header line?" if header_line else ""
    return "the input has duplicate column names (columns " + "; ".join(pairs) + ")" + hint
