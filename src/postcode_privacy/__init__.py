"""postcode-privacy: release UK postcodes under metric differential privacy on a postcode graph.

The public surface is ``__all__`` below and nothing else: a :class:`Graph`, a :class:`Key` with
its key-file functions, a :class:`Mechanism` that turns a true postcode into a released one, the
recipes built on them (``perturb_frame`` for pandas, ``release_file`` for files, with
:class:`ReleaseOptions`; ``default_graph`` for the embedded national graph), the typed errors
and the warnings a caller may want to filter.  Everything else is internal and may change.
Heavy modules load on first use.
"""

import importlib
from typing import TYPE_CHECKING

from ._environment import before_importing_scipy
from .errors import (
    ArtefactError,
    CacheWarning,
    DuplicateSubjectWarning,
    GraphError,
    InputDataError,
    InvalidParameterError,
    KeyFileError,
    OutputExistsError,
    PostcodePrivacyError,
    SourceDataError,
    SubjectIdError,
    TeleportWarning,
    UnknownPostcodeError,
    WorkerLostError,
)
from .version import OUTPUT_STABILITY_VERSION, __version__

if TYPE_CHECKING:  # (imported on first use, below: the command line starts without numpy)
    from .graph import Graph
    from .graph.national import default_graph
    from .keyfile import read_key_file, write_key_file
    from .mechanism import Key, Mechanism
    from .release import ReleaseOptions, ReleasePlan, perturb_frame, read_sidecar, release_file

# numba (when it compiles) and the graph code import scipy, which a $SOURCE_DATE_EPOCH that
# int() cannot read would stop with a baffling error; only ``report`` uses the variable.
before_importing_scipy()
del before_importing_scipy

__all__ = [
    "Graph",
    "Key",
    "Mechanism",
    "default_graph",
    "perturb_frame",
    "release_file",
    "read_sidecar",
    "ReleaseOptions",
    "ReleasePlan",
    "read_key_file",
    "write_key_file",
    "OUTPUT_STABILITY_VERSION",
    "__version__",
    "ArtefactError",
    "GraphError",
    "InputDataError",
    "InvalidParameterError",
    "KeyFileError",
    "OutputExistsError",
    "PostcodePrivacyError",
    "SourceDataError",
    "SubjectIdError",
    "UnknownPostcodeError",
    "WorkerLostError",
    "CacheWarning",
    "DuplicateSubjectWarning",
    "TeleportWarning",
]


# Where each public name is defined, imported on first use: a stop signal during the command
# line's start is then caught by its own handling (``_interrupts``), which is in place before
# numpy, pandas and the graph code load.
_DEFINED_IN = {
    "Graph": ".graph",
    "Key": ".mechanism",
    "Mechanism": ".mechanism",
    "read_key_file": ".keyfile",
    "write_key_file": ".keyfile",
    "default_graph": ".graph.national",
    "perturb_frame": ".release",
    "release_file": ".release",
    "read_sidecar": ".release",
    "ReleaseOptions": ".release",
    "ReleasePlan": ".release",
}


def __getattr__(name: str):
    module = _DEFINED_IN.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value
