"""Where a ledger lives: a SQLite file (the default) or a PostgreSQL database.

Both backends hold the same four tables (docs/ledger.md, "Tables") and answer the same few
questions; everything that differs between the two SQL dialects is in this module.  Digests
are stored as raw bytes (BLOB / BYTEA) in indexed columns; bulk loads use ``executemany`` on
SQLite and ``COPY`` on PostgreSQL.

Writers are serialised: ``BEGIN IMMEDIATE`` (with a busy timeout) on SQLite, a
transaction-scoped advisory lock on PostgreSQL, so two releases recording at once queue rather
than interleave, and a budget re-checked inside the write transaction stays true until commit.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterable, Iterator, Sequence

from ..atomic import refuse_directory_path
from ..errors import InvalidParameterError, OutputExistsError
from .errors import LedgerError

__all__ = ["Store", "SqliteStore", "PostgresStore", "open_store", "is_url"]

SCHEMA_VERSION = "1"
_BUSY_TIMEOUT_S = 600
_PG_LOCK_ID = 0x7070_6C65_6467_6572  # advisory lock key ("ppledger"): one writer at a time
_BATCH = 50_000


def is_url(location: str) -> bool:
    return location.startswith(("postgresql://", "postgres://"))


class Store:
    """A connection to one ledger database.  ``?`` placeholders in every statement."""

    blob = "BLOB"
    kind = ""
    # The driver's errors for a statement that fails on the database's contents (a table
    # dropped, a column missing): the ledger turns them into a LedgerError.
    database_errors: tuple[type[BaseException], ...] = ()

    # -- connection-level -----------------------------------------------------------------------

    def execute(self, sql: str, params: Sequence = ()):
        raise NotImplementedError

    def query(self, sql: str, params: Sequence = ()) -> list[tuple]:
        return [tuple(row) for row in self.execute(sql, params).fetchall()]

    def bulk_insert(self, table: str, columns: Sequence[str], rows: Iterable[Sequence]) -> None:
        raise NotImplementedError

    def insert_new(self, table: str, columns: Sequence[str], rows: Iterable[Sequence]) -> int:
        """Insert the rows whose primary key is not yet present; return how many were."""
        raise NotImplementedError

    @contextlib.contextmanager
    def write(self) -> Iterator[None]:
        """A serialised read-write transaction, committed on success."""
        raise NotImplementedError

    @contextlib.contextmanager
    def read(self) -> Iterator[None]:
        """A consistent read-only snapshot."""
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
        ]
        for sql in statements:
            self.execute(sql)

    without_rowid = ""

    def has_schema(self) -> bool:
        raise NotImplementedError

    # -- temporary key sets ---------------------------------------------------------------------

    def load_keys(self, name: str, keys: Iterable[bytes]) -> None:
        """(Re)fill temporary table ``name`` (one indexed ``k`` column) with ``keys``."""
        self.execute(f"DROP TABLE IF EXISTS {name}")
        self.execute(f"CREATE TEMPORARY TABLE {name} (k {self.blob} PRIMARY KEY)")
        self.bulk_insert(name, ("k",), ((k,) for k in set(keys)))


_SIDE_FILES = ("-wal", "-shm", "-journal")  # SQLite's own files beside a database


def sqlite_side_files(path: str) -> set[str]:
    """The suffixes of SQLite's files that are beside ``path`` now (``remove_made_files``
    leaves them alone)."""
    return {s for s in _SIDE_FILES if os.path.lexists(path + s)}


def remove_made_files(path: str, before: set[str]) -> None:
    """Remove a database this call created and SQLite's files beside it, except those that
    were there before it (``sqlite_side_files``): a failed creation leaves nothing it made and
    deletes nothing it did not."""
    for suffix in ("", *_SIDE_FILES):
        if suffix not in before:
            with contextlib.suppress(OSError):
                os.unlink(path + suffix)


def _refuse_other_databases(path: str) -> None:
    """Refuse, before anything writes to it, a file that is not a ledger (an empty file,
    another program's SQLite database): opening it as the ledger would switch it to WAL
    mode or give it a header.  Read-only: the file is not changed."""
    from pathlib import Path

    try:
        probe = sqlite3.connect(Path(path).absolute().as_uri() + "?mode=ro", uri=True)
        try:
            probe.execute("SELECT value FROM ledger_meta WHERE name = 'format'").fetchone()
        finally:
            probe.close()
    except sqlite3.Error:
        raise LedgerError("the database is not a postcode-privacy ledger") from None


class SqliteStore(Store):
    kind = "sqlite"
    database_errors = (sqlite3.DatabaseError,)
    without_rowid = " WITHOUT ROWID"

    def __init__(self, path: str, create: bool):
        refuse_directory_path(path, "ledger")
        if create:
            if os.path.exists(path):
                raise LedgerError("a ledger (or another file) already exists at that path")
        elif not os.path.isfile(path):
            raise InvalidParameterError(
                "no ledger at that path; create one with `postcode-privacy ledger init`"
            )
        self.location = path
        before = sqlite_side_files(path)  # a failure here must not delete them
        if not create:
            _refuse_other_databases(path)
        if create:
            # Owner-only from its creation (SQLite gives its journal and WAL files the
            # database's mode): a chmod after connecting would leave a moment in which
            # another user could open the file and keep reading it.
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            except FileExistsError:
                raise OutputExistsError(
                    "a ledger (or another file) already exists at that path; refusing to "
                    "overwrite it"
                ) from None
            except OSError as exc:
                raise LedgerError(
                    f"cannot create the ledger: {exc.strerror or type(exc).__name__}"
                ) from None
        # isolation_level=None: transactions are begun explicitly (BEGIN IMMEDIATE for writers).
        self.conn = sqlite3.connect(path, timeout=_BUSY_TIMEOUT_S, isolation_level=None)
        try:
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=FULL")
            self.conn.execute("PRAGMA temp_store=MEMORY")
            # Digests are random keys, so inserts touch pages all over the indexes: a page
            # cache of up to 256 MiB (used only as needed) halves the time to record a large
            # release.
            self.conn.execute("PRAGMA cache_size=-262144")
        except sqlite3.Error as exc:  # e.g. a name leaving no room for SQLite's own files
            self.conn.close()
            if create:
                remove_made_files(path, before)
            doing = "create" if create else "open"
            raise LedgerError(f"cannot {doing} the ledger: {exc}") from None

    def execute(self, sql, params=()):
        return self.conn.execute(sql, params)

    def close(self):
        self.conn.close()

    def bulk_insert(self, table, columns, rows):
        marks = ", ".join("?" for _ in columns)
        self.conn.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", rows)

    def insert_new(self, table, columns, rows):
        before = self.conn.total_changes
        marks = ", ".join("?" for _ in columns)
        self.conn.executemany(
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks}) ON CONFLICT DO NOTHING",
            rows,
        )
        return self.conn.total_changes - before

    @contextlib.contextmanager
    def write(self):
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    @contextlib.contextmanager
    def read(self):
        self.conn.execute("BEGIN")
        try:
            yield
        finally:
            self.conn.execute("ROLLBACK")

    def has_schema(self):
        return bool(self.query("SELECT 1 FROM sqlite_master WHERE name = 'ledger_meta'"))


class PostgresStore(Store):
    kind = "postgresql"
    blob = "BYTEA"

    def __init__(self, url: str, create: bool):
        try:
            import psycopg
        except ImportError:
            raise InvalidParameterError(
                "a PostgreSQL ledger needs the psycopg driver: "
                "pip install 'postcode-privacy[ledger-postgres]'"
            ) from None
        self.location = url
        try:
            self.conn = psycopg.connect(url, autocommit=True)
        except psycopg.Error as exc:
            # The driver's message can contain the URL (and so a password): never echo it.
            raise LedgerError(
                f"cannot connect to the PostgreSQL ledger ({type(exc).__name__})"
            ) from None
        self._psycopg = psycopg
        self.database_errors = (psycopg.DatabaseError,)
        if create and self.has_schema():
            raise OutputExistsError(
                "that database already holds a ledger; refusing to overwrite it"
            )
        if not create and not self.has_schema():
            raise InvalidParameterError(
                "that database holds no ledger; create one with `postcode-privacy ledger init`"
            )

    def execute(self, sql, params=()):
        return self.conn.execute(sql.replace("?", "%s"), params)

    def close(self):
        self.conn.close()

    def bulk_insert(self, table, columns, rows):
        with self.conn.cursor().copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)

    def insert_new(self, table, columns, rows):
        # COPY cannot skip conflicts: copy into a temporary table, then insert from it.
        self.execute("DROP TABLE IF EXISTS incoming")
        self.execute(f"CREATE TEMPORARY TABLE incoming (LIKE {table})")
        self.bulk_insert("incoming", columns, rows)
        names = ", ".join(columns)
        cursor = self.execute(
            f"INSERT INTO {table} ({names}) SELECT {names} FROM incoming ON CONFLICT DO NOTHING"
        )
        count = cursor.rowcount
        self.execute("DROP TABLE incoming")
        return count

    @contextlib.contextmanager
    def write(self):
        with self.conn.transaction():
            self.execute("SELECT pg_advisory_xact_lock(?)", (_PG_LOCK_ID,))
            yield

    @contextlib.contextmanager
    def read(self):
        self.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        try:
            yield
        finally:
            self.execute("ROLLBACK")

    def load_keys(self, name, keys):
        # ANALYZE after loading, so that the planner joins on the index rather than scanning.
        self.execute(f"DROP TABLE IF EXISTS {name}")
        self.execute(f"CREATE TEMPORARY TABLE {name} (k BYTEA PRIMARY KEY)")
        self.bulk_insert(name, ("k",), ((k,) for k in set(keys)))
        self.execute(f"ANALYZE {name}")

    def has_schema(self):
        return bool(self.query("SELECT to_regclass('ledger_meta') IS NOT NULL")[0][0])


def open_store(location: str, *, create: bool = False) -> Store:
    """Connect to the ledger at ``location``: a PostgreSQL URL or a SQLite file path."""
    if not isinstance(location, str) or not location:
        raise InvalidParameterError("the ledger must be a file path or a postgresql:// URL")
    if is_url(location):
        return PostgresStore(location, create)
    if "://" in location:
        raise InvalidParameterError("a ledger URL must start with postgresql://")
    return SqliteStore(location, create)
