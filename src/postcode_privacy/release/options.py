"""The release options, declared once for every entry point (docs/release.md).

:class:`ReleaseOptions` is the single definition of what a caller may choose about a release:
``perturb_frame``, ``release_file``, the Spark path and the ``perturb`` command all build one and
hand it down, and the command's flags are generated from the same declaration by
:func:`click_options`.  Adding an option is one new field here.

Validation happens once, when the object is built; everything below may rely on it.
"""

from __future__ import annotations

import dataclasses
import numbers
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._file_names import argument_text
from .._wording import counted
from ..errors import SURFACE, InputDataError, InvalidParameterError
from ..mechanism.epsilon import Epsilon, parse_epsilon

__all__ = [
    "DEFAULT_OUT_COLUMN",
    "ON_ERROR_POLICIES",
    "TERMINATED_POLICIES",
    "ReleaseOptions",
    "DEFAULT_CHUNK_SIZE",
    "click_options",
    "pop_release_options",
    "release_option",
]

DEFAULT_OUT_COLUMN = "postcode_dp"
# Records read, checked and written at a time by a file release (memory, not the output).
DEFAULT_CHUNK_SIZE = 100_000
ON_ERROR_POLICIES = ("error", "null", "drop")
TERMINATED_POLICIES = ("error", "nearest")


def _cli(flag: str, help: str, *, names_data: bool = False, **click_kwargs: Any) -> dict[str, Any]:
    """Field metadata: how the option appears on the command line.  ``names_data``: its value
    names something in the data (a column), read from the command line as a file name is
    (``_file_names.argument_text``)."""
    return {"flag": flag, "help": help, "names_data": names_data, "click": click_kwargs}


@dataclass(frozen=True)
class ReleaseOptions:
    """Everything a caller chooses about a release, except the key, the graph and the files.

    Build it with keyword arguments (``ReleaseOptions(epsilon=1, id_column="person_id",
    postcode_column="postcode")``); a bad value raises :class:`InvalidParameterError` at once,
    before any data or graph is loaded.  ``epsilon`` is held as the exact
    :class:`~postcode_privacy.mechanism.epsilon.Epsilon` it denotes.
    """

    epsilon: Epsilon = field(
        metadata=_cli(
            "--epsilon",
            "Privacy parameter per hop, an exact decimal greater than 0 (e.g. 1 or 0.5).",
            required=True,
            metavar="E",
        )
    )
    id_column: str = field(
        metadata=_cli(
            "--id-column",
            "Column of subject identifiers.",
            names_data=True,
            required=True,
            metavar="C",
        )
    )
    postcode_column: str = field(
        metadata=_cli(
            "--postcode-column",
            "Column of true postcodes.",
            names_data=True,
            required=True,
            metavar="P",
        )
    )
    radius: int | None = field(
        default=None,
        metadata=_cli(
            "--radius",
            "Hop cap.  Default: the smallest radius whose teleport bound is at most 1e-6.",
            type=int,
            metavar="R",
        ),
    )
    on_error: str = field(
        default="error",
        metadata=_cli(
            "--on-error",
            "Records that cannot be released: fail listing them (nothing written), "
            "leave the released cell empty, or drop the row.",
            choices=ON_ERROR_POLICIES,
        ),
    )
    out_column: str = field(
        default=DEFAULT_OUT_COLUMN,
        metadata=_cli(
            "--out-column", "Name of the released postcode column.", names_data=True, metavar="NAME"
        ),
    )
    keep_source_postcode: bool = field(
        default=False,
        metadata=_cli(
            "--keep-source-postcode",
            "Keep the true postcode column in the output (it is dropped by default).  The "
            "output is then not a release: it holds the true postcodes and must not be "
            "published, nor recorded in a ledger.",
            is_flag=True,
        ),
    )
    terminated: str = field(
        default="error",
        metadata=_cli(
            "--terminated",
            "Postcodes not in the graph: an error, or (nearest) map a terminated "
            "postcode with known coordinates to the nearest live postcode first.",
            choices=TERMINATED_POLICIES,
        ),
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", parse_epsilon(self.epsilon))
        for name in ("id_column", "postcode_column", "out_column"):
            value = getattr(self, name)
            if not isinstance(value, str):
                raise InvalidParameterError(
                    f"{self.flag(name)} must be a column name as text, not "
                    f"{_kind_of_label(value)} (a frame whose columns are labelled otherwise, "
                    "as pandas.read_csv(header=None) makes them, needs text labels first: "
                    "df.columns = df.columns.map(str))"
                )
            if not value:
                raise InvalidParameterError(f"{self.flag(name)} must be a non-empty column name")
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:  # (its message would quote the character)
                raise InvalidParameterError(
                    f"{self.flag(name)} is not valid Unicode text (a lone surrogate: on the "
                    "command line, bytes that are not UTF-8); no file can hold it as a name"
                ) from None
        if self.id_column == self.postcode_column:
            raise InvalidParameterError(
                f"{self.flag('id_column')} and {self.flag('postcode_column')} must differ"
            )
        # Also a name that differs only in case, spaces, invisible characters or Unicode form
        # ("Postcode" for "postcode"): the input's twins of the postcode column are refused
        # for the same reason (check_columns).
        if _loosely(self.out_column) in (_loosely(self.id_column), _loosely(self.postcode_column)):
            raise InvalidParameterError(
                f"{self.flag('out_column')} must be the output column's own name, different from "
                "the identifier and true postcode columns (not only in case, spaces, invisible "
                "characters or Unicode form), so the released postcode cannot be mistaken for "
                "the truth"
            )
        if self.radius is not None:
            if isinstance(self.radius, bool) or not isinstance(self.radius, numbers.Integral):
                raise InvalidParameterError(f"{self.flag('radius')} must be a whole number of hops")
            object.__setattr__(self, "radius", int(self.radius))  # numpy integers too
        self._check_choice("on_error", ON_ERROR_POLICIES)
        self._check_choice("terminated", TERMINATED_POLICIES)
        if not isinstance(self.keep_source_postcode, bool):
            raise InvalidParameterError(
                f"{self.flag('keep_source_postcode')} must be True or False"
            )

    def _check_choice(self, name: str, allowed: tuple[str, ...]) -> None:
        if getattr(self, name) not in allowed:
            raise InvalidParameterError(f"{self.flag(name)} must be one of: " + ", ".join(allowed))

    @staticmethod
    def flag(name: str) -> str:
        """How an option is named in messages: its flag (``--on-error``) on the command line,
        its keyword (``on_error``) from Python (``errors.SURFACE``)."""
        return _FIELDS[name].metadata["flag"] if SURFACE.get() == "cli" else name

    def check_columns(self, columns: Iterable, *, header_line: bool = False) -> None:
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
            from .column_labels import duplicate_columns_message

            raise InputDataError(duplicate_columns_message(names, header_line=header_line))
        missing = [c for c in (self.id_column, self.postcode_column) if c not in seen]
        if missing:
            # The header's own cells are not echoed: without a header line they are a record.
            near = _near_misses(names, missing)
            other = next((p for p, n in enumerate(names, start=1) if not isinstance(n, str)), None)
            if not near and other is not None:  # (a pandas frame's labels: never a cell)
                near = (
                    f"column {other} is labelled by {_kind_of_label(names[other - 1])}, not "
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
        if not self.keep_source_postcode:
            self._refuse_postcode_twins(names)
        _refuse_names_alike(
            names,
            _looks_like,
            "have names that differ only in invisible characters or Unicode form",
        )
        output_like = _looks_like(self.out_column)
        for position, name in enumerate(names, start=1):
            if _looks_like(name) == output_like:
                # Even a look-alike: the output would hold two columns a reader cannot tell apart.
                raise InputDataError(
                    f"the input already has a column named like {self.flag('out_column')} "
                    f"{self.out_column!r} (column {position}); choose another "
                    f"{self.flag('out_column')}"
                )

    def _refuse_postcode_twins(self, names: list) -> None:
        wanted = _loosely(self.postcode_column)
        for position, name in enumerate(names, start=1):
            if name != self.postcode_column and _loosely(name) == wanted:
                # Its name is not echoed: in a CSV file without a header line it is a cell.
                raise InputDataError(
                    f"column {position} is named like {self.flag('postcode_column')} "
                    f"{self.postcode_column!r} but for case, surrounding spaces, invisible "
                    "characters or Unicode form: it may hold true postcodes too, and every "
                    "column but the true postcode is released as it is; rename or remove it"
                )

    def ledger_refusal(self) -> str | None:
        """Why a release with these options cannot be recorded in a ledger, or None if it can.

        A file holding the true postcodes spends no finite epsilon: it is not a release, and a
        ledger that counted it as one would understate what was disclosed (docs/ledger.md).
        Both ``release_file`` and the ``perturb`` command (before its ledger opens, so that
        ``--dry-run`` is refused too) refuse with this message."""
        if self.keep_source_postcode:
            return (
                f"{self.flag('keep_source_postcode')} keeps the true postcodes, so the output "
                "is not a release and cannot be recorded in a ledger"
            )
        return None

    def output_columns(self, columns: Iterable) -> list:
        """The output's columns, in order, for an input with ``columns``."""
        kept = [c for c in columns if self.keep_source_postcode or c != self.postcode_column]
        return kept + [self.out_column]

    @classmethod
    def build(cls, options: ReleaseOptions | None = None, **kwargs: Any) -> ReleaseOptions:
        """``options`` as given, or a new object from keyword arguments (not both)."""
        if options is None:
            unknown = sorted(set(kwargs) - set(_FIELDS))
            if unknown:
                raise TypeError("unknown release option(s): " + ", ".join(unknown))
            return cls(**kwargs)
        if not isinstance(options, ReleaseOptions):
            raise TypeError("options must be a ReleaseOptions")
        if kwargs:
            raise TypeError("give either options= or keyword options, not both")
        return options

    def replace(self, **changes: Any) -> ReleaseOptions:
        """A copy with some options changed, validated again."""
        return dataclasses.replace(self, **changes)


_FIELDS: Mapping[str, dataclasses.Field] = {f.name: f for f in dataclasses.fields(ReleaseOptions)}


def _looks_like(name: Any) -> Any:
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


def _loosely(name: Any) -> Any:
    """``name`` as a person would read it: as it looks (:func:`_looks_like`), in any case,
    without surrounding spaces."""
    if not isinstance(name, str):
        return name
    # Case folding may undo NFKC (and NFKC may bring back a format character), so both again.
    folded = unicodedata.normalize("NFKC", _looks_like(name).casefold())
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
    wanted = {_loosely(c) for c in missing}
    close = [str(i) for i, name in enumerate(names, start=1) if _loosely(name) in wanted]
    if not close:
        return ""
    which = f"columns {' and '.join(close)} have" if len(close) > 1 else f"column {close[0]} has"
    return (
        f"{which} that name but for case, surrounding spaces, "
        "invisible characters or Unicode form; give the name exactly as the header has it"
    )


def _argument_text(context: Any, parameter: Any, value: str | None) -> str | None:
    return None if value is None else argument_text(value)


def click_options(
    command: Callable | None = None, *, only: tuple[str, ...] | None = None
) -> Callable:
    """Decorate a click command with one flag per release option, in declaration order.

    Use as ``@click_options``, or ``@click_options(only=("epsilon", ...))`` for a command that
    takes some of the options.  The command receives the values as keyword arguments named like
    the fields; :func:`pop_release_options` turns them into a :class:`ReleaseOptions`.
    """
    names = tuple(_FIELDS) if only is None else only
    unknown = sorted(set(names) - set(_FIELDS))
    if unknown:
        raise TypeError("unknown release option(s): " + ", ".join(unknown))

    def decorate(command: Callable) -> Callable:
        for name in reversed([name for name in _FIELDS if name in names]):
            command = release_option(name)(command)
        return command

    return decorate if command is None else decorate(command)


def _kind_of_label(value: object) -> str:
    """``an int``, ``a tuple``: what a column label that is not text is, without its value."""
    name = type(value).__name__
    return f"{'an' if name[:1] in 'aeiou' else 'a'} {name}"


def release_option(name: str, *, note: str | None = None, **changes: Any) -> Callable:
    """The click option of the release option ``name``, as declared above, with ``changes`` to
    its click settings for a command that uses it otherwise (``report`` can take epsilon from
    a manifest: ``required=False``); ``note`` is added to its help."""
    import click

    f = _FIELDS[name]
    meta = f.metadata
    kwargs = dict(meta["click"])
    choices = kwargs.pop("choices", None)
    if choices is not None:
        kwargs["type"] = click.Choice(list(choices))
        kwargs["show_default"] = True
    if not kwargs.get("required") and not kwargs.get("is_flag") and f.default is not None:
        kwargs.setdefault("show_default", True)
    if not kwargs.get("required"):
        kwargs["default"] = f.default
    if kwargs.get("type") is int:
        from .._click_types import WholeNumbers

        kwargs["type"] = WholeNumbers()
    if meta["names_data"]:
        kwargs["callback"] = _argument_text
    kwargs.update(changes)
    help = meta["help"] if note is None else f"{meta['help']}  {note}"
    return click.option(meta["flag"], f.name, help=help, **kwargs)


def pop_release_options(kwargs: dict[str, Any]) -> ReleaseOptions:
    """Take the release options out of a click command's keyword arguments and build them
    (options the command does not offer keep their defaults)."""
    return ReleaseOptions(**{name: kwargs.pop(name) for name in _FIELDS if name in kwargs})
