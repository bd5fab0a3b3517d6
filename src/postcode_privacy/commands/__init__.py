"""One module per CLI sub-command, each registering itself on ``postcode_privacy.cli.cli``."""

from . import build, calibrate, demo, evaluate, example, keygen, ledger, perturb, report  # noqa: F401
