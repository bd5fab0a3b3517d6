"""``$SOURCE_DATE_EPOCH`` is read only where it is used, by ``report`` for the date its page
states (src/postcode_privacy/_environment.py; docs/cli.md): a malformed value stops that
command before any work and no other, and scipy loads whatever the variable holds."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from postcode_privacy.cli import main

MALFORMED = ["abc", "", "1e9", "12.0", "9" * 5000]


@pytest.mark.parametrize("value", MALFORMED, ids=["text", "empty", "exponent", "decimal", "long"])
def test_only_report_reads_it(value, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", value)
    assert main(["--help"]) == 0
    assert main(["perturb", "--help"]) == 0
    assert main(["report", "--help"]) == 0
    assert main(["keygen", "-o", str(tmp_path / "a.key")]) == 0
    assert (tmp_path / "a.key").stat().st_size > 0
    capsys.readouterr()
    # report refuses it before any work: before the (missing) graph is even looked for
    out = tmp_path / "r.html"
    argv = ["report", "--epsilon", "1", "--graph", str(tmp_path / "none.ppg"), "-o", str(out)]
    assert main(argv) == 8
    err = capsys.readouterr().err
    assert err.startswith("error: $SOURCE_DATE_EPOCH ")
    assert "none.ppg" not in err and not out.exists()


BUILD = (
    "from postcode_privacy.graph.build import build_graph\n"
    "g = build_graph(['BD1 1AA', 'BD1 1AB', 'BD1 1AD'], [410000.0, 410100.0, 410050.0],"
    " [432000.0, 432000.0, 432100.0])\n"
    "print(len(g))\n"
)
NEAREST = (
    "import pandas as pd\n"
    "from postcode_privacy.graph import Graph\n"
    "from postcode_privacy.release.terminated import NearestLive\n"
    "g = Graph.load({graph!r})\n"
    "table = pd.DataFrame({{'postcode': ['BD1 1ZZ'], 'easting': [410090], 'northing': [432000]}})\n"
    "print(g.labels_of([NearestLive(g, table).nearest_node(0)])[0])\n"
)


@pytest.mark.slow  # two Python processes that load scipy: over a second and a half
@pytest.mark.parametrize(
    ("script", "printed"), [(BUILD, "3"), (NEAREST, "BD1 1AB")], ids=["build", "nearest"]
)
def test_scipy_loads_whatever_it_holds(script, printed, tmp_path):
    """numpy reads the variable with int() when scipy is first imported: building a graph
    (scipy's connected components) and finding the nearest live postcode (its k-d tree) work
    anyway, and the variable is left as it was.  In a fresh process, as this one has imported
    scipy already."""
    from postcode_privacy.graph.build import build_graph

    graph = tmp_path / "g.ppg"
    build_graph(["BD1 1AA", "BD1 1AB"], [410000.0, 410100.0], [432000.0, 432000.0]).save(graph)
    script = script.format(graph=str(graph)) + "import os; print(os.environ['SOURCE_DATE_EPOCH'])\n"
    env = {**os.environ, "SOURCE_DATE_EPOCH": "not-a-number"}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [printed, "not-a-number"]


def test_a_kernel_with_nowhere_to_cache_is_compiled_without_its_cache(monkeypatch):
    # A read-only install run by an account with no home: no directory numba can write.
    import numba.core.caching as numba_caching

    from postcode_privacy._numba import njit

    def unwritable(self):
        raise PermissionError("read-only")

    monkeypatch.setattr(numba_caching._CacheLocator, "ensure_cache_path", unwritable)

    def add_one(x):
        return x + 1

    assert njit(cache=True)(add_one)(41) == 42
