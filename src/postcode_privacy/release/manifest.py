"""What is written beside a release: a publishable manifest and a private audit file.

docs/release.md, "The manifest"; docs/threat-model.md, "What may be
published".

* ``OUTPUT.manifest.json`` (format ``postcode-privacy-manifest``, version 2) is publishable.
  It holds only the release's parameters and facts computable from the released file itself:
  nothing in it is computed from a true postcode or from a record that is not released.  (A
  digest of the true input would let anyone who knows a record's other cells test candidate
  postcodes one hash at a time; counts of failed or dropped records are exact statistics of
  the true data.)
* ``OUTPUT.audit.json`` (format ``postcode-privacy-audit``) is private, written owner-only
  (0600), and its first field says it must not be published.  It holds what the data custodian
  needs to audit the run: the input's name and sha256 and every count by outcome.

This module builds both documents; ``files.py`` writes them, atomically, with the release.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from pathlib import Path

__all__ = ["MANIFEST_FORMAT", "MANIFEST_VERSION", "AUDIT_FORMAT", "AUDIT_VERSION",
           "PUBLISHABLE_FIELDS", "AUDIT_WARNING", "manifest_path_for", "audit_path_for",
           "build_manifest", "build_audit", "encode", "read_audit"]

MANIFEST_FORMAT = "postcode-privacy-manifest"
MANIFEST_VERSION = 2
MANIFEST_SUFFIX = ".manifest.json"
AUDIT_FORMAT = "postcode-privacy-audit"
AUDIT_VERSION = 1
AUDIT_SUFFIX = ".audit.json"
AUDIT_WARNING = ("PRIVATE: do not publish. Exact statistics of the true input (its sha256 and "
                 "counts of failed, dropped, nulled and moved records); publishing them can "
                 "reveal true postcodes. Publish only the release and its manifest.")

# Every top-level field of a version-2 manifest, in order.  Each is a release parameter or a
# fact about the released file; none is computed from the true input.
PUBLISHABLE_FIELDS = (
    "format", "format_version", "library_version", "output_stability_version", "created",
    "output", "graph", "epsilon", "radius", "teleport_bound", "prior", "key_fingerprint",
    "on_error", "terminated", "terminated_locations", "columns", "audit_file",
)
# Fields of the plan's description that are parameters (see ReleasePlan.describe).
_DESCRIPTION_FIELDS = ("graph", "epsilon", "radius", "teleport_bound", "prior",
                       "key_fingerprint", "on_error", "terminated", "terminated_locations",
                       "columns")


def manifest_path_for(output_path: str | os.PathLike) -> Path:
    """``OUTPUT.manifest.json`` beside the output (publishable)."""
    path = Path(output_path)
    return path.with_name(path.name + MANIFEST_SUFFIX)


def audit_path_for(output_path: str | os.PathLike) -> Path:
    """``OUTPUT.audit.json`` beside the output (private)."""
    path = Path(output_path)
    return path.with_name(path.name + AUDIT_SUFFIX)


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def build_manifest(description: dict, *, output_path: Path, output_format: str,
                   output_sha256: str, rows: int, created: str | None = None) -> dict:
    """The publishable manifest of a release.

    ``description`` is :meth:`ReleasePlan.describe` (parameters only); ``output_sha256`` and
    ``rows`` describe the released file, which anyone holding it can recompute.
    Postcondition: the keys are exactly :data:`PUBLISHABLE_FIELDS`.
    """
    manifest = {
        "format": MANIFEST_FORMAT,
        "format_version": MANIFEST_VERSION,
        "library_version": description["library_version"],
        "output_stability_version": description["output_stability_version"],
        "created": created or _now(),
        "output": {"path": output_path.name, "format": output_format, "sha256": output_sha256,
                   "rows": int(rows)},
        **{name: description[name] for name in _DESCRIPTION_FIELDS},
        "audit_file": audit_path_for(output_path).name,
    }
    assert tuple(manifest) == PUBLISHABLE_FIELDS
    return manifest


def build_audit(manifest: dict, *, input_path: Path, input_format: str, input_sha256: str,
                counts: dict) -> dict:
    """The private audit record of a release: the true input's digest and every count.

    It names the manifest's output (path and sha256) so the two are seen to belong together.
    """
    return {
        "WARNING": AUDIT_WARNING,
        "format": AUDIT_FORMAT,
        "format_version": AUDIT_VERSION,
        "created": manifest["created"],
        "output": {"path": manifest["output"]["path"], "sha256": manifest["output"]["sha256"]},
        "manifest_file": manifest_path_for(manifest["output"]["path"]).name,
        "input": {"path": input_path.name, "format": input_format, "sha256": input_sha256,
                  "records": int(counts["records"])},
        "counts": {key: int(value) for key, value in counts.items()},
    }


def encode(document: dict) -> bytes:
    """The bytes written for a manifest or audit document (UTF-8 JSON, fields in order)."""
    return (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def read_audit(output_path: str | os.PathLike) -> dict:
    """The audit document written beside ``output_path``."""
    return json.loads(audit_path_for(output_path).read_text(encoding="utf-8"))
