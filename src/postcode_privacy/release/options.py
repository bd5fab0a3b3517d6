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
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from .._file_names import argument_text
from ..errors import SURFACE, InvalidParameterError
from ..mechanism.epsilon import MAX_EPSILON, MIN_EPSILON, Epsilon, parse_epsilon
from .column_labels import kind_of_label, loosely

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

    # Given as an int, a float, a Decimal or text; held as the exact Epsilon (__post_init__).
    epsilon: Epsilon | Decimal | float | str = field(
        metadata=_cli(
            "--epsilon",
            f"Privacy parameter per hop: a plain decimal from {MIN_EPSILON} to {MAX_EPSILON} "
            "(e.g. 1 or 0.5), used exactly as written.",
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
            if not isinstance(value, str) and value is not None:
                raise InvalidParameterError(
                    f"{self.flag(name)} must be a column name as text, not "
                    f"{kind_of_label(value)} (a frame whose columns are labelled otherwise, "
                    "as pandas.read_csv(header=None) makes them, needs text labels first: "
                    "df.columns = df.columns.map(str))"
                )
            if not value:  # (None, or "")
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
        if loosely(self.out_column) in (loosely(self.id_column), loosely(self.postcode_column)):
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
        """Refuse an input whose columns cannot be released under these options
        (``column_labels.check_columns``: docs/release.md, "Limits and unusual files")."""
        from .column_labels import check_columns

        check_columns(self, columns, header_line=header_line)

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

    def as_dict(self) -> dict[str, Any]:
        """Plain values, epsilon as its canonical text (the manifest describes a release from
        its plan instead: ``manifest.describe``)."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        values["epsilon"] = parse_epsilon(self.epsilon).text  # (an Epsilon already: exact)
        return values


_FIELDS: Mapping[str, dataclasses.Field] = {f.name: f for f in dataclasses.fields(ReleaseOptions)}


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
