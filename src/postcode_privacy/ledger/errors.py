"""The ledger's own error (exit code 1): a state the ledger cannot proceed from safely."""

from ..errors import PostcodePrivacyError


class LedgerError(PostcodePrivacyError):
    """The ledger is missing, belongs to another secret, or changed under a release."""
