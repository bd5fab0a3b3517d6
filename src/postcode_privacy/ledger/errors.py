"""The ledger's own error (exit code 1): a state the ledger cannot proceed from safely."""

from ..errors import PostcodePrivacyError


class LedgerError(PostcodePrivacyError):
    """The ledger cannot proceed safely: it is not a ledger, its records disagree, a budget
    would be exceeded, or it changed under a release.  (A ledger path that does not exist is
    an :class:`~postcode_privacy.errors.InvalidParameterError`, and a wrong or unreadable
    secret a :class:`~postcode_privacy.errors.KeyFileError`, as on the command line.)"""


class LedgerSurroundingsError(LedgerError):
    """Something around the ledger stopped it: its disk, file system or server.
    ``cannot_write``: the ledger can still be read, not written (a full disk, a read-only file
    system, an I/O error writing), so a command that only reads may open it read-only."""

    def __init__(self, message: str, *, cannot_write: bool = False):
        super().__init__(message)
        self.cannot_write = cannot_write


class LedgerDamagedError(LedgerError):
    """The ledger's contents are not as postcode-privacy writes them, or its file is corrupt:
    the remedy is a backup, not another path or a retry."""


class LedgerBusy(LedgerError):
    """Another run holds the ledger's write lock, and this write was asked not to wait
    (``Store.write(wait=False)``: settling a release that was told to stop)."""

    def __init__(self) -> None:
        super().__init__("another run is writing to the ledger")
