"""postcode-privacy: release UK postcodes under metric differential privacy on a postcode graph.

The public surface is ``__all__`` below and nothing else: a :class:`Graph`, a :class:`Key` with
its key-file functions, a :class:`Mechanism` that turns a true postcode into a released one, the
recipes built on them (``perturb_frame`` for pandas, ``release_file`` for files, with
:class:`ReleaseOptions`; ``default_graph`` for the embedded national graph), the typed errors
and the warnings a caller may want to filter.  Everything else is internal and may change.
Heavy modules load on first use.
"""

from ._environment import before_importing_scipy
from .errors import (
    ArtefactError,
    DuplicateSubjectWarning,
    GraphError,
    InputDataError,
    InvalidParameterError,
    KeyFileError,
    OutputExistsError,
    PostcodePrivacyError,
    SourceDataError,
    TeleportWarning,
    UnknownPostcodeError,
)
from .graph import Graph
from .keyfile import read_key_file, write_key_file
from .mechanism import Key, Mechanism
from .version import OUTPUT_STABILITY_VERSION, __version__

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
    "ReleaseOptions",
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
    "UnknownPostcodeError",
    "DuplicateSubjectWarning",
    "TeleportWarning",
]


def __getattr__(name: str):
    if name == "default_graph":
        from .graph.national import default_graph

        return default_graph
    if name in ("perturb_frame", "release_file", "ReleaseOptions"):
        from . import release

        return getattr(release, name)
    raise AttributeError(name)
