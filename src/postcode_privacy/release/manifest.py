"""What is written beside a release: a publishable manifest and a private audit file.

docs/release.md, "The manifest"; docs/threat-model.md, "What may be
published".

* ``OUTPUT.manifest.json`` (format ``postcode-privacy-manifest``, version 3) is publishable.
  It holds only the release's parameters and facts computable from the released file itself:
  nothing in it is computed from a true postcode or from a record that is not released.  (A
  digest of the true input would let anyone who knows a record's other cells test candidate
  postcodes one hash at a time; counts of failed or dropped records are exact statistics of
  the true data.)
* ``OUTPUT.audit.json`` (format ``postcode-privacy-audit``) is private, written owner-only
  (0600), and its first field says it must not be published.  It holds what the data custodian
  needs to audit the run: the input's name and sha256 and every count by outcome.

This module describes a release (:func:`describe`) and builds both documents; ``files.py`` writes them, atomically, with the release.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .._exact_numbers import float_above
from .._file_names import readable_name

if TYPE_CHECKING:
    from ..graph.graph import Graph
    from .plan import ReleasePlan

__all__ = [
    "MANIFEST_FORMAT",
    "MANIFEST_VERSION",
    "AUDIT_FORMAT",
    "AUDIT_VERSION",
    "PUBLISHABLE_FIELDS",
    "AUDIT_WARNING",
    "manifest_path_for",
    "audit_path_for",
    "build_manifest",
    "build_audit",
    "encode",
    "read_audit",
    "describe",
    "prior_kind",
    "provenance_summary",
]

MANIFEST_FORMAT = "postcode-privacy-manifest"
# 3: a terminated-postcode sidecar is named by its table's sha256, not its file's
MANIFEST_VERSION = 3
MANIFEST_SUFFIX = ".manifest.json"
AUDIT_FORMAT = "postcode-privacy-audit"
AUDIT_VERSION = 1
AUDIT_SUFFIX = ".audit.json"
AUDIT_WARNING = (
    "PRIVATE: do not publish. Exact statistics of the true input (its sha256, "
    "counts of failed, dropped, nulled and moved records, and how far released "
    "postcodes moved); publishing them can "
    "reveal true postcodes. Publish only the release and its manifest."
)

# Fields of the plan's description that are parameters (see ReleasePlan.describe).
_DESCRIPTION_FIELDS = (
    "graph",
    "epsilon",
    "radius",
    "teleport_bound",
    "prior",
    "key_fingerprint",
    "on_error",
    "terminated",
    "terminated_locations",
    "columns",
)
# Every top-level field of a version-2 manifest, in order.  Each is a release parameter or a
# fact about the released file; none is computed from the true input.
PUBLISHABLE_FIELDS = (
    "format",
    "format_version",
    "library_version",
    "output_stability_version",
    "created",
    "output",
    *_DESCRIPTION_FIELDS,
    "audit_file",
)


def manifest_path_for(output_path: str | os.PathLike) -> Path:
    """``OUTPUT.manifest.json`` beside the output (publishable)."""
    path = Path(output_path)
    return path.with_name(path.name + MANIFEST_SUFFIX)


def audit_path_for(output_path: str | os.PathLike) -> Path:
    """``OUTPUT.audit.json`` beside the output (private)."""
    path = Path(output_path)
    return path.with_name(path.name + AUDIT_SUFFIX)


def _now() -> str:
    """The release's time, in UTC: now, or the moment ``$SOURCE_DATE_EPOCH`` names (the
    reproducible-builds convention), so that a release made again from the same inputs can
    have the same manifest, byte for byte, and so the same report (docs/release.md, "The
    manifest")."""
    from .._environment import source_date_epoch

    moment = source_date_epoch() or _dt.datetime.now(_dt.UTC)
    return moment.isoformat(timespec="seconds")


def build_manifest(
    description: dict,
    *,
    output_path: Path,
    output_format: str,
    output_sha256: str,
    rows: int,
    written_with: dict[str, str],
    uncompressed_sha256: str | None = None,
    created: str | None = None,
) -> dict:
    """The publishable manifest of a release.

    ``description`` is :meth:`ReleasePlan.describe` (parameters only); ``output_sha256``,
    ``rows`` and ``uncompressed_sha256`` (compressed CSV only) describe the released file, which
    anyone holding it can recompute; ``written_with`` names the libraries, with their versions,
    that shaped its bytes beyond its records (docs/release.md, "Byte for byte").
    Postcondition: the keys are exactly :data:`PUBLISHABLE_FIELDS`.
    """
    manifest = {
        "format": MANIFEST_FORMAT,
        "format_version": MANIFEST_VERSION,
        "library_version": description["library_version"],
        "output_stability_version": description["output_stability_version"],
        "created": created or _now(),
        "output": {
            "path": readable_name(output_path.name),  # (any locale: _file_names.py)
            "format": output_format,
            "sha256": output_sha256,
            **({} if uncompressed_sha256 is None else {"uncompressed_sha256": uncompressed_sha256}),
            "rows": int(rows),
            "written_with": dict(written_with),
        },
        **{name: description[name] for name in _DESCRIPTION_FIELDS},
        "audit_file": readable_name(audit_path_for(output_path).name),
    }
    assert tuple(manifest) == PUBLISHABLE_FIELDS
    return manifest


def build_audit(
    manifest: dict,
    *,
    input_path: Path,
    input_format: str,
    input_sha256: str,
    counts: dict,
    run: dict | None = None,
) -> dict:
    """The private audit record of a release: the true input's digest and every count.

    It names the manifest's output (path and sha256) so the two are seen to belong together.
    ``run`` (optional) describes the run for the operator: elapsed ``seconds`` and
    ``displacement_m``, the median and 95th percentile distance between true and released
    postcodes over released records (release/displacement.py).  It describes the true data,
    so it is here and never in the manifest.
    """
    audit = {
        "WARNING": AUDIT_WARNING,
        "format": AUDIT_FORMAT,
        "format_version": AUDIT_VERSION,
        # the run's real time, for the custodian (the manifest's may be $SOURCE_DATE_EPOCH's)
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "output": {"path": manifest["output"]["path"], "sha256": manifest["output"]["sha256"]},
        "manifest_file": manifest_path_for(manifest["output"]["path"]).name,
        "input": {
            "path": readable_name(input_path.name),
            "format": input_format,
            "sha256": input_sha256,
            "records": int(counts["records"]),
        },
        "counts": {key: int(value) for key, value in counts.items()},
    }
    if run is not None:
        audit["run"] = run
    return audit


def encode(document: dict) -> bytes:
    """The bytes written for a manifest or audit document (UTF-8 JSON, fields in order)."""
    return (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def read_audit(output_path: str | os.PathLike) -> dict:
    """The audit document written beside ``output_path``."""
    return json.loads(audit_path_for(output_path).read_text(encoding="utf-8"))


def describe(plan: ReleasePlan) -> dict:
    """The release's parameters, as the publishable manifest records them: nothing here is
    computed from the records (never the key itself, never a count)."""
    m = plan.mechanism
    bound: Fraction = m.teleport_bound
    identity = m.identity()  # the block evaluate and report carry too
    return {
        "library_version": identity["library_version"],
        "output_stability_version": identity["output_stability_version"],
        "graph": {
            "sha256": identity["graph_sha256"],
            "nodes": identity["graph_postcodes"],
            "params": _as_saved(plan.graph.params),
            "provenance": _as_saved(provenance_summary(plan.graph.provenance)),
        },
        "epsilon": identity["epsilon"],
        "radius": identity["radius"],
        "teleport_bound": {
            "exact": f"{bound.numerator}/{bound.denominator}",
            "approx": float_above(bound),  # a bound: its float is never below it
        },
        "prior": prior_kind(plan.graph),
        "key_fingerprint": plan.key.fingerprint,
        "on_error": plan.on_error,
        "terminated": plan.terminated,
        "terminated_locations": plan.terminated_source,
        "columns": {
            "id": plan.id_column,
            "postcode": plan.postcode_column,
            "out": plan.out_column,
            "source_postcode_kept": plan.keep_source_postcode,
        },
    }


def _as_saved(value: dict) -> dict:
    """``value`` as a saved graph artefact holds it: its header is JSON with sorted keys
    (graph/artefact.py), so a graph loaded from its file lists them sorted, and one built in
    this process (a first release, a rebuilt cache) in the order its builder wrote them.  Read
    back this way, both describe a release in the same bytes."""
    return json.loads(json.dumps(value, sort_keys=True, allow_nan=False))


def prior_kind(graph: Graph) -> str:
    """The prior's kind as the graph records it, else ``"uniform"`` or ``"custom"``."""
    kind = graph.params.get("prior")
    if isinstance(kind, str) and kind:
        return kind
    # every value the same is uniform whatever the value: the mechanism sees only ratios
    prior = graph.prior
    return "uniform" if prior.size == 0 or bool(np.all(prior == prior[0])) else "custom"


def provenance_summary(provenance: dict) -> dict:
    """A manifest-sized summary of a graph's provenance (file names, not paths; no long lists)."""
    out: dict = {}
    for key, value in provenance.items():
        if key == "build" and isinstance(value, dict):
            out[key] = {k: value[k] for k in ("nodes", "locations", "location_edges") if k in value}
        elif key == "sources" and isinstance(value, list):
            files = [_file_entry(v) for v in value]
            if len(files) <= 5:
                out[key] = files
            else:
                digest = hashlib.sha256()
                for entry in sorted(
                    files, key=lambda e: (str(e.get("file")), str(e.get("sha256")))
                ):
                    digest.update(f"{entry.get('file')}\0{entry.get('sha256')}\n".encode())
                out[key] = {"files": len(files), "sha256_of_list": digest.hexdigest()}
        elif isinstance(value, dict) and "table_sha256" in value:
            # (a terminated-postcode sidecar: its file's sha256 follows the pyarrow that wrote
            # it, so the table's stands for it: release/terminated.py, sidecar_record)
            out[key] = {k: v for k, v in value.items() if k != "sha256"}
        elif isinstance(value, dict) and "path" in value:
            out[key] = _file_entry(value)
        else:
            out[key] = value
    return out


def _file_entry(value: Any) -> dict:
    if not isinstance(value, dict):
        return {"file": str(value)}
    entry = {k: v for k, v in value.items() if k != "path"}
    if "path" in value:
        path = str(value["path"])
        # The last name of a POSIX path, or of a Windows one (which holds no "/"); not "\\" in a
        # POSIX path, where it is a character of a name (readable_name's "\\xNN" among them).
        entry = {"file": path.rsplit("/" if "/" in path else "\\", 1)[-1], **entry}
    return entry
