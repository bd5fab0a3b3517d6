"""Reading a release's manifest for ``report --manifest``: only its publishable fields.

The manifest beside a release (``OUTPUT.manifest.json``, format ``postcode-privacy-manifest``)
may, in format version 1, also carry facts about the true input (input hash, record counts).
The report reads only the fields that format version 2 keeps publishable (epsilon, radius,
graph, key fingerprint, output file and rows, versions, created time, and the on_error and
terminated policies), so nothing about the true input can reach a report, whichever version
it is given.  An unknown format or version is refused rather than guessed at.

The file is read as strict JSON, at most ``MAX_MANIFEST_BYTES`` of it, and only if it is a
regular file (``_input_files``); every text field is shown with its control and direction
characters made visible (``visible_text``), so that a manifest cannot make the page, its JSON
or a terminal show something other than what it holds.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

from .._input_files import MIB, parse_json, read_small_file, visible_text
from ..errors import InvalidParameterError
from ..mechanism.epsilon import parse_epsilon
from ..mechanism.powers import (
    MAX_EPSILON_TIMES_RADIUS,
    MAX_RADIUS,
    epsilon_times_radius_too_large,
)
from ..release.manifest import MANIFEST_FORMAT as FORMAT
from ..release.manifest import MANIFEST_VERSION
from ..release.options import ON_ERROR_POLICIES, TERMINATED_POLICIES
from ..version import OUTPUT_STABILITY_VERSION

# Every manifest version written so far is read (what each may hold: the docstring above).
KNOWN_VERSIONS = tuple(range(1, MANIFEST_VERSION + 1))
# A manifest is a few kilobytes; anything past this is not one (and is not read further).
MAX_MANIFEST_BYTES = 4 * MIB

_FINGERPRINT = re.compile(r"[0-9a-f]{16}")  # ``Key.fingerprint``


@dataclass(frozen=True)
class ReleaseFacts:
    """The publishable description of one release, as the report shows it."""

    epsilon: str
    radius: int
    graph_sha256: str
    key_fingerprint: str
    output_name: str
    output_rows: int
    output_sha256: str
    created: str
    library_version: str
    output_stability_version: str
    format_version: int
    # what became of records that could not be released, and of terminated postcodes (None:
    # a manifest that does not say)
    on_error: str | None = None
    terminated: str | None = None
    # The teleport bound the manifest states, which the report works out for itself from the
    # graph, epsilon and radius (``check_against``): never shown, only compared.
    teleport_bound: str = ""

    def to_json(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "teleport_bound"}

    def check_against(self, teleport_bound: Fraction) -> None:
        """Refuse a manifest whose teleport bound is not the one its own epsilon and radius
        give on the graph: a hand edit of its epsilon (say 1 to 0.5) would otherwise put a
        stronger guarantee on the page than the release has (a hostile review).  Compared
        exactly, as the fraction a release writes; every manifest version states it, and the
        bound's formula has not changed since the first.  (The graph's node count and prior
        are not compared: the graph's sha256 fixes both, and the name a constant prior was
        given has changed, so older genuine manifests would be refused.)"""
        own = f"{teleport_bound.numerator}/{teleport_bound.denominator}"
        if self.teleport_bound != own:
            raise InvalidParameterError(
                "the manifest contradicts itself: its teleport_bound is not the one its "
                "epsilon and radius give on this graph (an edited or damaged manifest)"
            )


def _field(data: dict, *path: str, kind: type):
    value: object = data
    for name in path:
        if not isinstance(value, dict) or name not in value:
            raise InvalidParameterError(f"the manifest has no field {'.'.join(path)}")
        value = value[name]
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise InvalidParameterError(f"the manifest field {'.'.join(path)} is not a whole number")
    if kind is bool and not isinstance(value, bool):
        raise InvalidParameterError(f"the manifest field {'.'.join(path)} is not true or false")
    if kind is str:
        if not isinstance(value, str):
            raise InvalidParameterError(f"the manifest field {'.'.join(path)} is not text")
        return visible_text(value)
    return value


def _sha256_field(data: dict, *path: str) -> str:
    """A SHA-256 as a release writes it: 64 lowercase hexadecimal digits."""
    value = _field(data, *path, kind=str)
    if not re.fullmatch(r"[0-9a-f]{64}", value):
        raise InvalidParameterError(
            f"the manifest field {'.'.join(path)} is not a SHA-256 (64 hexadecimal digits)"
        )
    return value


def _moment_field(data: dict, *path: str) -> str:
    """A time as a release writes it: ISO 8601 with its offset from UTC
    (``2026-01-02T03:04:05+00:00``); a date alone, or a time in no stated zone, is not one."""
    value = _field(data, *path, kind=str)
    try:
        moment = _dt.datetime.fromisoformat(value)
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None or not re.search(r"[T ]\d", value):
        raise InvalidParameterError(
            f"the manifest field {'.'.join(path)} is not a date and time with its offset from "
            "UTC (ISO 8601)"
        )
    return value


# A version as the library states its own (PEP 440: "0.2.0", "1.0rc1", "0.2.0.dev3+g1a2b"),
# so that the page's "postcode-privacy …" shows a version, never a sentence an edit put there.
_VERSION = re.compile(
    r"[0-9]{1,9}(\.[0-9]{1,9}){0,5}((a|b|rc)[0-9]{1,9})?(\.post[0-9]{1,9})?(\.dev[0-9]{1,9})?"
    r"(\+[a-z0-9]{1,32}(\.[a-z0-9]{1,32}){0,5})?"
)
# A teleport bound as a release writes it: a fraction in lowest terms, "numerator/denominator".
_FRACTION = re.compile(r"[0-9]+/[1-9][0-9]*")


def _version_field(data: dict, *path: str) -> str:
    value = _field(data, *path, kind=str)
    if not _VERSION.fullmatch(value):
        raise InvalidParameterError(f"the manifest field {'.'.join(path)} is not a version number")
    return value


def _output_name(data: dict) -> str:
    """The released file's name (the last part of output.path), which the page's heading names."""
    shown = _field(data, "output", "path", kind=str)
    written = os.path.basename(data["output"]["path"])  # (before hidden characters are shown)
    if not written.strip() or written in (".", ".."):
        raise InvalidParameterError("the manifest field output.path does not name a file")
    return os.path.basename(shown)


def _refuse_kept_source_postcodes(data: dict) -> None:
    """An output written with ``--keep-source-postcode`` holds the true postcodes: it is not a
    release, and a report (which describes a release to publish) must not present it as one
    (docs/choosing-epsilon.md, "`report`: one page for the data protection officer").  Every
    manifest format version has the field, so one without it is refused, not taken as false."""
    if _field(data, "columns", "source_postcode_kept", kind=bool):
        raise InvalidParameterError(
            "the manifest describes an output that keeps the true postcodes "
            "(--keep-source-postcode): it is not a release, and a report would present it as "
            "one; report on a release made without that option, or without --manifest"
        )


def read_manifest(path: str | os.PathLike) -> ReleaseFacts:
    """The publishable facts of the manifest at ``path``; raises InvalidParameterError (naming
    the field, never echoing a value) for anything that is not a known manifest."""
    raw = read_small_file(
        path, what="the manifest", limit=MAX_MANIFEST_BYTES, error=InvalidParameterError
    )
    data = parse_json(raw, what="the manifest", error=InvalidParameterError)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InvalidParameterError(f"this is not a release manifest (format {FORMAT!r} expected)")
    version = data.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        # (not a version any postcode-privacy writes: an edited or damaged manifest)
        raise InvalidParameterError("the manifest's format_version is not a version number")
    if version not in KNOWN_VERSIONS:  # (a newer release's manifest)
        raise InvalidParameterError(
            "unknown manifest format version (this postcode-privacy reads versions "
            f"{', '.join(str(v) for v in KNOWN_VERSIONS)}); upgrade postcode-privacy"
        )
    epsilon, radius = _field(data, "epsilon", kind=str), _field(data, "radius", kind=int)
    # Checked here, so that a bad value is blamed on the manifest, not on --epsilon or --radius.
    try:
        epsilon = parse_epsilon(epsilon).text  # shown as the release wrote it: " 1.20" is 1.2
    except InvalidParameterError:
        raise InvalidParameterError("the manifest's epsilon is not a valid epsilon") from None
    if not 1 <= radius <= MAX_RADIUS:
        raise InvalidParameterError(f"the manifest's radius is not from 1 to {MAX_RADIUS}")
    if epsilon_times_radius_too_large(Decimal(epsilon), radius):
        raise InvalidParameterError(
            f"the manifest's epsilon times its radius is above {MAX_EPSILON_TIMES_RADIUS}"
        )
    stability = _field(data, "output_stability_version", kind=str)
    if stability != OUTPUT_STABILITY_VERSION:
        raise InvalidParameterError(
            "the release was drawn under another output-stability version than this "
            f"postcode-privacy's ({OUTPUT_STABILITY_VERSION}): this report would not describe it"
        )
    _refuse_kept_source_postcodes(data)
    if not 0 <= _field(data, "output", "rows", kind=int) < 2**63:
        raise InvalidParameterError("the manifest field output.rows is not a count of rows")
    # The page shows it as the key's fingerprint: only what a release writes (16 hex digits),
    # never a sentence a hand edit put there.
    if not _FINGERPRINT.fullmatch(_field(data, "key_fingerprint", kind=str)):
        raise InvalidParameterError(
            "the manifest field key_fingerprint is not a key fingerprint (16 hex digits)"
        )
    policies = {name: _policy(data, name, choices) for name, choices in _POLICIES.items()}
    return ReleaseFacts(
        epsilon=epsilon,
        radius=radius,
        graph_sha256=_sha256_field(data, "graph", "sha256"),
        key_fingerprint=_field(data, "key_fingerprint", kind=str),
        output_name=_output_name(data),
        output_rows=_field(data, "output", "rows", kind=int),
        output_sha256=_sha256_field(data, "output", "sha256"),
        created=_moment_field(data, "created"),
        library_version=_version_field(data, "library_version"),
        output_stability_version=OUTPUT_STABILITY_VERSION,
        format_version=int(version),
        **policies,
        teleport_bound=_teleport_bound_field(data),
    )


def _teleport_bound_field(data: dict) -> str:
    value = _field(data, "teleport_bound", "exact", kind=str)
    if not _FRACTION.fullmatch(value):
        raise InvalidParameterError(
            "the manifest field teleport_bound.exact is not a fraction (numerator/denominator)"
        )
    return value


_POLICIES = {"on_error": ON_ERROR_POLICIES, "terminated": TERMINATED_POLICIES}


def _policy(data: dict, name: str, choices: tuple[str, ...]) -> str | None:
    """The release's ``name`` policy, or None where the manifest has no such field; one of
    ``choices`` or refused (a hand edit could put any sentence there)."""
    if name not in data:
        return None
    value = data[name]
    if value not in choices:
        raise InvalidParameterError(
            f"the manifest field {name} is not one of {', '.join(map(repr, choices))}"
        )
    return value
