"""``python -m postcode_privacy``: the same command line as ``postcode-privacy``."""

from ._start import entry_point

entry_point()
