"""Releasing a dataset: the recipe that turns records with true postcodes into a releasable file.

* :class:`ReleaseOptions` (``options.py``) declares every option a caller chooses, validated
  once, for every entry point (``perturb_frame``, ``release_file``, Spark, the CLI).
* :class:`ReleasePlan` holds a :class:`~postcode_privacy.Mechanism`, the key and the options;
  :meth:`ReleasePlan.process_chunk` checks and perturbs a chunk of records by one set of rules
  and one call into the engine.  The CLI streams file chunks through its three steps
  (overlapping one chunk's draws with the next chunk's checks), :func:`perturb_frame` passes a
  whole DataFrame, and the Spark path calls it once per partition.
* :func:`release_file` is the file-to-file workflow behind ``postcode-privacy perturb``: chunked
  reading, a validation pass, atomic output, the publishable manifest and the private audit
  file (``manifest.py``).

The names are imported on first use, so that the command line can read the option
declarations without loading pandas.  The user guide is docs/release.md.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .files import release_file
    from .frame import perturb_frame
    from .options import ReleaseOptions
    from .plan import ReleasePlan
    from .records import COUNT_KEYS, MAX_LISTED_ERRORS
    from .subjects import DuplicateSubjectWarning
    from .terminated import read_sidecar

__all__ = [
    "COUNT_KEYS",
    "MAX_LISTED_ERRORS",
    "DuplicateSubjectWarning",
    "ReleaseOptions",
    "ReleasePlan",
    "perturb_frame",
    "read_sidecar",
    "release_file",
]

# Where each public name lives.
_HOMES = {
    "COUNT_KEYS": ".records",
    "MAX_LISTED_ERRORS": ".records",
    "DuplicateSubjectWarning": ".subjects",
    "ReleaseOptions": ".options",
    "ReleasePlan": ".plan",
    "perturb_frame": ".frame",
    "release_file": ".files",
    "read_sidecar": ".terminated",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(home, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
