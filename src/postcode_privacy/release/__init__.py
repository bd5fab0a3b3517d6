"""Releasing a dataset: the recipe that turns records with true postcodes into a releasable file.

* :class:`ReleasePlan` holds a :class:`~postcode_privacy.Mechanism`, the key and the validated
  options; :meth:`ReleasePlan.process_chunk` is the one place where records are checked and
  perturbed.  The CLI streams file chunks through it, :func:`perturb_frame` passes a whole
  DataFrame, and the Spark path calls it once per partition.
* :func:`release_file` is the file-to-file workflow behind ``postcode-privacy perturb``: chunked
  reading, a validation pass, atomic output, the publishable manifest and the private audit
  file (``manifest.py``).

The user guide is docs/release.md.
"""

from .files import release_file
from .options import ReleaseOptions
from .plan import (
    COUNT_KEYS,
    MAX_LISTED_ERRORS,
    DuplicateSubjectWarning,
    ReleasePlan,
    perturb_frame,
)

__all__ = [
    "COUNT_KEYS",
    "MAX_LISTED_ERRORS",
    "DuplicateSubjectWarning",
    "ReleaseOptions",
    "ReleasePlan",
    "perturb_frame",
    "release_file",
]
