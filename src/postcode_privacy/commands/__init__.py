"""One module per CLI sub-command, each registering itself on ``postcode_privacy.cli.cli``."""

from . import build, demo, example, keygen, perturb  # noqa: F401
