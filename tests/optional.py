"""Test dependencies outside the ``[test]`` extra (PySpark needs Java and 400 MB).

Where one is missing, the tests that need it are skipped with a reason shown in the summary, so
``pip install '.[test]'`` alone can collect and run every module.  CI installs everything and
sets ``POSTCODE_PRIVACY_REQUIRE_OPTIONAL=1``, which turns such a missing import into a failure:
a skip there would hide a broken install.
"""

from __future__ import annotations

import importlib
import os
import shutil
from types import ModuleType

import pytest

REQUIRE_ENV = "POSTCODE_PRIVACY_REQUIRE_OPTIONAL"


def require_java() -> None:
    """Skip the calling test module when no Java runtime is found where PySpark looks for one
    (``$JAVA_HOME/bin/java``, else ``java`` on ``PATH``): without it every session fails to
    start.  CI requires it, as it requires the imports."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if java and os.access(java, os.X_OK):
        return
    reason = "no Java runtime for PySpark (JAVA_HOME, or java on PATH; Spark needs Java 17)"
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def require(module: str, install_hint: str) -> ModuleType:
    """Import ``module``, or skip the calling test module (fail instead when CI requires it)."""
    if os.environ.get(REQUIRE_ENV) == "1":
        return importlib.import_module(module)
    return pytest.importorskip(module, reason=f"{module} is not installed ({install_hint})")


def missing_from_this_machine(reason: str) -> None:
    """Skip the calling test for something this machine lacks (root, the right to mount a
    file system, ``/dev/full``, a locale tool); fail instead where CI requires everything
    (``POSTCODE_PRIVACY_REQUIRE_OPTIONAL=1``): CI's machine has them all, and a skip there
    would count a test that never ran as passing (a review of round 36)."""
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{reason} (CI requires it: {REQUIRE_ENV}=1)", pytrace=False)
    pytest.skip(reason)
