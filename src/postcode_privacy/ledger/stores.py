"""Where a ledger lives: the interface both backends share, and :func:`open_store`.

A ledger is a SQLite file (the default, ``sqlite_store.py``) or a PostgreSQL database
(``postgres_store.py``).  Both hold the same five tables (docs/ledger.md, "Tables") and answer
the same few questions, asked here in SQL both dialects read; what differs between them is in
their own modules.  Digests are stored as raw bytes (BLOB / BYTEA) in indexed columns.

Writers are serialised: ``BEGIN IMMEDIATE`` (with a busy timeout) on SQLite, a
transaction-scoped advisory lock on PostgreSQL, so two releases recording at once queue rather
than interleave, and a budget re-checked inside the write transaction stays true until commit.

A driver error that says something about the ledger's surroundings rather than its contents
(a full disk, a read-only file system, a lost server, a missing privilege) becomes one
:class:`LedgerError` saying so, classified by SQLite result code or PostgreSQL SQLSTATE, never
by message text (docs/ledger.md, "When something goes wrong").  Other driver errors pass
through: the ledger reads them as damage (``ledger._damage_is_a_ledger_error``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence

from ..errors import InvalidParameterError
from .errors import LedgerError, LedgerSurroundingsError

__all__ = [
    "Store",
    "open_store",
    "is_url",
    "LEDGER_FORMAT",
    "SCHEMA_VERSION",
    "SCHEMA_VERSIONS",
]

LEDGER_FORMAT = "postcode-privacy-ledger"
# Version 2 adds the ``settlements`` table (releases settled by hand).  A version-1 ledger is
# still read and written as it is, and becomes version 2 only in the transaction that first
# settles a release by hand (``Store.upgrade_schema``): a ledger nobody settles by hand stays
# readable by the versions before this one (docs/ledger.md, "Tables").
SCHEMA_VERSION = "2"
SCHEMA_VERSIONS = frozenset({"1", SCHEMA_VERSION})


def is_url(location: str) -> bool:
    return location.startswith(("postgresql://", "postgres://"))


# A writer waits this long for another run's write lock, and a run of the command line says
# that it is waiting once it has waited WRITE_LOCK_NOTICE_S (both backends).
WRITE_LOCK_WAIT_S = 600
WRITE_LOCK_NOTICE_S = 2.0


def say_waiting() -> None:
    """On the command line: one line on stderr for a run waiting for the ledger's write lock
    (from Python, nothing: the caller's program decides what its users see)."""
    from ..errors import SURFACE

    if SURFACE.get() == "cli":
        import click

        click.echo(
            "waiting for the ledger: another run is writing to it (Ctrl-C stops this run)",
            err=True,
        )


class Store:
    """A connection to one ledger database.  ``?`` placeholders in every statement.

    Every statement runs under :meth:`_surroundings`: a driver error about the surroundings
    becomes a :class:`LedgerError` naming what was being done (``_doing``: open, read or
    write to the ledger)."""

    blob = "BLOB"
    kind = ""
    read_only = False
    # The driver's errors for a statement that fails on the database's contents (a table
    # dropped, a column missing): the ledger turns them into a LedgerError.
    database_errors: tuple[type[BaseException], ...] = ()
    _doing = "open"

    # -- errors ---------------------------------------------------------------------------------

    def surroundings(self, exc: BaseException) -> str | None:
        """What ``exc`` (a driver error) says is wrong around the ledger, or None when it is
        about the ledger's contents (or unknown)."""
        raise NotImplementedError

    @contextlib.contextmanager
    def _surroundings(self, doing: str | None = None) -> Iterator[None]:
        try:
            yield
        except self.database_errors as exc:
            reason = self.surroundings(exc)
            if reason is None:
                raise
            raise LedgerSurroundingsError(
                f"cannot {doing or self._doing} the ledger: {reason}",
                cannot_write=self.cannot_write(exc),
            ) from None

    def cannot_write(self, exc: BaseException) -> bool:
        """Whether ``exc`` (a driver error about the surroundings) leaves the ledger readable,
        only not writable."""
        return False

    @contextlib.contextmanager
    def _as(self, doing: str) -> Iterator[None]:
        # While a ledger is being created, everything done to it is part of creating it.
        before = self._doing
        self._doing = before if before == "create" else doing
        try:
            with self._surroundings():
                yield
        finally:
            self._doing = before

    # -- connection-level -----------------------------------------------------------------------

    def execute(self, sql: str, params: Sequence = ()):
        with self._surroundings():
            return self._execute(sql, params)

    def _execute(self, sql: str, params: Sequence = ()):
        raise NotImplementedError

    def query(self, sql: str, params: Sequence = ()) -> list[tuple]:
        with self._surroundings():
            try:
                return [tuple(row) for row in self._execute(sql, params).fetchall()]
            finally:
                self.check_unchanged()

    def check_unchanged(self) -> None:
        """Raise if what was just read may not be the ledger as it is (``_FrozenView``)."""

    def bulk_insert(self, table: str, columns: Sequence[str], rows: Iterable[Sequence]) -> None:
        with self._surroundings():
            self._bulk_insert(table, columns, rows)

    def _bulk_insert(self, table: str, columns: Sequence[str], rows: Iterable[Sequence]) -> None:
        raise NotImplementedError

    def insert_new(self, table: str, columns: Sequence[str], rows: Iterable[Sequence]) -> int:
        """Insert the rows whose primary key is not yet present; return how many were."""
        with self._surroundings():
            return self._insert_new(table, columns, rows)

    def _insert_new(self, table: str, columns: Sequence[str], rows: Iterable[Sequence]) -> int:
        raise NotImplementedError

    @contextlib.contextmanager
    def write(self, *, wait: bool = True) -> Iterator[None]:
        """A serialised read-write transaction, committed on success.  With ``wait=False``,
        :class:`LedgerBusy` at once if another run holds the write lock."""
        if self.read_only:
            raise LedgerError(
                "cannot write to the ledger: it was opened read-only (it is on read-only "
                "media, or its file or directory is not writable)"
            )
        with self._as("write to"), self._write(wait=wait):
            yield

    @contextlib.contextmanager
    def read(self) -> Iterator[None]:
        """A consistent read-only snapshot."""
        with self._as("read"), self._read():
            try:
                yield
            finally:
                self.check_unchanged()

    def _write(self, *, wait: bool) -> contextlib.AbstractContextManager[None]:
        raise NotImplementedError

    def _read(self) -> contextlib.AbstractContextManager[None]:
        raise NotImplementedError

    def close(self) -> None:
        """Close the connection (each backend holds its own driver's)."""
        raise NotImplementedError

    # -- schema ---------------------------------------------------------------------------------

    def create_schema(self) -> None:
        b = self.blob
        statements = [
            "CREATE TABLE ledger_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
            "CREATE TABLE releases (id INTEGER PRIMARY KEY, uid TEXT NOT NULL UNIQUE, "
            "state TEXT NOT NULL, created TEXT NOT NULL, committed TEXT, owner TEXT NOT NULL, "
            "output_path TEXT NOT NULL, output_sha256 TEXT NOT NULL, epsilon TEXT NOT NULL, "
            "radius INTEGER NOT NULL, graph_sha256 TEXT NOT NULL, key_fingerprint TEXT NOT NULL, "
            "output_stability_version TEXT NOT NULL, records INTEGER NOT NULL, "
            "new_draws INTEGER NOT NULL, budget TEXT)",
            f"CREATE TABLE draws (draw {b} PRIMARY KEY, subject {b} NOT NULL, pair {b} NOT NULL, "
            "release INTEGER NOT NULL)" + self.without_rowid,
            "CREATE INDEX draws_subject ON draws (subject)",
            f"CREATE TABLE shared_draws (release INTEGER NOT NULL, draw {b} NOT NULL, "
            f"subject {b} NOT NULL, pair {b} NOT NULL, PRIMARY KEY (draw, release))",
            _SETTLEMENTS,
        ]
        for sql in statements:
            self.execute(sql)

    def schema_version(self) -> str | None:
        """The schema version the ledger records now (inside the caller's transaction)."""
        rows = self.query("SELECT value FROM ledger_meta WHERE name = 'schema_version'")
        return rows[0][0] if rows else None

    def upgrade_schema(self) -> None:
        """Bring a version-1 ledger to the current version (inside the caller's write
        transaction, which re-reads the version so that two upgrades at once do one)."""
        if self.schema_version() == "1":
            self.execute(_SETTLEMENTS)
            self.execute(
                "UPDATE ledger_meta SET value = ? WHERE name = 'schema_version'",
                (SCHEMA_VERSION,),
            )

    without_rowid = ""

    def has_schema(self) -> bool:
        raise NotImplementedError

    # How this backend's SQL measures a digest in bytes, and (SQLite, whose columns take any
    # value) the conditions that find a value of another type.
    byte_length = "octet_length"
    mistyped_digest = "FALSE"
    mistyped_release = "FALSE"

    def holds_malformed_draws(self) -> bool:
        """Whether a draw table holds a row this package never writes: a digest that is not
        ``DIGEST_BYTES`` bytes (or, in SQLite, not bytes at all), or a release that is not an
        integer or not in the ledger.  A subject's digest edited into anything else matches no
        lookup, so its earlier spend would go unseen.  A full scan of both draw tables: 0.5 s
        for two million draws in SQLite, the file in the page cache."""
        from .digests import DIGEST_BYTES

        for table in ("draws", "shared_draws"):
            wrong = [
                f"({self.mistyped_digest.format(c)} OR {self.byte_length}({c}) != {DIGEST_BYTES})"
                for c in ("draw", "subject", "pair")
            ]
            wrong.append(self.mistyped_release)
            wrong.append("release NOT IN (SELECT id FROM releases)")
            rows = self.query(f"SELECT EXISTS (SELECT 1 FROM {table} WHERE {' OR '.join(wrong)})")
            if rows[0][0]:
                return True
        return False

    # -- temporary key sets ---------------------------------------------------------------------

    def load_keys(self, name: str, keys: Iterable[bytes]) -> None:
        """(Re)fill temporary table ``name`` (one indexed ``k`` column) with ``keys``."""
        self.execute(f"DROP TABLE IF EXISTS {name}")
        self.execute(f"CREATE TEMPORARY TABLE {name} (k {self.blob} PRIMARY KEY)")
        self.bulk_insert(name, ("k",), ((k,) for k in set(keys)))


# Schema version 2: who settled which pending release by hand, when, how, and on what basis.
_SETTLEMENTS = (
    "CREATE TABLE settlements (release INTEGER PRIMARY KEY, outcome TEXT NOT NULL, "
    "settled TEXT NOT NULL, settled_by TEXT NOT NULL, basis TEXT NOT NULL)"
)


def open_store(location: str, *, create: bool = False, read_only: bool = False) -> Store:
    """Connect to the ledger at ``location``: a PostgreSQL URL or a SQLite file path.
    ``read_only`` (SQLite): write nothing, not even SQLite's files beside it."""
    if not isinstance(location, str) or not location:
        raise InvalidParameterError("the ledger must be a file path or a postgresql:// URL")
    # (imported here: each backend's module builds on Store, above)
    if is_url(location):
        from .postgres_store import PostgresStore

        return PostgresStore(location, create)
    if "://" in location:
        raise InvalidParameterError("a ledger URL must start with postgresql://")
    from .sqlite_store import SqliteStore

    return SqliteStore(location, create, read_only)
