import os
import sys
from pathlib import Path

# Make the test-only helpers (graph generators, exact checks, the independent implementation)
# importable as plain modules.
sys.path.insert(0, str(Path(__file__).parent))


import pytest  # noqa: E402

# Test tiers (markers registered in pyproject.toml; CONTRIBUTING.md, "Running the tests").
# `slow` is what `pytest -m "not slow"` leaves out; the sub-markers say why a test is slow.
SLOW_TIERS = ("national", "spark", "browser")


@pytest.fixture(scope="session")
def postgres():
    """A PostgreSQL server of this test session, bound to 127.0.0.1 (tests/ledger_backends.py);
    a failure, not a skip, where .ci/run has installed PostgreSQL."""
    from ledger_backends import PostgresServer, postgres_bin

    bindir = postgres_bin()
    if bindir is None:
        message = "PostgreSQL binaries not installed (Debian package postgresql)"
        if os.environ.get("POSTCODE_PRIVACY_REQUIRE_OPTIONAL") == "1":
            pytest.fail(message + "; .ci/run installs them, so this run must have them")
        pytest.skip(message)
    server = PostgresServer(bindir)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def national_graph():
    """The embedded national graph: loaded from the cache, or built on first use (~30 s).

    Every test that needs the national graph takes this fixture, so it is loaded once per test
    session and the test is marked ``national`` (and so ``slow``) automatically.  Tests that
    need it fail, never skip, if it cannot be had: it ships with the package.

    One test process at a time: under ``pytest -n`` on a clean machine the first builds and
    caches the graph while the others wait, then load it (the cache's atomic writes make
    concurrent builds safe, but each would cost half a minute).
    """
    import fcntl

    from postcode_privacy import default_graph
    from postcode_privacy.graph.national import cache_dir

    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "tests-national-graph.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return default_graph(progress=False)


@pytest.fixture
def count_calls(monkeypatch):
    """``count_calls(module, name)`` wraps ``module.name`` for the test and returns the list
    that gets one entry per call (how tests see that a build or a load happens, or not)."""

    def wrap(module, name):
        calls: list = []
        real = getattr(module, name)

        def counting(*args, **kwargs):
            calls.append(1)
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, counting)
        return calls

    return wrap


def pytest_collection_modifyitems(config, items):
    """Mark the slow tiers: national-graph users, the Spark modules, and what they imply."""
    for item in items:
        if "national_graph" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.national)
        if item.path.name.startswith("test_spark"):
            item.add_marker(pytest.mark.spark)
        if any(item.get_closest_marker(tier) for tier in SLOW_TIERS):
            item.add_marker(pytest.mark.slow)


def pytest_configure(config):
    """Give every test Python's own stop-signal handlers, whatever pytest inherited.

    A test run started with a stop signal ignored (under ``nohup``, or as a background job of
    a script, which ignores SIGINT) made the tests that raise SIGINT or SIGTERM in-process fail,
    or pass, depending on which tests had run before in that process (a review of round 36):
    the library rightly leaves an ignored signal ignored.  The tests describe a run in a
    terminal, so they start from the handlers such a run has."""
    import signal

    defaults = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}
    if hasattr(signal, "SIGHUP"):
        defaults[signal.SIGHUP] = signal.SIG_DFL
    for stop, handler in defaults.items():
        if signal.getsignal(stop) == signal.SIG_IGN:
            signal.signal(stop, handler)
