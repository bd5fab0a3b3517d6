"""postcode-privacy: release UK postcodes under metric differential privacy on a postcode graph.

The public surface is small: a :class:`Graph`, a :class:`Key`, a :class:`Mechanism` that turns a
true postcode into a released one, and recipes built on them (``perturb_frame`` for pandas,
``default_graph`` for the embedded national graph).  Heavy modules load on first use.
"""

from .errors import (
    ArtefactError,
    GraphError,
    InputDataError,
    InvalidParameterError,
    KeyFileError,
    OutputExistsError,
    PostcodePrivacyError,
    SourceDataError,
    UnknownPostcodeError,
)
from .graph import Graph
from .mechanism import Key, Mechanism
from .version import OUTPUT_STABILITY_VERSION, __version__

__all__ = [
    "Graph",
    "Key",
    "Mechanism",
    "default_graph",
    "perturb_frame",
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
]


def __getattr__(name: str):
    if name == "default_graph":
        from .sources.bundled import default_graph

        return default_graph
    if name == "perturb_frame":
        from .release import perturb_frame

        return perturb_frame
    raise AttributeError(name)
