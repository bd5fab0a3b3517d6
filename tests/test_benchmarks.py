"""Every script in benchmarks/ still runs: each is started with ``--smoke`` on a tiny input.

A benchmark is run by hand before a performance claim is written down, so nothing else would
notice an import, option or API change that breaks it.  ``--smoke`` asks a script to exercise
its whole path on a tiny input (seconds); the numbers it prints are not checked, only that it
finishes cleanly with warnings as errors.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import postcode_privacy

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
SCRIPTS = sorted(BENCHMARKS.glob("*.py"))
_DECLARES_SMOKE = re.compile(r"""["']--smoke["']""")


def declares_smoke(script: Path) -> bool:
    """Whether the script's source mentions the ``--smoke`` option (argparse or by hand)."""
    return bool(_DECLARES_SMOKE.search(script.read_text(encoding="utf-8")))


def test_benchmarks_exist():
    assert len(SCRIPTS) >= 5


def test_every_benchmark_declares_smoke():
    missing = [s.name for s in SCRIPTS if not declares_smoke(s)]
    assert missing == [], f"benchmarks without a --smoke option: {missing}"


def uses_national_graph(script: Path) -> bool:
    return "default_graph" in script.read_text(encoding="utf-8")


@pytest.mark.slow
@pytest.mark.parametrize(
    "script",
    [
        pytest.param(s, marks=[pytest.mark.national] if uses_national_graph(s) else [])
        for s in SCRIPTS
        if declares_smoke(s)
    ],
    ids=lambda s: s.name,
)
def test_benchmark_smoke_run(script, tmp_path, request):
    if request.node.get_closest_marker("national"):  # cached before the script loads it
        request.getfixturevalue("national_graph")
    # The scripts import the package under test, wherever the tests import it from.
    src = str(Path(postcode_privacy.__file__).resolve().parent.parent)
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)
    )
    result = subprocess.run(
        [sys.executable, "-W", "error", str(script), "--smoke"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip(), "a smoke run printed nothing"
    assert list(tmp_path.iterdir()) == []  # results go to stdout or to files asked for
