import sys
from pathlib import Path

# Make the test-only helpers (graph generators, exact checks, the independent implementation)
# importable as plain modules.
sys.path.insert(0, str(Path(__file__).parent))
