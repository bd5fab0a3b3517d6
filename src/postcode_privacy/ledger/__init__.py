"""The privacy ledger: what each subject has spent across releases (docs/ledger.md).

* :class:`Ledger` opens or creates a ledger (a SQLite file, or a PostgreSQL database) whose
  secret lives in a key file beside it; it stores only keyed digests (``digests.py``);
* :class:`LedgerRecorder` links one release to a ledger: budget screening, then the
  pending-to-committed recording protocol around the release's renames (``recording.py``);
* :func:`check_release` previews a release against the ledger (``preview.py``);
* cumulative spend is exact (``accounting.py``); the SQL lives in ``stores.py`` and the two
  backends, ``sqlite_store.py`` and ``postgres_store.py``.
"""

from .accounting import parse_budget, spend_text
from .errors import LedgerError
from .ledger import Ledger, secret_path_for
from .preview import check_release
from .recording import LedgerRecorder

__all__ = [
    "Ledger",
    "LedgerError",
    "LedgerRecorder",
    "check_release",
    "parse_budget",
    "secret_path_for",
    "spend_text",
]
