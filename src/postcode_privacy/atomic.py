"""Files that appear whole or not at all, under names that one run at a time can claim.

Everything the library writes (artefacts, releases, manifests, reports) goes to a temporary file
beside its target, is flushed and fsynced, and only then moved into place: a reader, or a run
that is interrupted, sees the old file or the complete new one, never part.

Commands that write files a user names (``perturb``, ``report -o``, ``evaluate -o``,
``calibrate -o``) go one step further with :class:`OutputClaim` (docs/release.md, "Nothing is
lost"):

* the names are checked before any work: valid UTF-8, short enough for the file system together
  with the names derived from them, in an existing directory;
* an existing file is refused unless ``force``; a postcode-privacy key file or a SQLite
  database (a ledger) is never replaced, even with ``force``, nor is a file the run reads
  (``inputs``: a report's manifest, the graph artefact), named by any path or hard link;
* the claim holds an exclusive lock (``.NAME.lock``) from before the work until the files are in
  place, so two runs writing the same output cannot both go ahead: the second one is refused;
* the files of one claim (a release, its manifest, its audit file) are committed together, with
  SIGINT and SIGTERM held back until every rename is done, so a stop signal can never separate
  them; without ``force`` a name that appeared meanwhile is not replaced (``os.link``).
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import errno
import importlib.util
import json
import os
import secrets
import signal
import stat
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

from ._file_names import OUTPUT_NAME_NOT_UTF8, name_text
from ._interrupts import note_files_in_place, note_stop, stop_if_told
from .errors import InvalidParameterError, OutputExistsError, PostcodePrivacyError, option

# POSIX advisory locks (fcntl.flock) are released by the kernel when a process dies, even by
# SIGKILL.  Windows has no fcntl module and falls back to an exclusive lock file.
_HAVE_FLOCK = importlib.util.find_spec("fcntl") is not None
# The lock file is opened never through a link (which could make a run create or lock a file
# elsewhere) and never waiting (a pipe at its name would block the open, with stops held, for
# ever); whatever is opened must then be a plain file.
_LOCK_FLAGS = os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)

__all__ = [
    "TempFile",
    "OutputClaim",
    "LateSignalWarning",
    "atomic_output",
    "write_atomic",
    "fsync_directory",
    "is_key_file",
    "never_replaced",
    "WRITES_GRAPH",
    "WRITES_RELEASE",
    "refuse_directory_path",
    "same_file",
    "refuse_over_inputs",
    "signals_deferred",
]

# The first line of every postcode-privacy key file, whatever its version (mechanism/keys.py),
# and how much of a file to read for it: the key reader takes files of up to 4,096 bytes and
# skips white space before the line.
_KEY_FILE_TEXT = "postcode-privacy key file"
_KEY_FILE_HEAD = 4097
_SQLITE_PREFIX = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database
_NUMPY_PREFIX = b"\x93NUMPY"  # every .npy file
_GRAPH_PREFIX = b"POSTCODE-PRIVACY-GRAPH\x00"  # graph.artefact.MAGIC (a test compares)
# How much of a file is read to tell what it is: the largest file read whole to see whether it
# is a release's manifest or audit file (a JSON object whose "format" names it, in any layout
# ``report --manifest`` reads: a few kilobytes as written); larger files are none.
_DOCUMENT_LIMIT = 1 << 20
_RELEASE_DOCUMENTS = {
    "postcode-privacy-manifest": "a release's manifest",
    "postcode-privacy-audit": "a release's private audit file",
}
_TABLE_HEADERS = ("postcode-privacy-location-profiles/", "postcode-privacy-cluster-balls/")
# SQLite's files beside a database (its write-ahead log, its rollback journal: a hot one holds
# what a crash left to undo) and the side file ``build`` writes beside a graph artefact.
_SQLITE_SIDE_SUFFIXES = ("-wal", "-journal", "-shm")
_GRAPH_SIDECAR_SUFFIX = ".terminated.parquet"  # commands/build.py TERMINATED_SUFFIX
# Temporary names keep at most this many bytes of the target's name, so that a long (but
# valid) output name never makes its temporary file's name too long.
_TEMP_STEM_BYTES = 160


class LateSignalWarning(UserWarning):
    """A stop signal arrived while finished files were being moved into place; they were all
    moved, and the run is complete."""


def refuse_directory_path(
    path: str | os.PathLike, what: str = "output", error: type[Exception] = InvalidParameterError
) -> None:
    """Refuse a path that, as written, names a directory rather than a file: one that is
    empty, ends in a path separator (``out.csv/``) or ends in ``.`` or ``..``.  The check is on
    the text as given, before any :class:`~pathlib.Path` is made of it: pathlib drops a
    trailing separator and ``.`` components, so ``Path("out.csv/")`` would be ``out.csv``."""
    text = os.fsdecode(os.fspath(path))
    separators = os.sep + (os.altsep or "")
    last = text
    for separator in separators:
        last = last.rsplit(separator, 1)[-1]
    if last in ("", ".", ".."):
        raise error(f"the {what} path names a directory, not a file; give a file name")


def _temp_name(target: Path) -> str:
    stem = target.name
    while len(os.fsencode(stem)) > _TEMP_STEM_BYTES:
        stem = stem[:-1]
    return f".{stem}.{os.getpid()}.{secrets.token_hex(6)}.tmp"


def _squatted(path: Path) -> bool:
    """Something other than a plain file is at ``path`` (without following a link)."""
    try:
        return not stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


class TempFile:
    """A new file beside ``target``, created exclusively; moved into place or removed.

    ``private``: readable by the owner alone from the moment it exists.  The mode is given
    to the call that creates the file, not set afterwards: a chmod after creation leaves a
    moment in which another user can open the file and keep reading it through that handle
    once the mode changes."""

    def __init__(self, target: str | os.PathLike, private: bool = False):
        self.target = Path(target)
        self.path = self.target.with_name(_temp_name(self.target))
        mode = 0o600 if private else 0o666  # then narrowed by the umask, as any new file
        try:
            fd = os.open(
                self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), mode
            )
        except OSError as exc:
            raise InvalidParameterError(
                f"cannot write in the output directory: {exc.strerror or type(exc).__name__}"
            ) from None
        self.handle = os.fdopen(fd, "wb")

    def finish(self) -> None:
        """Flush and fsync; the file stays at its temporary name."""
        self.handle.flush()
        os.fsync(self.handle.fileno())
        self.handle.close()

    def commit(self) -> None:
        os.replace(self.path, self.target)

    def commit_new(self) -> None:
        """Move into place only if ``target`` does not exist (FileExistsError otherwise)."""
        try:
            os.link(self.path, self.target)
        except FileExistsError:
            raise
        except OSError:
            # A file system without hard links: the claim's lock and its checks still stand.
            if os.path.lexists(self.target):
                raise FileExistsError(self.target) from None
            os.replace(self.path, self.target)
            return
        os.unlink(self.path)

    def discard(self) -> None:
        try:
            if not self.handle.closed:
                self.handle.close()
        except OSError:
            pass
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def fsync_directory(directory: str | os.PathLike) -> None:
    """Make a rename durable where the platform allows opening a directory."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def is_key_file(path: str | os.PathLike) -> bool:
    """True if ``path`` is (or links to) a postcode-privacy key file: its text, past any
    leading white space (which the key reader skips too), starts with the key file's header."""
    return _starts_a_key_file(_head(path, _KEY_FILE_HEAD) or b"")


def _starts_a_key_file(data: bytes) -> bool:
    return data[:_KEY_FILE_HEAD].decode("latin-1").lstrip().startswith(_KEY_FILE_TEXT)


# What an output of each kind may replace, with --force, besides files of no kind below.
WRITES_RELEASE = "release"  # a release, its manifest and its audit file (perturb, demo)
WRITES_GRAPH = "graph"  # a graph artefact (build)


def never_replaced(path: str | os.PathLike, writes: str | None = None) -> str | None:
    """What ``path`` is, if it is a file an output that ``writes`` files of that kind (a
    ``WRITES_*`` constant, or None) may not replace even with ``force``, else None.

    Never replaced by anything: a key file, a SQLite database (a ledger, most likely), a NumPy
    array (the engine's cached tables), or no regular file at all (a pipe, a device such as
    ``/dev/null``, a socket: replacing one with a file, as root could, breaks whatever uses
    it).  Replaced only by an output of its own kind: a release, its manifest or its audit
    file (the audit cannot be made again without the input; ``report -o rel.csv --force``
    would leave a manifest describing a file that is gone), and a graph artefact (the
    national one is the package's cache)."""
    try:
        found = os.stat(path)  # (through a link: what a write would reach)
    except OSError:
        return None
    if not (stat.S_ISREG(found.st_mode) or stat.S_ISDIR(found.st_mode)):
        return "not a regular file (a pipe, a device or a socket)"
    name = os.fspath(path)
    head = _head(path, _DOCUMENT_LIMIT + 1) or b""  # (read once, for every test below)
    if _starts_a_key_file(head):
        return "a postcode-privacy key file"
    if head.startswith(_SQLITE_PREFIX):
        return "a SQLite database (a ledger?)"
    for suffix in _SQLITE_SIDE_SUFFIXES:
        if name.endswith(suffix) and (_head(name[: -len(suffix)], 16) or b"") == _SQLITE_PREFIX:
            return "one of SQLite's files beside a database (a ledger?)"
    if head.startswith(_NUMPY_PREFIX):
        return "a NumPy array file (the engine's cached tables?)"
    form = _document_format(head)
    if form.startswith(_TABLE_HEADERS):
        return "the header of one of the engine's cached tables"
    if writes != WRITES_GRAPH:
        if head.startswith(_GRAPH_PREFIX):
            return "a graph artefact"
        artefact = name.removesuffix(_GRAPH_SIDECAR_SUFFIX)
        if artefact != name and _head(artefact, len(_GRAPH_PREFIX)) == _GRAPH_PREFIX:
            return "the terminated postcodes build keeps beside a graph artefact"
    if writes != WRITES_RELEASE:
        if form in _RELEASE_DOCUMENTS:
            return _RELEASE_DOCUMENTS[form]
        beside = _head(f"{name}.manifest.json", _DOCUMENT_LIMIT + 1) or b""
        if _document_format(beside) == "postcode-privacy-manifest":
            return "a release (its manifest is beside it)"
    return None


def _document_format(data: bytes) -> str:
    """The "format" of the JSON object a file's first bytes ``data`` hold ("" if none, or if
    the file is larger than any such document), read as ``report --manifest`` reads a
    manifest: a byte-order mark, any white space and any order of keys allowed."""
    if len(data) > _DOCUMENT_LIMIT:
        return ""
    if not data.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{"):
        return ""  # (most files: no need to parse)
    try:
        document = json.loads(data.decode("utf-8-sig"))
    except (ValueError, RecursionError):
        return ""
    form = document.get("format") if isinstance(document, dict) else None
    return form if isinstance(form, str) else ""


def _head(path: str | os.PathLike, size: int) -> bytes | None:
    """The first ``size`` bytes of the regular file at ``path``, or None (anything else is
    never opened: opening a FIFO to read would wait for a writer forever)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        with open(path, "rb") as handle:
            return handle.read(size)
    except OSError:
        return None


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether ``a`` and ``b`` name one file: the same path once symbolic links are resolved
    (``b`` need not exist yet), or the same inode (a hard link)."""
    try:
        if os.path.realpath(a) == os.path.realpath(b):
            return True
    except (OSError, ValueError, RuntimeError):  # a symbolic link loop, a NUL in the name
        return False
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def refuse_over_inputs(
    targets: Iterable[str | os.PathLike], inputs: Mapping[str, str | os.PathLike | None]
) -> None:
    """Raise OutputExistsError if a target is one of ``inputs`` (by what each is: "the
    manifest") under any name (``same_file``): an input is never replaced, even with force."""
    for target in targets:
        for what, path in inputs.items():
            if path is not None and same_file(target, path):
                raise OutputExistsError(
                    f"the output {target} is {what} this run reads; an input is never "
                    f"replaced, even with {option('force')}: choose another output"
                )


def _name_max(directory: Path) -> int:
    try:
        return int(os.pathconf(directory, "PC_NAME_MAX"))
    except (OSError, ValueError, AttributeError):
        return 255


class _Hold:
    """SIGINT and SIGTERM replaced by a handler that calls ``on_arrival(signum)`` while the
    hold lasts.  Once :meth:`release` has begun, that handler passes a signal on to the one it
    replaced: a stop landing part-way through putting the handlers back (SIGINT's back,
    SIGTERM's not yet) would otherwise leave a handler that swallows every later SIGTERM."""

    def __init__(self, on_arrival: Callable[[int], None]):
        self.on_arrival = on_arrival
        self.previous: dict = {}
        self.released = False

    def handle(self, signum, frame) -> None:
        if not self.released:
            self.on_arrival(signum)
            return
        original = self.previous.get(signum, signal.SIG_DFL)
        if callable(original):
            original(signum, frame)
        elif original == signal.SIG_DFL:
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)

    def take(self) -> None:
        for signum in (signal.SIGINT, signal.SIGTERM):
            self.previous[signum] = signal.signal(signum, self.handle)

    def release(self) -> None:
        self.released = True
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def _signals_held():
    """Hold SIGINT and SIGTERM until the block ends; yields the list of signals that arrived.

    Python runs signal handlers between bytecodes of the main thread, so replacing the handlers
    by ones that only take note is enough: nothing can interrupt the block part-way.
    """
    arrived: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield arrived  # signals are only ever handled in the main thread
        return

    def note(signum: int) -> None:
        arrived.append(signum)
        note_stop()  # the signals of the same burst after the renames are part of this stop

    hold = _Hold(note)
    try:
        hold.take()
        yield arrived
    finally:
        hold.release()


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM until the block ends, then deliver the first that arrived to
    the handler that was in place: for a few renames that must happen together (a cache's
    files), in a run that is not over when they are done, so the stop still stops it."""
    arrived: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    hold = _Hold(arrived.append)
    try:
        hold.take()
        yield
    finally:
        hold.release()
    if arrived:
        signal.raise_signal(arrived[0])


_CLAIMS: contextvars.ContextVar[tuple[OutputClaim, ...]] = contextvars.ContextVar(
    "postcode_privacy_claims", default=()
)

# Every claim holding its lock in this process, by id.  Python may raise a KeyboardInterrupt
# on entering any function, ``__exit__`` included, and a stop that lands there skips the whole
# clean-up: a hostile test stopping runs within milliseconds of their final renames left the
# lock file behind in a third of them (and before a commit it would leave temporary files).
# So the process's exit cleans up after every claim still here (``_clean_up_left_claims``).
_LOCKED: dict[int, OutputClaim] = {}


@atexit.register
def _clean_up_left_claims() -> None:
    """At exit (also the command line's, which runs the exit handlers: ``cli``), remove what a
    claim whose ``__exit__`` never ran left: its temporary files and its lock.  A forked
    worker has a copy of the table and must leave its parent's files alone."""
    for claim in list(_LOCKED.values()):
        if claim._owner == os.getpid():
            claim._token = None  # (the claims' context variable ends with the process)
            claim._clean_up()


class OutputClaim:
    """An exclusive claim on one or more output files in one directory (see the module doc).

    Use as a context manager around the whole run: entering checks the names and takes the
    lock, :meth:`temp` opens a temporary file for a target, :meth:`commit` moves every finished
    temporary file into place together, and leaving the block removes whatever was not
    committed and releases the lock.  The first target names the claim in messages.
    """

    def __init__(
        self,
        targets: Iterable[str | os.PathLike],
        *,
        force: bool = False,
        inputs: Mapping[str, str | os.PathLike | None] | None = None,
        writes: str | None = None,
        final: bool = True,
    ):
        targets = list(targets)
        # The kind of file the run writes (a ``WRITES_*`` constant): with force it may replace
        # a file of its own kind, never one of another (``never_replaced``).
        self.writes = writes
        # Whether these are the run's last files: once they are in place, a stop loses nothing.
        self.final = final
        # What the run reads, by what it is ("the manifest"): never an output, even with force.
        self.inputs = {what: Path(p) for what, p in (inputs or {}).items() if p is not None}
        if not targets:
            raise ValueError("nothing to claim")
        for target in targets:  # "", ".", "/", "a/..", "out.csv/": as given, not as a Path
            refuse_directory_path(target)
        self.targets = [Path(t) for t in targets]
        self.force = bool(force)
        self.directory = self.targets[0].parent
        if any(t.parent != self.directory for t in self.targets):
            raise ValueError("claimed files must share one directory")
        self.lock_path = self.targets[0].with_name(f".{self.targets[0].name}.lock")
        self._lock_fd: int | None = None
        self._owner = os.getpid()  # the process that holds the lock (not a forked copy)
        self._temps: dict[Path, TempFile] = {}
        self._token: contextvars.Token[tuple[OutputClaim, ...]] | None = None

    # -- claiming ---------------------------------------------------------------------------

    def _check_names(self) -> None:
        limit = _name_max(self.directory) if self.directory.is_dir() else 255
        lengths = []
        for target in [*self.targets, self.lock_path]:
            if name_text(target.name) is None:
                raise InvalidParameterError(OUTPUT_NAME_NOT_UTF8)
            lengths.append(len(os.fsencode(target.name)))
        if max(lengths) > limit:
            # the room left by the longest name written beside the output, whichever overflows
            first = lengths[0]
            room = limit - (max(lengths) - first)
            raise InvalidParameterError(
                f"the output file name is too long: with the files written beside it it may "
                f"have at most {room} bytes, it has {first}"
            )
        if not self.directory.exists():
            raise InvalidParameterError("the output directory does not exist")
        if not self.directory.is_dir():
            raise InvalidParameterError("the output's parent path is not a directory")

    def check(self) -> None:
        """Refuse now what entering the claim would refuse of its names (too long, no such
        directory, an output there without ``force``, a directory this process cannot write,
        a lock file's name taken by something else), taking no lock: for a preview that writes
        nothing.  (Another run holding the lock now is not a refusal: it may be done by then.)"""
        self._check_names()
        self._check_existing()
        if _squatted(self.lock_path):
            raise self._lock_squatted()
        with contextlib.suppress(OSError):
            if os.lstat(self.lock_path).st_size != 0:
                raise self._lock_holds_data()
        if not os.access(self.directory, os.W_OK):  # (what creating the lock would meet)
            statvfs = getattr(os, "statvfs", None)  # (not on Windows)
            read_only = statvfs is not None and statvfs(self.directory).f_flag & os.ST_RDONLY
            reason = os.strerror(errno.EROFS if read_only else errno.EACCES)
            raise InvalidParameterError(f"cannot write in the output directory: {reason}")

    def _lock_squatted(self) -> OutputExistsError:
        return OutputExistsError(
            f"{self.lock_path.name}, the lock file a run keeps beside {self.targets[0].name}, "
            "is taken by something other than a plain file (a link, a directory, a pipe or a "
            "device): remove it or choose another output"
        )

    def _lock_holds_data(self) -> OutputExistsError:
        return OutputExistsError(
            f"{self.lock_path.name}, the lock file a run keeps beside {self.targets[0].name}, "
            "is taken by a file with data in it (a lock file is always empty): move it away or "
            "choose another output"
        )

    def _check_existing(self) -> None:
        refuse_over_inputs(self.targets, self.inputs)
        for what, path in self.inputs.items():
            if same_file(self.lock_path, path):  # (it is removed when the run ends)
                raise OutputExistsError(
                    f"{self.lock_path.name}, the lock file a run keeps beside "
                    f"{self.targets[0].name}, is {what} this run reads: choose another output"
                )
        for target in self.targets:
            if target.is_dir():
                raise InvalidParameterError(f"the output path {target} is a directory")
            kind = never_replaced(target, self.writes)
            if kind is not None:
                raise OutputExistsError(
                    f"{target} is {kind}; it is never replaced, even with {option('force')}"
                )
            if os.path.lexists(target) and not self.force:
                raise OutputExistsError(f"{target} already exists; {option('force')} replaces it")

    def _lock(self) -> None:
        busy = OutputExistsError(
            f"another run is writing {self.targets[0]} now; wait for it to finish or choose "
            "another output"
        )
        squatted = self._lock_squatted()
        for _ in range(10):
            try:
                if not _HAVE_FLOCK:  # pragma: no cover - Windows
                    fd = os.open(self.lock_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                else:
                    fd = os.open(self.lock_path, _LOCK_FLAGS, 0o600)
            except FileExistsError:
                raise busy from None
            except OSError as exc:
                if _squatted(self.lock_path):
                    raise squatted from None
                raise InvalidParameterError(
                    f"cannot write in the output directory: {exc.strerror or type(exc).__name__}"
                ) from None
            found = os.fstat(fd)
            if not stat.S_ISREG(found.st_mode):
                os.close(fd)
                raise squatted
            if found.st_size != 0:
                # A lock file is never written to: one left by a run that was killed is empty.
                # A file with data at its name (a key, a ledger, an input) is not one, and
                # the run would delete it when it ends.
                os.close(fd)
                raise self._lock_holds_data()
            if not _HAVE_FLOCK:  # pragma: no cover - Windows
                self._lock_fd = fd
                _LOCKED[id(self)] = self
                return
            import fcntl

            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                raise busy from None
            # The holder before us may have removed the lock file after we opened it: only a
            # lock on the file that is at the name now counts.
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.lock_path))
            except FileNotFoundError:
                same = False
            if same:
                self._lock_fd = fd
                _LOCKED[id(self)] = self
                return
            os.close(fd)
        raise busy

    def __enter__(self) -> OutputClaim:
        self._check_names()
        self._check_existing()
        try:
            # Held from the lock file's creation until the claim is recorded: a stop in
            # between would leave the lock behind, as ``__exit__`` runs only once this
            # returns; delivered inside this ``try``, it is removed.
            with signals_deferred():
                self._lock()
                self._check_existing()  # again, now that no cooperating run can interfere
                self._token = _CLAIMS.set(_CLAIMS.get() + (self,))
        except BaseException:
            self._clean_up()
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            # Held: a stop part-way through the clean-up would leave the rest of it undone.
            with signals_deferred():
                self._clean_up()
        except BaseException:
            self._clean_up()  # (a stop that came before the hold; doing it twice is harmless)
            raise

    def _clean_up(self) -> None:
        if self._token is not None:
            _CLAIMS.reset(self._token)
            self._token = None
        for temp in self._temps.values():
            temp.discard()
        self._temps.clear()
        self._unlock()

    def _unlock(self) -> None:
        if self._lock_fd is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(self.lock_path)  # while still holding it: see _lock
        os.close(self._lock_fd)
        self._lock_fd = None
        _LOCKED.pop(id(self), None)

    # -- writing ----------------------------------------------------------------------------

    def temp(self, target: str | os.PathLike, private: bool = False) -> TempFile:
        """A temporary file for ``target`` (one of the claimed names); ``private``: owner-only
        from its creation (``TempFile``)."""
        target = Path(target)
        if target not in self.targets:
            raise ValueError("not a claimed output")
        if target in self._temps:
            raise ValueError("a temporary file for this output is already open")
        # Held from the file's creation until it is registered, so that leaving the claim
        # (``__exit__``) removes it whenever a stop lands.
        with signals_deferred():
            temp = TempFile(target, private=private)
            self._temps[target] = temp
        return temp

    def commit(self) -> None:
        """Move every finished temporary file into place as one step, the first-named last.

        The first target is the main file (a release); the others describe it (its manifest and
        audit file).  Moving those first means that even a crash part-way never leaves a main
        file without its companions, only companions without their main file.

        Claimed names without a temporary file are removed (with ``force``, an old manifest or
        audit file must not stay beside a new release).  SIGINT and SIGTERM are held until the
        step is over; if one arrived, a :class:`LateSignalWarning` says the files are complete.
        Precondition: every temporary file has been finished (:meth:`TempFile.finish`).
        """
        done: list[Path] = []
        stop_if_told()  # a stop Python dropped on the way: nothing is moved into place
        with _signals_held() as arrived:
            try:
                if self.force:
                    # Old files go first: an error part-way then leaves fewer files, never a
                    # new release beside an old manifest.
                    for target in self.targets:
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(target)
                for target in [*self.targets[1:], self.targets[0]]:
                    temp = self._temps.get(target)
                    if temp is None:
                        continue
                    temp.commit_new()
                    done.append(target)
                    del self._temps[target]
            except FileExistsError:
                self._undo(done)
                raise OutputExistsError(
                    f"a file named like the output appeared in {self.directory} during the "
                    f"run; nothing was written ({option('force')} replaces it)"
                ) from None
            except OSError as exc:
                self._undo(done)
                raise write_failure(exc) from None
            except BaseException:
                self._undo(done)  # whatever stopped the step, no companion stays without its file
                raise
            fsync_directory(self.directory)
            if self.final:
                note_files_in_place()
        if arrived:
            warnings.warn(
                "a stop signal arrived while the finished files were being moved into place; "
                "they are all in place and complete",
                LateSignalWarning,
                stacklevel=2,
            )

    @staticmethod
    def _undo(done: list[Path]) -> None:
        for target in done:
            with contextlib.suppress(OSError):
                os.unlink(target)

    def write_bytes(self, target: str | os.PathLike, data: bytes) -> None:
        """Write ``data`` as ``target`` and commit it (for single-file outputs)."""
        temp = self.temp(target)
        try:
            temp.handle.write(data)
            temp.finish()
        except OSError as exc:
            raise write_failure(exc) from None
        self.commit()


def _active_claim(target: Path) -> OutputClaim | None:
    for claim in _CLAIMS.get():
        if target in claim.targets:
            return claim
    return None


def write_failure(exc: OSError) -> PostcodePrivacyError:
    """The one error for a write that failed once the work was done (exit code 1 in the CLI),
    whichever helper was writing: it names the system's reason, never the data."""
    return PostcodePrivacyError(f"cannot write the output: {exc.strerror or type(exc).__name__}")


@contextlib.contextmanager
def atomic_output(target: str | os.PathLike):
    """A binary handle whose contents replace ``target`` only if the block completes."""
    temp = TempFile(target)
    try:
        yield temp.handle
        temp.finish()
        temp.commit()
    except OSError as exc:
        temp.discard()
        raise write_failure(exc) from None
    except BaseException:
        temp.discard()
        raise
    fsync_directory(temp.target.parent)


def write_atomic(target: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``target`` through a temporary file.

    Inside an :class:`OutputClaim` on ``target`` the claim's rules apply (no replacing without
    ``force``, never a key file); otherwise an existing file is replaced.
    """
    claim = _active_claim(Path(target))
    if claim is not None:
        claim.write_bytes(target, data)
        return
    with atomic_output(target) as handle:
        handle.write(data)
