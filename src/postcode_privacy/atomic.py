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
  (``inputs``: a report's manifest, the graph artefact), named by any path or hard link
  (``_file_kinds``);
* the claim holds an exclusive lock (``.NAME.lock``) from before the work until the files are in
  place, so two runs writing the same output cannot both go ahead: the second one is refused;
* the files of one claim (a release, its manifest, its audit file) are committed together, with
  the stop signals (SIGINT, SIGTERM, SIGHUP) held back until every rename is done
  (``_signal_holds``), so a stop signal can never separate them; without ``force`` a name that
  appeared meanwhile is not replaced (``os.link``).
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import errno
import importlib.util
import os
import secrets
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path

from ._file_kinds import (
    never_replaced,
    refuse_over_inputs,
    same_file,
)
from ._file_names import OUTPUT_NAME_NOT_UTF8, name_text, readable_name
from ._interrupts import note_files_in_place, stop_if_told
from ._signal_holds import signals_deferred, signals_held
from .errors import (
    InvalidParameterError,
    OutputExistsError,
    PostcodePrivacyError,
    option,
    warn_at_caller,
)

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
    "write_failure",
    "fsync_directory",
    "refuse_directory_path",
]

# Temporary names keep at most this many bytes of the target's name, so that a long (but
# valid) output name never makes its temporary file's name too long.
_TEMP_STEM_BYTES = 160


def _cannot_write_in(directory: str | os.PathLike, reason: str) -> InvalidParameterError:
    """The refusal of an output directory this process cannot write in, naming it (a path the
    user gave, as ``readable_name`` shows one), as "does not exist" names it."""
    where = readable_name(os.fspath(directory) or ".")
    return InvalidParameterError(f"cannot write in the output directory {where}: {reason}")


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
            raise _cannot_write_in(self.path.parent, exc.strerror or type(exc).__name__) from None
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


def _name_max(directory: Path) -> int:
    try:
        return int(os.pathconf(directory, "PC_NAME_MAX"))
    except (OSError, ValueError, AttributeError):
        return 255


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
        where = readable_name(os.fspath(self.directory))  # (its bytes: _file_names)
        if not self.directory.exists():
            raise InvalidParameterError(f"the output directory {where} does not exist")
        if not self.directory.is_dir():
            raise InvalidParameterError(f"the output's parent path {where} is not a directory")

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
            raise _cannot_write_in(self.directory, reason)

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
                raise _cannot_write_in(self.directory, exc.strerror or type(exc).__name__) from None
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
            # Only the file this claim holds: one removed by hand and made again by another
            # run (while this process lived on, its clean-up skipped) is that run's lock.
            if os.path.samestat(os.fstat(self._lock_fd), os.lstat(self.lock_path)):
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
        audit file must not stay beside a new release).  The stop signals are held until the
        step is over; if one arrived, a :class:`LateSignalWarning` says the files are complete.
        Precondition: every temporary file has been finished (:meth:`TempFile.finish`).
        """
        done: list[Path] = []
        stop_if_told()  # a stop Python dropped on the way: nothing is moved into place
        with signals_held() as arrived:
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
            warn_at_caller(
                "a stop signal arrived while the finished files were being moved into place; "
                "they are all in place and complete",
                LateSignalWarning,
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
