"""A ledger in a PostgreSQL database (``stores.Store`` says what it answers).

One writer at a time holds a transaction-scoped advisory lock; bulk loads use ``COPY``; a
SQLSTATE that describes the server's surroundings becomes one message saying so, classified by
code, never by message text (docs/ledger.md, "When something goes wrong").
"""

from __future__ import annotations

import contextlib
import logging

from ..errors import InvalidParameterError, OutputExistsError
from .errors import LedgerBusy, LedgerError
from .stores import WRITE_LOCK_NOTICE_S, WRITE_LOCK_WAIT_S, Store, say_waiting

__all__ = ["PostgresStore"]

_PG_LOCK_ID = 0x7070_6C65_6467_6572  # advisory lock key ("ppledger"): one writer at a time

# PostgreSQL SQLSTATEs (and classes, their first two characters) that describe the
# surroundings; every other one (42P01 a table missing, 22xxx a value, XX001 corruption, ...)
# is about the contents.
_PG_STATES = {
    "42501": (
        "the PostgreSQL role lacks a privilege the ledger needs on its tables (it needs "
        "SELECT, INSERT, UPDATE and DELETE on all its tables, and CREATE on its schema to "
        "settle a release by hand in a ledger made by an earlier version)"
    ),
    "25006": "the PostgreSQL server accepts only read-only transactions (a standby?)",
    "55P03": "another process kept it locked for too long",  # (the writers' lock: ten minutes)
}
_PG_CLASSES = {
    "08": "the connection to the PostgreSQL server failed",
    "53": "the PostgreSQL server is out of resources (disk, memory or connections)",
    "57": "the PostgreSQL server ended the session or cancelled the statement",
    "58": "the PostgreSQL server reported a system error (an I/O error?)",
    "40": "the PostgreSQL server rolled the transaction back (a serialization failure)",
    "55": "an object of the ledger was locked or busy on the PostgreSQL server",
}


# What libpq says when a connection fails, in words that never quote the message: libpq's
# messages can quote the URL, and so a password.  First match wins.
_CONNECT_FAILURES = [
    (('FATAL:  database "', "does not exist"), "that database does not exist on the server"),
    (('FATAL:  role "', "does not exist"), "the server has no such user (role)"),
    (("password authentication failed",), "the server refused the password"),
    (("no password supplied",), "the server asks for a password, and none was given"),
    (("pg_hba.conf",), "the server does not accept this user or client (its pg_hba.conf)"),
    (("starting up",), "the server is starting up; try again in a moment"),
    (("shutting down",), "the server is shutting down"),
    (("too many",), "the server has too many connections"),
    (("translate host name",), "the host name in the URL is not known"),  # (libpq's words)
    (("failed to resolve host",), "the host name in the URL is not known"),  # (psycopg's)
    (("Connection refused",), "no server answered at that host and port (is it running?)"),
    (("timeout expired",), "the server did not answer in time"),
]


def _connect_failure(psycopg, exc: BaseException) -> str:
    """Why a connection failed, in plain words and never quoting the driver's message
    (``_CONNECT_FAILURES``), where the class name of the error said the same for all of
    them (a hostile review)."""
    if isinstance(exc, psycopg.ProgrammingError):
        return "the URL is not a valid PostgreSQL connection address (an unknown option?)"
    text = str(exc)
    for needles, reason in _CONNECT_FAILURES:
        if all(needle in text for needle in needles):
            return reason
    return "the connection failed (check the URL's host, port, database and user)"


def _quiet_driver_log() -> None:
    """Give psycopg's logger a handler that drops its records, so that with no logging set up
    Python's last-resort handler does not print them: a rollback psycopg gives up on while a
    stop signal lands ("error ignored in rollback of ... (host=... user=... database=...)")
    reached stderr, naming the server (a hostile review; docs/ledger.md, "When something goes
    wrong").  Records still reach any handler a program embedding the library sets up."""
    logger = logging.getLogger("psycopg")
    if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
        logger.addHandler(logging.NullHandler())


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
        _quiet_driver_log()
        self.location = url
        try:
            self.conn = psycopg.connect(url, autocommit=True)
        except psycopg.Error as exc:
            raise LedgerError(
                f"cannot connect to the PostgreSQL ledger: {_connect_failure(psycopg, exc)}"
            ) from None
        self._psycopg = psycopg
        self.database_errors = (psycopg.Error,)
        try:
            if create and self.has_schema():
                raise OutputExistsError(
                    "that database already holds a ledger; refusing to overwrite it"
                )
            if not create and not self.has_schema():
                raise InvalidParameterError(
                    "that database holds no ledger; create one with `postcode-privacy ledger init`"
                )
        except BaseException:
            self.close()
            raise

    def surroundings(self, exc):
        psycopg = self._psycopg
        state = getattr(exc, "sqlstate", None)
        if not state:
            # Raised by the driver itself: a connection lost or closed, never the contents.
            if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
                return "the connection to the PostgreSQL server was lost"
            return None
        reason = _PG_STATES.get(state) or _PG_CLASSES.get(state[:2])
        return None if reason is None else f"{reason} (SQLSTATE {state})"

    def _execute(self, sql, params=()):
        return self.conn.execute(sql.replace("?", "%s"), params)

    def close(self):
        with contextlib.suppress(self._psycopg.Error):
            self.conn.close()

    def _bulk_insert(self, table, columns, rows):
        with self.conn.cursor().copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)

    def _insert_new(self, table, columns, rows):
        # COPY cannot skip conflicts: copy into a temporary table, then insert from it.
        self._execute("DROP TABLE IF EXISTS incoming")
        self._execute(f"CREATE TEMPORARY TABLE incoming (LIKE {table})")
        self._bulk_insert("incoming", columns, rows)
        names = ", ".join(columns)
        cursor = self._execute(
            f"INSERT INTO {table} ({names}) SELECT {names} FROM incoming ON CONFLICT DO NOTHING"
        )
        count = cursor.rowcount
        self._execute("DROP TABLE incoming")
        return count

    @contextlib.contextmanager
    def _write(self, *, wait: bool):
        with self.conn.transaction():
            # Read committed whatever the server's default: each statement after the lock must
            # see what the writer before it committed (the next release number, the spends a
            # budget is checked against).  Under a database's default of repeatable read the
            # snapshot was taken by the lock's own statement, before that writer had finished.
            self._execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
            if wait:
                self._wait_for_the_lock()
            elif not self._execute(
                "SELECT pg_try_advisory_xact_lock(?)", (_PG_LOCK_ID,)
            ).fetchone()[0]:
                raise LedgerBusy()
            yield

    def _wait_for_the_lock(self) -> None:
        """Take the writers' advisory lock, waiting as SQLite's writers do: up to
        ``WRITE_LOCK_WAIT_S``, saying so once after ``WRITE_LOCK_NOTICE_S`` on the command line
        (it waited without limit and without a word: a hostile review).  Each try runs in a
        savepoint, so that a timed-out one leaves the transaction usable, and ``lock_timeout``
        is this transaction's only while the lock is awaited."""
        tries = ((WRITE_LOCK_NOTICE_S, False), (WRITE_LOCK_WAIT_S - WRITE_LOCK_NOTICE_S, True))
        for seconds, last in tries:
            try:
                with self.conn.transaction():
                    self._execute(f"SET LOCAL lock_timeout = '{int(seconds * 1000)}ms'")
                    self._execute("SELECT pg_advisory_xact_lock(?)", (_PG_LOCK_ID,))
                break
            except self._psycopg.errors.LockNotAvailable:
                if last:
                    raise
                say_waiting()
        self._execute("SET LOCAL lock_timeout = DEFAULT")

    @contextlib.contextmanager
    def _read(self):
        self._execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        try:
            yield
        finally:
            with contextlib.suppress(self._psycopg.Error):
                self._execute("ROLLBACK")

    def load_keys(self, name, keys):
        # ANALYZE after loading, so that the planner joins on the index rather than scanning.
        self.execute(f"DROP TABLE IF EXISTS {name}")
        self.execute(f"CREATE TEMPORARY TABLE {name} (k BYTEA PRIMARY KEY)")
        self.bulk_insert(name, ("k",), ((k,) for k in set(keys)))
        self.execute(f"ANALYZE {name}")

    def has_schema(self):
        return bool(self.query("SELECT to_regclass('ledger_meta') IS NOT NULL")[0][0])
