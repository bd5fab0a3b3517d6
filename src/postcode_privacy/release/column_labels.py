"""An input's columns: which the options name, which look alike, and how messages name them.

Messages name a column by its place, never by a name that may be a value: a CSV file without a
header line has its first record taken for the header, so its "column names" can be
identifiers or postcodes.  Names are matched exactly; a column named like the postcode or the
output column but for case, spacing, invisible characters or Unicode form is refused
(docs/release.md, "Limits and unusual files").
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from .._wording import counted
from ..errors import InputDataError

if TYPE_CHECKING:
    from .options import ReleaseOptions

__all__ = [
    "check_columns",
    "column_label",
    "duplicate_columns_message",
    "kind_of_label",
    "looks_like",
    "loosely",
]


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


def check_columns(options: ReleaseOptions, columns: Iterable, *, header_line: bool = False) -> None:
    """Refuse an input whose columns cannot be released: duplicate names (also two names
    that differ only in invisible characters or Unicode form, which look the same), no
    identifier or postcode column, another column named like the postcode column but for
    case, surrounding spaces, invisible characters or Unicode form (it may hold true
    postcodes, and would be released as it is), or a column named like the output
    (docs/release.md, "Limits and unusual files").  Messages name columns by their position
    only: a CSV file without a header line has its first record taken for the header,
    so a header name may be a cell value.  Only a CSV file's (``header_line``) asks
    whether it has a header line."""
    names = list(columns)
    seen = set(names)
    if len(seen) != len(names):
        raise InputDataError(duplicate_columns_message(names, header_line=header_line))
    missing = [c for c in (options.id_column, options.postcode_column) if c not in seen]
    if missing:
        # The header's own cells are not echoed: without a header line they are a record.
        near = _near_misses(names, missing)
        # A label that is not text but reads as a missing name (the integer 0 for "0").
        other = next(
            (
                p
                for p, n in enumerate(names, start=1)
                if not isinstance(n, str) and str(n) in missing
            ),
            None,
        )
        if not near and other is not None:  # (a pandas frame's labels: never a cell)
            near = (
                f"column {other} is labelled by {kind_of_label(names[other - 1])}, not "
                "text: the options name columns by text, so give the frame text labels "
                "first (df.columns = df.columns.map(str))"
            )
        raise InputDataError(
            "the input has no column "
            + " or ".join(repr(c) for c in missing)
            + (
                f"; {near}"
                if near
                else f" (it has {counted(len(names), 'column')}"
                + (_header_hint(names) if header_line else ")")
            )
        )
    if not options.keep_source_postcode:
        _refuse_postcode_twins(options, names)
    _refuse_names_alike(
        names,
        looks_like,
        "have names that differ only in invisible characters or Unicode form",
    )
    output_like = looks_like(options.out_column)
    for position, name in enumerate(names, start=1):
        if looks_like(name) == output_like:
            # Even a look-alike: the output would hold two columns a reader cannot tell apart.
            raise InputDataError(
                f"the input already has a column named like {options.flag('out_column')} "
                f"{options.out_column!r} (column {position}); choose another "
                f"{options.flag('out_column')}"
            )


def _refuse_postcode_twins(options: ReleaseOptions, names: list) -> None:
    wanted = loosely(options.postcode_column)
    for position, name in enumerate(names, start=1):
        if name != options.postcode_column and loosely(name) == wanted:
            # Its name is not echoed: in a CSV file without a header line it is a cell.
            raise InputDataError(
                f"column {position} is named like {options.flag('postcode_column')} "
                f"{options.postcode_column!r} but for case, surrounding spaces, invisible "
                "characters or Unicode form: it may hold true postcodes too, and every "
                "column but the true postcode is released as it is; rename or remove it"
            )


def looks_like(name: Any) -> Any:
    """``name`` as it looks on screen: without invisible characters (:func:`_visible`) and in
    Unicode's compatibility composed form (NFKC: "é" whether one character or "e" and an
    accent, "Ｐ" as "P", a no-break space as a space).  A name that is not text is itself."""
    if not isinstance(name, str):
        return name
    # Invisible characters go first (one between a letter and its accent keeps them apart),
    # and again after NFKC, which may map a character to one.
    return _visible(unicodedata.normalize("NFKC", _visible(name)))


# Unicode's default-ignorable code points (DerivedCoreProperties.txt) that are not in category
# Cf or Cc: fillers and variation selectors, which show nothing either.
_IGNORABLE = (
    (0x034F, 0x034F),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x2060, 0x206F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0xE0000, 0xE0FFF),
)


def _visible(text: str) -> str:
    """``text`` without the characters that show nothing: format (Cf: a zero-width space,
    joiner or byte-order mark, a direction mark) and control (Cc) characters, and the other
    default-ignorable code points."""
    return "".join(c for c in text if not _invisible(c))


def _invisible(char: str) -> bool:
    if unicodedata.category(char) in ("Cf", "Cc"):
        return True
    code = ord(char)
    return any(low <= code <= high for low, high in _IGNORABLE)


def loosely(name: Any) -> Any:
    """``name`` as a person would read it: as it looks (:func:`looks_like`), in any case,
    without surrounding spaces."""
    if not isinstance(name, str):
        return name
    # Case folding may undo NFKC (and NFKC may bring back a format character), so both again.
    folded = unicodedata.normalize("NFKC", looks_like(name).casefold())
    return _visible(folded).strip()


def _refuse_names_alike(names: list, form: Callable[[Any], Any], what: str) -> None:
    first: dict = {}
    for position, name in enumerate(names, start=1):
        other = first.setdefault(form(name), position)
        if other != position:
            raise InputDataError(f"columns {other} and {position} {what}; rename one")


def _header_hint(names: list) -> str:
    """The end of a CSV file's missing-column message: a one-column header holding another
    separator (a file saved with semicolons, as Excel does in many locales, or tabs) says so,
    naming the separator, never the header's text; otherwise it asks whether there is a
    header line at all."""
    if len(names) == 1 and isinstance(names[0], str):
        for mark, called in ((";", "semicolons"), ("\t", "tabs"), ("|", "vertical bars")):
            if mark in names[0]:
                return (
                    f"; its header holds {called}: the input must be comma-separated, so "
                    "save it as CSV with commas)"
                )
    return "; does the file start with a header line?)"


def _near_misses(names: list, missing: list) -> str:
    """For a column not found: the columns whose names match it but for case, surrounding
    spaces, invisible characters or Unicode form, by position only (the header is not
    echoed)."""
    if any("\x00" in str(name) for name in names):
        # Read as UTF-8, UTF-16 without a byte order mark puts a NUL beside every ASCII letter.
        return (
            "the header's names hold NUL characters, as text saved as UTF-16 without a byte "
            "order mark does; save the file as UTF-8"
        )
    wanted = {loosely(c) for c in missing}
    close = [str(i) for i, name in enumerate(names, start=1) if loosely(name) in wanted]
    if not close:
        return ""
    which = f"columns {' and '.join(close)} have" if len(close) > 1 else f"column {close[0]} has"
    return (
        f"{which} that name but for case, surrounding spaces, "
        "invisible characters or Unicode form; give the name exactly as the header has it"
    )


def kind_of_label(value: object) -> str:
    """``an int``, ``a tuple``: what a column label that is not text is, without its value."""
    name = type(value).__name__
    return f"{'an' if name[:1] in 'aeiou' else 'a'} {name}"
