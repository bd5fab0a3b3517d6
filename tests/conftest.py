import sys
from pathlib import Path

# Make the test-only helpers (graph generators, exact checks, the independent implementation)
# importable as plain modules.
sys.path.insert(0, str(Path(__file__).parent))


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def national_graph():
    """The embedded national graph: loaded from the cache, or built on first use (~30 s).

    Tests that need it fail, never skip, if it cannot be had: it ships with the package.
    """
    from postcode_privacy import default_graph

    return default_graph(progress=False)
