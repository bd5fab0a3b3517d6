"""Test dependencies outside the ``[test]`` extra (PySpark needs Java and 400 MB).

Where one is missing, the tests that need it are skipped with a reason shown in the summary, so
``pip install '.[test]'`` alone can collect and run every module.  CI installs everything and
sets ``POSTCODE_PRIVACY_REQUIRE_OPTIONAL=1``, which turns such a missing import into a failure:
a skip there would hide a broken install.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest

REQUIRE_ENV = "POSTCODE_PRIVACY_REQUIRE_OPTIONAL"


def require(module: str, install_hint: str) -> ModuleType:
    """Import ``module``, or skip the calling test module (fail instead when CI requires it)."""
    if os.environ.get(REQUIRE_ENV) == "1":
        return importlib.import_module(module)
    return pytest.importorskip(module, reason=f"{module} is not installed ({install_hint})")
