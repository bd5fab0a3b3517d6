"""A privacy ledger: open, create, resolve interrupted releases, summarise (docs/ledger.md)."""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from fractions import Fraction
from pathlib import Path

from .._digest import sha256_of_file
from .._file_names import recorded_paths
from .._input_files import MIB, parse_json, read_small_file
from .._interrupts import note_files_in_place
from .._signal_holds import signals_deferred
from ..errors import InvalidParameterError, KeyFileError
from ..mechanism.epsilon import parse_epsilon
from ..mechanism.keys import Key
from ..release.manifest import manifest_path_for
from .accounting import distribution, spend_by
from .digests import Digester
from .errors import LedgerDamagedError, LedgerError, LedgerSurroundingsError
from .owner import Owner
from .sqlite_store import SqliteStore, refuse_unusable_new_path, sqlite_is_writable
from .stores import LEDGER_FORMAT, SCHEMA_VERSION, SCHEMA_VERSIONS, Store, is_url, open_store

__all__ = ["Ledger", "secret_path_for", "LEDGER_FORMAT"]
SECRET_SUFFIX = ".key"
# A pending release not provably of this machine, younger than this, may still be renaming
# its output.
_FOREIGN_GRACE_S = 60
_MANIFEST_LIMIT = 4 * MIB  # as report --manifest: a manifest is a few kilobytes


def secret_path_for(location: str, secret_path: str | os.PathLike | None) -> Path:
    """The ledger secret's key file: given, or ``LEDGER.key`` beside a SQLite ledger."""
    if secret_path is not None:
        from ..keyfile import refuse_unusable_key_path

        # As given: Path("s.key/") would be "s.key", a file the user did not name.
        refuse_unusable_key_path(secret_path)
        return Path(secret_path)
    if is_url(location):
        raise InvalidParameterError(
            "a PostgreSQL ledger needs --ledger-secret FILE (its key "
            "file is not beside the database)"
        )
    return Path(location + SECRET_SUFFIX)


def now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def owner_tag(output_path: str | os.PathLike) -> str:
    """The owner of a release about to be written to ``output_path`` (``owner.py``)."""
    return Owner.current(os.path.dirname(os.path.abspath(output_path))).to_text()


class Ledger:
    """An open ledger: its store and the digester of its secret.

    Opening verifies that the secret is the ledger's own (by fingerprint) and resolves any
    release left pending by a run that stopped between recording and committing
    (:meth:`resolve_pending`).
    """

    def __init__(self, store: Store, digester: Digester):
        self.store = store
        self.digester = digester
        self._integrity_checked = False  # (check_integrity: once per opening)

    # -- lifecycle ------------------------------------------------------------------------------

    @classmethod
    def init(cls, location: str, secret_path: str | os.PathLike | None = None) -> Ledger:
        """:meth:`create` the ledger, then open it."""
        secret = cls.create(location, secret_path)
        return cls(open_store(location), Digester(secret))

    @classmethod
    def create(cls, location: str, secret_path: str | os.PathLike | None = None) -> Key:
        """Create an empty ledger and its secret (a new key file, mode 0600, never overwritten);
        return the secret.  Once this returns both exist, whether or not the ledger can be
        opened now (a disk just filled may refuse SQLite's -shm file).

        A SQLite ledger is built under a temporary name beside its path and moved into place
        once complete (``SqliteStore.publish``), never over an existing file: a creation that
        fails or is killed leaves no ledger at the path (docs/ledger.md, "Creating a ledger").
        A PostgreSQL ledger's tables are created in one transaction."""
        from ..keyfile import write_key_file

        path = secret_path_for(location, secret_path)
        # The ledger first: it is what the command names.
        if not is_url(location):
            refuse_unusable_new_path(location)
            if os.path.abspath(path) == os.path.abspath(location):
                raise LedgerError(
                    "the ledger's secret would be the ledger itself: give the secret another path"
                )
        if os.path.lexists(path):
            raise KeyFileError("the ledger's key file already exists; refusing to overwrite it")
        secret = Key.generate()
        store = None
        try:
            # A SQLite ledger's file is made at once: a stop just after would leave it, so it
            # is held until ``store`` is set (a server's connection may wait: not held).
            with contextlib.nullcontext() if is_url(location) else signals_deferred():
                store = open_store(location, create=True)
            write_key_file(secret, path)
            with store.write():
                store.create_schema()
                store.bulk_insert(
                    "ledger_meta",
                    ("name", "value"),
                    [
                        ("format", LEDGER_FORMAT),
                        ("schema_version", SCHEMA_VERSION),
                        ("secret_fingerprint", secret.fingerprint),
                        ("created", now()),
                    ],
                )
            if isinstance(store, SqliteStore):
                # A stop once the ledger is at its path must say that it and its key are
                # complete (``cli``), not "interrupted": held until that is noted.
                with signals_deferred():
                    store.publish()
                    note_files_in_place()
        except BaseException as exc:
            if store is None:
                raise
            # A key without its ledger would only block the next try; but once the ledger is
            # at its path (even if an interrupt came just after its link) its key stays:
            # deleting it would leave a ledger nothing can open.
            published = (
                store.is_published()
                if isinstance(store, SqliteStore)
                else _server_may_hold_ledger(location, secret)
            )
            store.close()  # a SQLite ledger still being built is removed
            if not published and _holds_key(path, secret):
                # Judged by content, not by a flag set after ``write_key_file`` returned: a
                # stop between the two would have left this key behind.
                path.unlink(missing_ok=True)
            if isinstance(exc, store.database_errors):
                # (its surroundings, which say more, are a LedgerError already)
                raise LedgerError(
                    "cannot create the ledger: the database refused a step of creating it"
                ) from None
            raise
        if not isinstance(store, SqliteStore):  # (a published SQLite ledger is closed)
            store.close()
        return secret

    @classmethod
    def open_for_reading(
        cls, location: str, secret_path: str | os.PathLike | None = None
    ) -> Ledger:
        """For commands that only read: a SQLite ledger this process cannot write (on
        read-only media, or a file or directory without write permission) is opened
        read-only, its pending releases left as they are; any other is opened as by
        :meth:`open`, and read-only after all if settling its pending releases finds it
        cannot be written (a full disk: ``LedgerSurroundingsError.cannot_write``)
        (docs/ledger.md, "Read-only media")."""
        if is_url(location) or not os.path.isfile(location):
            return cls.open(location, secret_path)
        if not sqlite_is_writable(location):
            return cls.open(location, secret_path, read_only=True)
        try:
            return cls.open(location, secret_path)
        except LedgerSurroundingsError as exc:
            if not exc.cannot_write:
                raise
        return cls.open(location, secret_path, read_only=True)

    @classmethod
    def open(
        cls,
        location: str,
        secret_path: str | os.PathLike | None = None,
        *,
        resolve: bool = True,
        read_only: bool = False,
    ) -> Ledger:
        """Open a ledger.  ``read_only`` (SQLite): write nothing, so resolve nothing."""
        from ..keyfile import read_key_file

        # The ledger first: a mistyped --ledger is "no ledger at that path", not a missing key.
        store = open_store(location, read_only=read_only)
        try:
            try:
                secret = read_key_file(secret_path_for(location, secret_path))
            except KeyFileError as exc:
                raise KeyFileError(f"the ledger's secret: {exc}") from None
            meta = dict(store.query("SELECT name, value FROM ledger_meta"))
            if meta.get("format") != LEDGER_FORMAT:
                raise LedgerError("the database is not a postcode-privacy ledger")
            if meta.get("schema_version") not in SCHEMA_VERSIONS:
                raise LedgerError("the ledger has an unsupported schema version")
            if meta.get("secret_fingerprint") != secret.fingerprint:
                raise KeyFileError("that key file is not this ledger's secret")
        except BaseException:
            store.close()
            raise
        ledger = cls(store, Digester(secret))
        if resolve and not read_only:
            try:
                ledger.resolve_pending()
            except BaseException:
                store.close()
                raise
        return ledger

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- pending releases ---------------------------------------------------------------------

    def resolve_pending(self) -> list[tuple[int, str]]:
        """Settle releases left pending by runs that stopped; return ``(id, outcome)`` pairs.

        A pending release whose output exists at its recorded path with its recorded sha256
        was written: it is committed.  It is abandoned (its draws removed) only where this
        process can tell it was not written: its owner (``owner.py``) ran on this machine, in
        this boot and PID namespace (every part recorded, every part equal to ours), its process
        is gone, the output's directory here is the one it recorded, and its manifest, the
        first of its files to be renamed into place, is not at its path (``_renames_began``).
        Anything else stays pending, and so keeps counting against budgets: a run still going
        (alive here, or not provably of this machine and under a minute old), a run not
        provably of this machine and namespace (another machine, even one with this host name;
        an owner in the older ``HOST:PID`` format; a part unknown), a directory that is not
        the one recorded, and a run that stopped after its renames began without its output
        in place (stopped between renames, or the output moved or edited since).  An owner
        that is neither format is damage (:class:`LedgerError`), never a reason to abandon.
        docs/ledger.md, "Atomicity".
        """
        outcomes = []
        with self.store.write(), _damage_is_a_ledger_error(self.store):
            rows = self.store.query(
                "SELECT id, owner, created, output_path, output_sha256 "
                "FROM releases WHERE state = 'pending' ORDER BY id"
            )
            for rid, owner_text, created, recorded, sha in rows:
                owner = Owner.from_text(owner_text)  # ValueError: damage, before any change
                paths = recorded_paths(recorded)
                here = owner.ran_here()
                if _maybe_running(owner, here, created):
                    continue
                if any(_holds(path, sha) for path in paths):
                    self._commit_rows(rid)
                    outcomes.append((rid, "committed"))
                elif (
                    here
                    and owner.wrote_into(os.path.dirname(paths[0]))
                    and not any(_renames_began(path, sha) for path in paths)
                ):
                    self._abandon_rows(rid)
                    outcomes.append((rid, "abandoned"))
        return outcomes

    # The write-side steps, each inside a write transaction the caller holds.  A release's new
    # draws live in ``draws`` from the moment it is pending (so they count at once); a draw it
    # shares with another pending release that recorded it first is noted in ``shared_draws``,
    # so that abandoning that other release cannot take the draw away from this one.

    def _record_rows(self, rid: int, rows: list[tuple[bytes, bytes, bytes]]) -> int:
        """Add a release's new draws; return how many were not in the ledger already."""
        store = self.store
        added = store.insert_new(
            "draws", ("draw", "subject", "pair", "release"), ((d, s, p, rid) for d, s, p in rows)
        )
        if added < len(rows):
            store.load_keys("q_draws", (d for d, _, _ in rows))
            held = {
                bytes(r[0])
                for r in store.query(
                    "SELECT d.draw FROM draws d JOIN q_draws q ON d.draw = q.k JOIN releases r "
                    "ON d.release = r.id WHERE r.state = 'pending' AND r.id <> ?",
                    (rid,),
                )
            }
            store.insert_new(
                "shared_draws",
                ("release", "draw", "subject", "pair"),
                ((rid, d, s, p) for d, s, p in rows if d in held),
            )
        return added

    def _commit_rows(self, rid: int) -> None:
        self.store.execute(
            "UPDATE releases SET state = 'committed', committed = ? WHERE id = ?", (now(), rid)
        )
        # Notes on draws now owned by a committed release are no longer needed.
        self.store.execute(
            "DELETE FROM shared_draws WHERE EXISTS (SELECT 1 FROM draws d JOIN releases r ON "
            "d.release = r.id WHERE d.draw = shared_draws.draw AND r.state = 'committed')"
        )

    def _abandon_rows(self, rid: int) -> None:
        store = self.store
        heirs = store.query(
            "SELECT s.draw, s.subject, s.pair, MIN(s.release) FROM shared_draws s JOIN draws d "
            "ON d.draw = s.draw WHERE d.release = ? AND s.release <> ? "
            "GROUP BY s.draw, s.subject, s.pair",
            (rid, rid),
        )
        store.execute("DELETE FROM draws WHERE release = ?", (rid,))
        store.execute("DELETE FROM shared_draws WHERE release = ?", (rid,))
        if heirs:
            store.bulk_insert("draws", ("draw", "subject", "pair", "release"), heirs)
            for draw, _, _, heir in heirs:
                store.execute(
                    "DELETE FROM shared_draws WHERE draw = ? AND release = ?", (draw, heir)
                )
            # each heir now holds those draws first: they are new draws of its release
            for heir, count in Counter(heir for _, _, _, heir in heirs).items():
                store.execute(
                    "UPDATE releases SET new_draws = new_draws + ? WHERE id = ?", (count, heir)
                )
        store.execute("UPDATE releases SET state = 'abandoned' WHERE id = ?", (rid,))

    # -- reading ------------------------------------------------------------------------------

    def epsilons(self) -> dict[int, Fraction]:
        """Epsilon of every release, exactly (and each release's id and state as written)."""
        with _damage_is_a_ledger_error(self.store, "releases"):
            out = {}
            for rid, state, text in self.store.query("SELECT id, state, epsilon FROM releases"):
                if type(rid) is not int or state not in _STATES:
                    raise ValueError("a release's id or state")
                epsilon = parse_epsilon(text)
                if epsilon.text != text:  # (" 0.1 ", a number stored as a float)
                    raise ValueError("a release's epsilon is not as written")
                out[rid] = epsilon.fraction
            return out

    def check_integrity(self) -> None:
        """Refuse (:class:`LedgerDamagedError`) a ledger holding a value of a kind this package
        never writes, before a release or a preview counts on it.  ``summary`` (``ledger
        show``) reads every value and refuses the same damage; a release reads only its own
        subjects' draws, so a draw edited into another type (or a release's budget, radius
        or counts) went unseen, and a budget was overspent past it.  Checked once per opening."""
        if self._integrity_checked:
            return
        store = self.store
        with store.read(), _damage_is_a_ledger_error(store):
            self._checked_releases()

    def _checked_releases(self) -> tuple[dict[int, Fraction], list[dict]]:
        """Every release's epsilon, and its row (budget exact, ``settled_by_hand``) in order,
        once every value of the ledger is found of a kind this package writes (the scan of
        ``check_integrity``, which ``summary`` reads through).  Inside an open read."""
        store = self.store
        epsilon_of = self.epsilons()
        with _damage_is_a_ledger_error(store, "releases"):
            releases = [
                dict(zip(_RELEASE_FIELDS, row))
                for row in store.query(
                    f"SELECT {', '.join(_RELEASE_COLUMNS)} FROM releases ORDER BY id"
                )
            ]
            for r in releases:
                r["budget"] = _check_release_row(r)
        settled = _settlements(store, {r["id"] for r in releases})
        for r in releases:
            r["settled_by_hand"] = settled.get(r["id"])
        _refuse_malformed_draws(store)
        self._integrity_checked = True
        return epsilon_of, releases

    def lookup(
        self, draws: Iterable[bytes], subjects: Iterable[bytes]
    ) -> tuple[set[bytes], set[bytes], dict[bytes, Fraction]]:
        """Which of ``draws`` the ledger holds, which of those only a pending release holds so
        far, and the spend of each of ``subjects`` (absent: none).  Pending releases count: a
        release being made may yet be committed."""
        with self.store.read(), _damage_is_a_ledger_error(self.store):
            return self.lookup_in_transaction(draws, subjects)

    def lookup_in_transaction(
        self, draws: Iterable[bytes], subjects: Iterable[bytes]
    ) -> tuple[set[bytes], set[bytes], dict[bytes, Fraction]]:
        """:meth:`lookup` inside a transaction the caller holds."""
        store = self.store
        epsilon_of = self.epsilons()
        store.load_keys("q_draws", draws)
        known, pending = set(), set()
        for draw, state in store.query(
            "SELECT q.k, r.state FROM q_draws q CROSS JOIN draws d "
            "JOIN releases r ON d.release = r.id WHERE d.draw = q.k"
        ):
            known.add(bytes(draw))
            if state == "pending":
                pending.add(bytes(draw))
        store.load_keys("q_subjects", subjects)
        # CROSS JOIN fixes the loop order in SQLite: look each wanted subject up in the index,
        # rather than walking the whole index and probing the (small) wanted set.
        rows = store.query(
            "SELECT d.subject, d.release, COUNT(*) FROM q_subjects q CROSS JOIN draws d "
            "WHERE d.subject = q.k GROUP BY d.subject, d.release"
        )
        with _damage_is_a_ledger_error(store, "draws"):  # a draw of no release, say
            spend = spend_by(((bytes(s), r, n) for s, r, n in rows), epsilon_of)
        return known, pending, spend

    def summary(self) -> dict:
        """Releases, and the distribution of cumulative spend over subjects and over (subject,
        true postcode) pairs; pending releases count (conservatively) and are flagged."""
        store = self.store
        with store.read(), _damage_is_a_ledger_error(store):
            epsilon_of, releases = self._checked_releases()  # (as a release does)
            per = {}
            with _damage_is_a_ledger_error(store, "draws"):
                for group in ("subject", "pair"):
                    rows = store.query(
                        f"SELECT {group}, release, COUNT(*) FROM draws GROUP BY {group}, release"
                    )
                    spend = spend_by(((bytes(g), r, n) for g, r, n in rows), epsilon_of)
                    per[group] = distribution(spend.values())
            draws = store.query("SELECT COUNT(*) FROM draws")[0][0]
        return {
            "releases": releases,
            "draws": draws,
            "subjects": per["subject"],
            "pairs": per["pair"],
        }


_STATES = frozenset({"pending", "committed", "abandoned"})


def _settlements(store: Store, release_ids: set) -> dict[int, dict]:
    """The settlements by hand, by release, each of a release in the ledger, as ``settle``
    writes them (version 1 of the schema has none)."""
    settled: dict[int, dict] = {}
    if store.schema_version() == "1":
        return settled
    with _damage_is_a_ledger_error(store, "settlements"):
        for rid, *rest in store.query(
            "SELECT release, outcome, settled, settled_by, basis FROM settlements"
        ):
            if rid not in release_ids or rest[0] not in ("committed", "abandoned"):
                raise ValueError("a settlement of no release, or of no outcome")
            if not all(isinstance(text, str) for text in rest):
                raise ValueError("a settlement's text")
            settled[rid] = dict(zip(("outcome", "settled", "settled_by", "basis"), rest))
    return settled


def _refuse_malformed_draws(store: Store) -> None:
    with _damage_is_a_ledger_error(store, "draws"):
        if store.holds_malformed_draws():
            raise ValueError("a draw not as written")


# A release's row as ``_checked_releases`` reads it: the names it gives the columns, and the
# columns.
_RELEASE_FIELDS = (
    "id",
    "state",
    "created",
    "output",
    "output_sha256",
    "epsilon",
    "radius",
    "graph_sha256",
    "key_fingerprint",
    "output_stability_version",
    "records",
    "new_draws",
    "budget",
)
_RELEASE_COLUMNS = tuple("output_path" if f == "output" else f for f in _RELEASE_FIELDS)
# A budget is written as the text of a Fraction (``str``: "3/10", "4"); its digits are bounded
# before any number is made of them (a hand edit of ten thousand digits hung ``ledger show``).
_BUDGET_TEXT = re.compile(r"[1-9][0-9]{0,99}(/[1-9][0-9]{0,99})?")


def _check_release_row(release: dict) -> Fraction | None:
    """Raise ValueError for a ``releases`` row postcode-privacy would not have written;
    return its budget, exactly (None: none)."""
    for name in ("radius", "records", "new_draws"):
        if type(release[name]) is not int or release[name] < 0:
            raise ValueError(name)
    if release["radius"] < 1:
        raise ValueError("radius")
    for name in ("created", "output", "output_sha256", "graph_sha256", "key_fingerprint"):
        if not isinstance(release[name], str):
            raise ValueError(name)
    text = release["budget"]
    if text is None:
        return None
    if not isinstance(text, str) or not _BUDGET_TEXT.fullmatch(text):
        raise ValueError("budget")
    budget = Fraction(text)
    denominator = budget.denominator
    for prime in (2, 5):
        while denominator % prime == 0:
            denominator //= prime
    if str(budget) != text or denominator != 1:  # (not in lowest terms, or not a decimal)
        raise ValueError("budget")
    return budget


@contextlib.contextmanager
def _damage_is_a_ledger_error(store: Store, table: str = "") -> Iterator[None]:
    """A stored value this version cannot read (a release's epsilon, budget, state, owner or
    time; a draw of no release), or a table or column missing, means the ledger was damaged
    or edited by hand: one clear :class:`LedgerError` (exit code 1), naming the ``table``
    where it is known, rather than a traceback.  Errors of the ledger's surroundings (a full
    disk, a lost server) are LedgerErrors already (``stores.Store._surroundings``)."""
    damage: tuple[type[BaseException], ...] = (
        ValueError,
        TypeError,
        LookupError,
        ArithmeticError,
        *store.database_errors,
    )
    try:
        yield
    except (LedgerError, KeyFileError):
        raise
    except damage:
        where = f"a value in its {table} table" if table else "a value or table in it"
        raise LedgerDamagedError(
            f"the ledger is damaged: {where} is not as postcode-privacy writes it; "
            "restore it from a backup"
        ) from None


def _holds(path: str, output_sha256: str) -> bool:
    """Whether the file at ``path`` is a release's output: a regular file with its sha256."""
    return os.path.isfile(path) and sha256_of_file(path) == output_sha256


def _renames_began(output_path: str, output_sha256: str) -> bool:
    """Whether this release's manifest is in place: the first of its three files renamed into
    place (manifest, audit file, output: atomic.py, ``OutputClaim.commit``).  A manifest at
    that path describing another output (an earlier release that ``--force`` was replacing)
    or none at all means no rename of this release happened."""
    path = manifest_path_for(output_path)
    if not os.path.exists(path):  # (a dangling link too)
        return False
    try:
        # Read as any file a user can replace: a FIFO, a huge file or a key given twice is
        # "unreadable", never a hang, a memory blow-up or a quiet choice of one of the keys.
        raw = read_small_file(path, what="the manifest", limit=_MANIFEST_LIMIT, error=ValueError)
        manifest = parse_json(raw, what="the manifest", error=ValueError)
        return manifest["output"]["sha256"] == output_sha256  # type: ignore[index]
    except (ValueError, TypeError, KeyError):
        return True  # unreadable: it cannot be ruled out


def _maybe_running(owner: Owner, ran_here: bool, created: str) -> bool:
    """Whether the owner's run may still be going: its process is alive, where ``ran_here``
    (its id means something here); otherwise, while its time of recording is within a minute
    of this machine's clock (it may still be renaming its output, on a machine this process
    cannot look into).  Within a minute either side: a time further in the future says only
    that the other machine's clock is wrong, and counting it as "under a minute old" kept its
    draws against every budget until this clock caught up, with no way to settle it by hand
    (a hostile review)."""
    if ran_here:
        return owner.is_alive()
    age = _dt.datetime.now(_dt.UTC) - _dt.datetime.fromisoformat(created)
    return abs(age.total_seconds()) < _FOREIGN_GRACE_S


def _holds_key(path: Path, secret: Key) -> bool:
    """Whether ``path`` is the key file just written for ``secret`` (a fresh random key: no
    other file holds its bytes)."""
    try:
        return path.read_bytes() == secret.to_file_bytes()
    except OSError:
        return False


def _server_may_hold_ledger(location: str, secret: Key) -> bool:
    """Whether the database server at ``location`` may hold the ledger just created for
    ``secret``: a stop can land after its transaction committed and before ``create`` knew.
    Asked afresh; if it cannot be asked, the answer is yes, as deleting the key of a ledger
    that exists loses the ledger, and a key without one only needs deleting by hand."""
    try:
        store = open_store(location)
    except InvalidParameterError:  # "that database holds no ledger": none was committed
        return False
    except BaseException:
        return True
    try:
        rows = store.query("SELECT value FROM ledger_meta WHERE name = 'secret_fingerprint'")
        return rows == [(secret.fingerprint,)]
    except store.database_errors:  # (no ledger_meta table: the schema was never committed)
        return False
    except BaseException:
        return True
    finally:
        with contextlib.suppress(BaseException):
            store.close()
