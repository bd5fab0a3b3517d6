"""A ledger in a SQLite file: the default backend (``stores.Store`` says what it answers).

Besides the SQL, a file needs care a server does not: a new ledger is created only where
nothing else is (never over another file, nor beside SQLite files a database left), read-only
media and mounts are read without writing SQLite's files beside it, and SQLite's result codes
that describe the file's surroundings become one message saying so (docs/ledger.md, "When
something goes wrong").
"""

from __future__ import annotations

import collections
import contextlib
import errno
import os
import re
import secrets
import sqlite3
import time
from pathlib import Path

from .._signal_holds import signals_deferred
from ..atomic import refuse_directory_path
from ..errors import InvalidParameterError, OutputExistsError, PostcodePrivacyError
from .errors import LedgerBusy, LedgerDamagedError, LedgerError
from .stores import LEDGER_FORMAT, WRITE_LOCK_NOTICE_S, WRITE_LOCK_WAIT_S, Store, say_waiting

__all__ = ["SqliteStore", "refuse_unusable_new_path", "sqlite_is_writable"]

_BUSY_TIMEOUT_S = WRITE_LOCK_WAIT_S
# While waiting for the write lock, SQLite sleeps in C for at most this long at a time, then
# Python checks for a stop signal (``_begin_immediate``): a wait inside SQLite's own busy
# handler runs no Python signal handler, so Ctrl-C and SIGTERM waited for the lock.
_LOCK_SLICE_MS = 200

_SIDE_FILES = ("-wal", "-shm", "-journal")  # SQLite's own files beside a database
_SQLITE_HEADER = b"SQLite format 3\x00"

# SQLite primary result codes (the low byte of an extended code) that describe the ledger's
# surroundings.  Every other code (SQLITE_CORRUPT, SQLITE_NOTADB, SQLITE_ERROR for a table or
# column missing, ...) is about its contents.
_SQLITE_SURROUNDINGS = {
    sqlite3.SQLITE_FULL: "its disk is full",
    sqlite3.SQLITE_IOERR: "reading or writing its disk failed (an I/O error, or a full disk)",
    sqlite3.SQLITE_READONLY: (
        "it cannot be written here (a read-only file, directory or file system)"
    ),
    sqlite3.SQLITE_CANTOPEN: (
        "its file, or SQLite's -wal and -shm files beside it, cannot be opened or created "
        "(check the permissions of the file and its directory, and that the file system "
        "is not read-only)"
    ),
    sqlite3.SQLITE_PERM: "the operating system denied access to it",
    sqlite3.SQLITE_BUSY: "another process kept it locked for too long",
    sqlite3.SQLITE_LOCKED: "another process kept it locked for too long",
    sqlite3.SQLITE_NOMEM: "out of memory",
    sqlite3.SQLITE_NOLFS: "its file system cannot hold a file this large",
    sqlite3.SQLITE_PROTOCOL: "its file locks failed (is it on a network file system?)",
    sqlite3.SQLITE_AUTH: "access to it was denied",
}


def _sqlite_code_name(exc: BaseException) -> str:
    name = getattr(exc, "sqlite_errorname", None)
    return f" ({name})" if name else ""


def sqlite_surroundings(exc: BaseException) -> str | None:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:
        return None
    reason = _SQLITE_SURROUNDINGS.get(code & 0xFF)
    return None if reason is None else reason + _sqlite_code_name(exc)


def sqlite_side_files(path: str) -> set[str]:
    """The suffixes of SQLite's files that are beside ``path`` now."""
    return {s for s in _SIDE_FILES if os.path.lexists(path + s)}


def remove_made_files(path: str, before: set[str]) -> None:
    """Remove a database this call created and SQLite's files beside it, except those that
    were there before it (``sqlite_side_files``): a failed creation leaves nothing it made and
    deletes nothing it did not."""
    for suffix in ("", *_SIDE_FILES):
        if suffix not in before:
            with contextlib.suppress(OSError):
                os.unlink(path + suffix)


# The files (device, inode) of the ledgers this process holds open with SQLite's locks
# (read-write, or read-only following writers).  Closing any descriptor of a file drops every
# POSIX lock this process holds on it, SQLite's included, after which another process may take
# itself for the file's last user and delete the -wal under this one: so no file of such a
# ledger is opened here outside SQLite (``_starts_like_sqlite``, ``_FrozenView``).
_HELD_WITH_LOCKS: collections.Counter[tuple[int, int]] = collections.Counter()


def _file_key(path: str) -> tuple[int, int]:
    """The file's identity (device, inode), the same under every name it has."""
    found = os.stat(path)
    return found.st_dev, found.st_ino


def _held_with_locks(path: str) -> bool:
    try:
        return _HELD_WITH_LOCKS[_file_key(path)] > 0
    except OSError:
        return False


def _cannot_make_files_beside(path: str) -> bool:
    """Whether this process cannot make SQLite's -shm file beside ``path``: a read-only file
    system (or read-only view of one), or one whose free blocks are all taken or reserved for
    root.  (A file system that reports no blocks at all, like an unlimited tmpfs, is not
    full.)  Others may still write there: ``_FrozenView`` checks that nothing did."""
    try:
        found = os.statvfs(os.path.dirname(os.path.abspath(path)))
    except (OSError, AttributeError):
        return False
    return bool(found.f_flag & os.ST_RDONLY) or (found.f_blocks > 0 and found.f_bavail == 0)


def _stat_of(name: str) -> tuple[int, int, int, int] | None:
    """What a write changes in a file: inode, size, modification and change times."""
    try:
        found = os.stat(name)
    except OSError:
        return None
    return found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns


def _must_read_immutable(path: str, *, wal: tuple | None, shm: tuple | None) -> bool:
    """Whether a reader must open ``path`` immutable, given its -wal and -shm (``_stat_of``):
    no -wal holds pages the file lacks, and SQLite's read-only mode could not make a -shm here
    (``_cannot_make_files_beside``, a directory this process may not write) or must not (none
    is there, beside a file this process may not write)."""
    no_shm_may_be_made = not os.access(os.path.dirname(path), os.W_OK) or (
        shm is None and not os.access(path, os.W_OK)
    )
    return not (wal and wal[1] > 0) and (_cannot_make_files_beside(path) or no_shm_may_be_made)


class _FrozenView:
    """What a writer changes in a ledger's files, taken when it was opened ``immutable``
    (which reads the file as it is, with no lock and no -wal): before every read returns, the
    files must be as they were, or what was read may mix two states of the ledger, or miss
    releases recorded meanwhile (docs/ledger.md, "Read-only media")."""

    def __init__(self, path: str):
        self.path = path
        self.state = self._state()
        # Decided once, from this very snapshot: a -wal emptied after it is a change.
        self.immutable = _must_read_immutable(path, wal=self.state[1], shm=self.state[2])

    def _state(self) -> tuple:
        return (
            _stat_of(self.path),
            *(_stat_of(self.path + s) for s in _SIDE_FILES),
            self._header(),
        )

    def _header(self) -> bytes | None:
        """The file's first 100 bytes (its change counter, page count and schema cookie), when
        reading them cannot drop this process's SQLite locks (``_HELD_WITH_LOCKS``)."""
        if _held_with_locks(self.path):
            return None
        try:
            with open(self.path, "rb") as handle:
                return handle.read(100)
        except OSError:
            return b""

    @staticmethod
    def _written(state: tuple) -> tuple:
        """What of a ``_state`` only a write changes.  The -shm is left out: readers update it
        too.  So is a -wal or a journal that is absent or empty, as another reader's writable
        attempt on a full disk leaves them; a release recorded meanwhile grows the -wal, or
        changes the file itself."""
        file, wal, _shm, journal, header = state
        present = tuple(side if side and side[1] > 0 else None for side in (wal, journal))
        return (file, *present, header)

    def check(self) -> None:
        now, then = self._written(self._state()), self._written(self.state)
        if None in (now[-1], then[-1]):  # a header not read: compare the rest
            now, then = now[:-1], then[:-1]
        if now != then:
            raise LedgerError(
                "the ledger's files changed while it was being read: another process wrote "
                "or opened it, and a ledger that cannot be written here is read without "
                "following other processes; run the command again when no other process "
                "uses it, or where it can be written"
            )


def sqlite_is_writable(path: str) -> bool:
    """Whether this process may write the ledger's file and create SQLite's files beside it
    (a read-only file system, or a file or directory without write permission, is not)."""
    path = os.path.realpath(path)  # SQLite's -wal and -shm go beside the link's target
    return os.access(path, os.W_OK) and os.access(os.path.dirname(path), os.W_OK)


def _uri(path: str, **params: str) -> str:
    # as_uri() percent-encodes "?" and "#", so a file name holding them is not a parameter.
    return Path(path).absolute().as_uri() + "?" + "&".join(f"{k}={v}" for k, v in params.items())


def _connect_read_only(
    path: str, *, probe: bool = False, immutable: bool = False, timeout: float = 5.0
) -> sqlite3.Connection:
    """A read-only connection.

    SQLite reads a WAL-mode database through its -shm file, which even a read-only connection
    creates when it is missing (and leaves behind).  ``immutable`` opens it with no file
    created and no lock taken, which is what a reader that cannot make the -shm file must use
    (``_must_read_immutable``); as others may still write it (through a writable view of the
    same files, or once space is freed), every read then checks that they did not
    (``_FrozenView.check``).  A ``probe`` (is this another program's database?) must create
    nothing beside a file that may not be ours, so it is immutable too where a reader's would
    be, and whenever neither -wal nor -shm is there: the file then holds every committed page,
    and a writer starting meanwhile could at worst make the probe see a page half written,
    which refuses the file, never accepts another one."""
    present = sqlite_side_files(path)
    if probe and not immutable:  # (as a reader would, or with nothing beside the file)
        immutable = not {"-wal", "-shm"} & present or _must_read_immutable(
            path, wal=_stat_of(path + "-wal"), shm=_stat_of(path + "-shm")
        )
    if immutable:
        params = {"immutable": "1"}
    else:
        params = {"mode": "ro"}
    return sqlite3.connect(_uri(path, **params), uri=True, timeout=timeout, isolation_level=None)


def _starts_like_sqlite(path: str) -> bool:
    if _held_with_locks(path):
        return True  # open in this process already, so SQLite took it (and holds its locks)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return True  # let SQLite say why it cannot open it
    try:
        return os.read(fd, len(_SQLITE_HEADER)) == _SQLITE_HEADER
    except OSError:
        return True
    finally:
        os.close(fd)


def _refuse_other_names(path: str) -> None:
    """SQLite keeps a ledger's -wal beside the name it was opened by: a command using another
    name of the same file (a hard link, or the file bind-mounted on its own elsewhere, as a
    container's ``-v ledger.db:/ledger.db`` does) would not see that -wal, and so could miss
    releases, or record its own beside the other name.  (docs/ledger.md, "Read-only media")"""
    found = os.stat(path)
    if found.st_nlink > 1:
        leftovers = _init_leftovers(path, found)
        if leftovers:
            raise LedgerError(
                f"an interrupted `ledger init` left a second name of the ledger, {leftovers[0]}, "
                "beside it; delete that file"
            )
        raise LedgerError(
            "the ledger's file has another name (a hard link): SQLite keeps its write-ahead "
            "log beside the name it was opened by, so a command using the other name could "
            "miss releases; remove the other name, or use a copy of the ledger"
        )
    if _is_mounted_on_its_own(path):
        raise LedgerError(
            "the ledger's file is mounted on its own (a bind mount of the file): SQLite keeps "
            "its write-ahead log beside the name it was opened by, so this name could miss "
            "releases; mount the ledger's directory instead"
        )


def _init_leftovers(path: str, found: os.stat_result) -> list[str]:
    """The temporary names an interrupted ``ledger init`` left for the ledger's file."""
    directory = os.path.dirname(path)
    names = []
    try:
        candidates = sorted(os.listdir(directory))
    except OSError:  # (a directory this process may enter but not list)
        return []
    for name in candidates:
        if name.startswith(".ledger-") and name.endswith(".tmp"):
            try:
                if os.stat(os.path.join(directory, name)).st_ino == found.st_ino:
                    names.append(name)
            except OSError:  # (gone meanwhile, or a dangling link)
                continue
    return names


def _mount_id(path: str) -> int | None:
    """The id of the mount ``path`` lies on (Linux; None where it cannot be told).  Opened
    with O_PATH: closing such a descriptor does not drop this process's POSIX locks."""
    flag = getattr(os, "O_PATH", None)
    if flag is None:
        return None
    try:
        fd = os.open(path, flag)
    except OSError:
        return None
    try:
        with open(f"/proc/self/fdinfo/{fd}", "rb") as info:
            for line in info:
                if line.startswith(b"mnt_id:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    finally:
        os.close(fd)
    return None


def _mount_entry(mount_id: int) -> tuple[bytes, bytes, bytes] | None:
    """(device, root within it, mount point) of a mount, from /proc/self/mountinfo (bytes:
    a path need not be UTF-8; octal escapes such as \\040 undone)."""
    try:
        with open("/proc/self/mountinfo", "rb") as table:
            for line in table:
                fields = line.split(b" ")
                if len(fields) > 4 and fields[0] == str(mount_id).encode():
                    return fields[2], _unescaped(fields[3]), _unescaped(fields[4])
    except OSError:
        pass
    return None


def _unescaped(text: bytes) -> bytes:
    return re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8)]), text)


def _is_mounted_on_its_own(path: str) -> bool:
    """Whether the file at ``path`` (a real path) is a mount of its own, so that its name is
    not where the file's other names keep the -wal (``docker -v /data/L.db:/L.db``).  A file
    bound onto its very own path (``mount --bind f f``, systemd's ``ReadOnlyPaths=``) is not:
    its name, directory and -wal are the same.  Mounts are told apart by id, not by device
    (an overlay reports its layers' devices)."""
    own, parent = _mount_id(path), _mount_id(os.path.dirname(path))
    if own is None or parent is None or own == parent:
        return False
    mine, theirs = _mount_entry(own), _mount_entry(parent)
    if mine is None or theirs is None:
        return True
    relative = os.path.relpath(path, os.fsdecode(theirs[2]))
    same_place = os.path.normpath(os.path.join(os.fsdecode(theirs[1]), relative))
    return not (mine[0] == theirs[0] and os.fsdecode(mine[1]) == same_place)


def _refuse_other_databases(path: str) -> None:
    """Refuse, before anything writes to it, a file that is not a ledger (an empty file,
    another program's SQLite database, one with a ``ledger_meta`` table of its own): opening
    it as the ledger would switch it to WAL mode or give it a header.  Nothing is written and
    no file is created beside it (``_connect_read_only``).

    A SQLite file SQLite finds damaged (cut short, a page or its header overwritten) is not
    "some other file", whose remedy would be another path: it is refused as a damaged ledger,
    whose remedy is a backup.  The probe may have caught a page half written by a writer that
    started meanwhile (``_connect_read_only``), so only a second probe, once that writer has
    had time to finish, calls the ledger damaged."""
    if not _starts_like_sqlite(path):
        raise LedgerError("the database is not a postcode-privacy ledger")
    for attempt in range(2):
        found = _probe_ledger(path)
        if found not in ("damaged", "unreadable"):
            break
        if attempt == 0:
            time.sleep(_DAMAGE_RECHECK_S)
    if found == "damaged":
        raise LedgerDamagedError(
            "the ledger is damaged: SQLite finds its file corrupt, as a file cut short or "
            "partly overwritten is; restore it from a backup"
        )
    if found == "unreadable":
        raise LedgerError(
            "the database is not a postcode-privacy ledger, or is one whose header is damaged: "
            "SQLite cannot read it as a database (SQLITE_NOTADB); check the ledger's path, and "
            "if it is the ledger's, restore the ledger from a backup"
        )
    if found != "ledger":
        raise LedgerError("the database is not a postcode-privacy ledger")


_DAMAGE_RECHECK_S = 0.5  # a writer's checkpoint of a few pages is over well within this


def _probe_ledger(path: str) -> str:
    """What one probe finds at ``path``: "ledger"; "other", a database without this format's
    row; "damaged", SQLite's corruption code, or its quick check failing where the format row
    is missing (a damaged index can hide the row a scan still finds); or "unreadable", a file
    with SQLite's first bytes that SQLite cannot read.  A reason in the surroundings is
    raised."""
    try:
        probe = _connect_read_only(path, probe=True)
        try:
            row = probe.execute("SELECT value FROM ledger_meta WHERE name = 'format'").fetchone()
            if row is None:
                check = probe.execute("PRAGMA quick_check(1)").fetchone()[0]
                return "other" if check == "ok" else "damaged"
        finally:
            probe.close()
    except sqlite3.Error as exc:
        reason = sqlite_surroundings(exc)
        if reason is not None:
            raise LedgerError(f"cannot open the ledger: {reason}") from None
        code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
        if code == sqlite3.SQLITE_CORRUPT:
            return "damaged"
        # NOTADB despite SQLite's own first bytes (``_starts_like_sqlite``): a ledger whose
        # header is damaged, or another program's database (one encrypted but for its header)
        return "unreadable" if code == sqlite3.SQLITE_NOTADB else "other"
    return "ledger" if row[0] == LEDGER_FORMAT else "other"


def _name_max(directory: str) -> int:
    try:
        return int(os.pathconf(directory or ".", "PC_NAME_MAX"))
    except (OSError, ValueError, AttributeError):
        return 255


def refuse_unusable_new_path(path: str) -> None:
    """Before creating a SQLite ledger at ``path``: nothing there, none of SQLite's files
    beside it (a stale -wal would be read as part of the new database), and a name that
    leaves room for them."""
    refuse_directory_path(path, "ledger")
    if os.path.lexists(path):
        raise OutputExistsError(
            "a ledger (or another file) already exists at that path; refusing to overwrite it"
        )
    present = sqlite_side_files(path)
    if present:
        raise OutputExistsError(
            f"SQLite's files of another database are beside that path ({', '.join(sorted(present))} "
            "after its name); remove them or choose another name"
        )
    directory, name = os.path.split(path)
    longest = len(os.fsencode(name)) + len("-journal")
    if longest > _name_max(directory):
        raise InvalidParameterError(
            "cannot create the ledger: its file name is too long (SQLite needs room for "
            f"'-journal' after it: at most {_name_max(directory) - len('-journal')} bytes)"
        )


# What a path names wrongly (no such directory, not one, no right to write there, a name too
# long): the path's error, exit code 8, as every command's output path; anything else (a full
# disk) is the ledger's.
_PATH_ERRNOS = frozenset(
    {errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.EROFS, errno.ENAMETOOLONG}
)


def _creation_error(exc: OSError) -> PostcodePrivacyError:
    if exc.errno == errno.ENOENT:
        return InvalidParameterError("cannot create the ledger: its directory does not exist")
    message = f"cannot create the ledger: {exc.strerror or type(exc).__name__}"
    if exc.errno in _PATH_ERRNOS:
        return InvalidParameterError(message)
    return LedgerError(message)


class SqliteStore(Store):
    """A SQLite ledger.  ``create``: built at a temporary name beside ``path`` and moved into
    place by :meth:`publish`, so an interrupted creation never leaves a half-made ledger at
    ``path``.  ``read_only``: opened without writing anything, for reading commands on a
    ledger this process cannot write."""

    kind = "sqlite"
    database_errors = (sqlite3.Error,)
    without_rowid = " WITHOUT ROWID"
    # (any column takes any value here: a digest edited into text, a release into a string)
    byte_length = "length"
    mistyped_digest = "typeof({}) != 'blob'"
    mistyped_release = "typeof(release) != 'integer'"

    def __init__(self, path: str, create: bool, read_only: bool = False):
        self.location = path
        self.read_only = read_only
        self.building: str | None = None
        self.published = False
        self.frozen: _FrozenView | None = None
        self.held: tuple[int, int] | None = None  # the file, while in _HELD_WITH_LOCKS
        if create:
            self._create(path)
            return
        refuse_directory_path(path, "ledger")
        # ("create one" would be refused where something is there, of whatever kind)
        if os.path.isdir(path):
            raise InvalidParameterError("the ledger path is a directory, not a ledger file")
        if os.path.lexists(path) and not os.path.isfile(path):
            raise InvalidParameterError(
                "the ledger path holds no regular file (a pipe, a device or a link to nothing)"
            )
        if not os.path.isfile(path):
            raise InvalidParameterError(
                "no ledger at that path; create one with `postcode-privacy ledger init`"
            )
        # SQLite follows a link and keeps its -wal and -shm beside the real file, so every
        # check of the files beside the ledger (is a -wal there? is it read-only media?)
        # looks there too: a link with no -wal beside its own name must not be opened
        # immutable, which would ignore the pages in the real -wal.
        path = os.path.realpath(path)
        _refuse_other_names(path)
        _refuse_other_databases(path)
        if not read_only and not sqlite_is_writable(path):
            raise LedgerError(
                "cannot write to the ledger: it is on read-only media, or its file or its "
                "directory is not writable (`ledger show` and `ledger check` can still read it)"
            )
        with self._surroundings():
            if read_only:
                # Taken before connecting: a change from here on is caught.
                view = _FrozenView(path)
                self.conn = _connect_read_only(
                    path, immutable=view.immutable, timeout=_BUSY_TIMEOUT_S
                )
                self.frozen = view if view.immutable else None
            else:
                # isolation_level=None: transactions are begun explicitly (BEGIN IMMEDIATE).
                self.conn = sqlite3.connect(path, timeout=_BUSY_TIMEOUT_S, isolation_level=None)
        try:
            with self._surroundings():
                if not read_only:
                    self.conn.execute("PRAGMA journal_mode=WAL")
                self._tune()
        except BaseException:
            self.conn.close()
            raise
        if self.frozen is None:  # a connection with SQLite's locks
            self.held = _file_key(path)
            _HELD_WITH_LOCKS[self.held] += 1

    def _tune(self) -> None:
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.execute("PRAGMA temp_store=MEMORY")
        # Digests are random keys, so inserts touch pages all over the indexes: a page
        # cache of up to 256 MiB (used only as needed) halves the time to record a large
        # release.
        self.conn.execute("PRAGMA cache_size=-262144")

    def _create(self, path: str) -> None:
        refuse_unusable_new_path(path)
        self._doing = "create"
        directory = os.path.dirname(path)
        # A short fixed-length name, so SQLite's -journal beside it always fits.
        self.building = os.path.join(directory, f".ledger-{secrets.token_hex(8)}.tmp")
        # Owner-only from its creation (SQLite gives its journal and WAL files the
        # database's mode): a chmod after connecting would leave a moment in which
        # another user could open the file and keep reading it.
        try:
            # A stop between the creation and the ``try`` below would leave the empty file:
            # held until the clean-up is armed, then delivered.
            with signals_deferred():
                os.close(os.open(self.building, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except OSError as exc:
            raise _creation_error(exc) from None
        except BaseException:
            self.discard()
            raise
        try:
            with self._surroundings("create"):
                # The rollback journal while building: nothing but the database file is
                # left once the connection closes, so one rename moves the whole ledger.
                self.conn = sqlite3.connect(
                    self.building, timeout=_BUSY_TIMEOUT_S, isolation_level=None
                )
                self.conn.execute("PRAGMA journal_mode=DELETE")
                self._tune()
        except BaseException:
            self.discard()
            raise

    def publish(self) -> None:
        """Switch the built database to WAL, close it and move it to its path (never over a
        file that appeared there meanwhile)."""
        assert self.building is not None
        with self._surroundings("create"):
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.close()
        try:
            with open(self.building, "rb+") as handle:
                os.fsync(handle.fileno())
            os.link(self.building, self.location)
        except FileExistsError:
            raise OutputExistsError(
                "a ledger (or another file) appeared at that path while this one was being "
                "created; refusing to overwrite it"
            ) from None
        except OSError as exc:
            raise _creation_error(exc) from None
        # Held: a stop between the bookkeeping and the unlink would leave the built file as
        # a second name of the live ledger (which ``ledger show`` then refuses).
        with signals_deferred():
            built, self.building, self.published = self.building, None, True
            with contextlib.suppress(OSError):
                os.unlink(built)
        from ..atomic import fsync_directory

        fsync_directory(os.path.dirname(os.path.abspath(self.location)))

    def is_published(self) -> bool:
        """Whether the ledger is at its path: :meth:`publish` returned, or an interrupt came
        between its link and its bookkeeping (the path then names the very file built)."""
        if self.published:
            return True
        if self.building is None:
            return False
        try:
            return os.path.samefile(self.building, self.location)
        except OSError:
            return False

    def discard(self) -> None:
        """Remove a database being built (and SQLite's files beside it)."""
        with contextlib.suppress(sqlite3.Error, AttributeError):
            self.conn.close()
        if self.building is not None:
            remove_made_files(self.building, set())
            self.building = None

    def surroundings(self, exc):
        return sqlite_surroundings(exc)

    def check_unchanged(self):
        if self.frozen is not None:
            self.frozen.check()

    def cannot_write(self, exc):
        code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
        return code in (sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_READONLY)

    def _execute(self, sql, params=()):
        return self.conn.execute(sql, params)

    def close(self):
        if self.building is not None:
            self.discard()
            return
        self.conn.close()
        if self.held is not None:
            _HELD_WITH_LOCKS[self.held] -= 1
            self.held = None

    def _bulk_insert(self, table, columns, rows):
        marks = ", ".join("?" for _ in columns)
        self.conn.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", rows)

    def _insert_new(self, table, columns, rows):
        before = self.conn.total_changes
        marks = ", ".join("?" for _ in columns)
        self.conn.executemany(
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks}) ON CONFLICT DO NOTHING",
            rows,
        )
        return self.conn.total_changes - before

    @contextlib.contextmanager
    def _write(self, *, wait: bool):
        if self.conn.in_transaction:
            # (only a stop signal landing between BEGIN and the ``try`` below could have left
            # one open; its writes were never committed)
            self.conn.execute("ROLLBACK")
        try:
            # BEGIN inside the ``try``: a Ctrl-C the moment it returns must roll back too, or
            # the next write (settling this release on the way out) meets an open transaction
            self._begin_immediate(wait=wait)
            yield
        except BaseException:
            # SQLite may have rolled back already (a full disk does): the original error
            # is the one to report.
            with contextlib.suppress(sqlite3.Error):
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def _begin_immediate(self, *, wait: bool) -> None:
        """``BEGIN IMMEDIATE``, waiting up to ``_BUSY_TIMEOUT_S`` for another process's write
        lock in slices of ``_LOCK_SLICE_MS``, so that a stop signal ends the wait within a
        fraction of a second (a hostile review: Ctrl-C waited for the lock, silently).  A
        run of the CLI says on stderr that it is waiting, once.  Without ``wait``, one try."""
        deadline = time.monotonic() + (_BUSY_TIMEOUT_S if wait else 0)
        notice_at: float | None = time.monotonic() + WRITE_LOCK_NOTICE_S
        self.conn.execute(f"PRAGMA busy_timeout = {_LOCK_SLICE_MS}")
        try:
            while True:
                try:
                    self.conn.execute("BEGIN IMMEDIATE")
                    return
                except sqlite3.OperationalError as exc:
                    busy = getattr(exc, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_BUSY
                    now = time.monotonic()
                    if busy and not wait:
                        raise LedgerBusy() from None
                    if not busy or now >= deadline:
                        raise
                    if notice_at is not None and now >= notice_at:
                        notice_at = None
                        say_waiting()
        finally:
            self.conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_S * 1000}")

    @contextlib.contextmanager
    def _read(self):
        self.conn.execute("BEGIN")
        try:
            yield
        finally:
            with contextlib.suppress(sqlite3.Error):
                self.conn.execute("ROLLBACK")

    def has_schema(self):
        return bool(self.query("SELECT 1 FROM sqlite_master WHERE name = 'ledger_meta'"))
