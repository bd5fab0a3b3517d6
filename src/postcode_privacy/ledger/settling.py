"""Settling a pending release by hand: the custodian's word, checked as far as this machine can
(docs/ledger.md, "Settling a pending release by hand").

A pending release that :meth:`Ledger.resolve_pending` cannot settle (another machine's run, an
owner in the older format, a run from before a reboot, a platform without ``/proc``) counts
against every budget until its output appears at its recorded path.  The custodian can settle
it here:

* **committed** only on evidence: the output at its recorded path with its recorded sha256 as
  this machine sees it, or a file the custodian names whose sha256 is the recorded one;
* **abandoned** only on the custodian's explicit statement, never while the output is at its
  path with its sha256 (that release happened), nor while a manifest at its place describes
  that output or cannot be read (its files may have been put in place), nor while its run may
  still be going
  (``ledger._maybe_running``); its draws are removed as an interrupted release's are
  (``Ledger._abandon_rows``: shared draws pass to the releases that also hold them).

Postcondition: every check is made inside the one write transaction that settles the release,
on the state as it is then (another settler, or the run itself, may have settled it since it
was shown), and the settlement is recorded in ``settlements`` (who, when, on what basis).
"""

from __future__ import annotations

import getpass
import os
import socket
from typing import TYPE_CHECKING, Literal

from .._digest import sha256_of_file
from .._file_names import recorded_paths
from ..errors import InvalidParameterError
from .errors import LedgerError
from .owner import Owner

if TYPE_CHECKING:
    from .ledger import Ledger

__all__ = ["Outcome", "PendingRelease", "settle_by_hand", "pending_release", "custodian"]

Outcome = Literal["committed", "abandoned"]
BASIS_AT_PATH = "its output at its recorded path, with its recorded sha256"
BASIS_GIVEN_FILE = "a file given with --output, with its recorded sha256"
BASIS_STATEMENT = "the custodian's statement that its files were not published"


class PendingRelease(dict):
    """What the custodian is shown before settling: id, output (its recorded path), created,
    owner, records, new draws and epsilon of a release that was pending when read."""


def custodian() -> str:
    """Who is settling: ``user@host`` as this process sees it (an unknown user is ``?``)."""
    try:
        user = getpass.getuser()
    except Exception:  # no login name, no LOGNAME/USER and no password entry
        user = "?"
    return f"{user}@{socket.gethostname()}"


def pending_release(ledger: Ledger, rid: int) -> PendingRelease:
    """The release ``rid``, refused unless it is pending now (a read, for the confirmation)."""
    from .ledger import _damage_is_a_ledger_error

    store = ledger.store
    with store.read(), _damage_is_a_ledger_error(store, "releases"):
        row = _pending_row(ledger, rid)
    _, owner, created, path, _, records, new_draws, epsilon = row
    return PendingRelease(
        id=rid,
        output=path,
        created=created,
        owner=owner,
        records=records,
        new_draws=new_draws,
        epsilon=epsilon,
    )


def settle_by_hand(
    ledger: Ledger,
    rid: int,
    outcome: Outcome,
    *,
    output: str | os.PathLike | None = None,
    settled_by: str | None = None,
) -> dict:
    """Settle pending release ``rid`` as ``outcome`` and record who did (module docstring).

    ``output`` (committed only): the published file, wherever this machine sees it.  Raises
    :class:`LedgerError` for a release that is not pending, may still be running, or whose
    evidence does not allow ``outcome``; nothing is changed then.  Returns the settlement as
    recorded (``release``, ``outcome``, ``settled``, ``settled_by``, ``basis``)."""
    from .ledger import _damage_is_a_ledger_error, _holds, _maybe_running, _renames_began, now

    if outcome not in ("committed", "abandoned"):
        raise InvalidParameterError("a release is settled by hand as committed or abandoned")
    if output is not None and outcome != "committed":
        raise InvalidParameterError("--output is evidence for --committed only")
    store = ledger.store
    if store.read_only:
        raise LedgerError(
            "cannot settle a release by hand: the ledger was opened read-only (it is on "
            "read-only media, or its file or directory is not writable)"
        )
    given_sha = None if output is None else _sha256_of_given(output)
    with store.write(), _damage_is_a_ledger_error(store):
        _, owner_text, created, recorded, sha = _pending_row(ledger, rid)[:5]
        owner = Owner.from_text(owner_text)  # ValueError: damage, before any change
        paths = recorded_paths(recorded)
        if _maybe_running(owner, owner.ran_here(), created):
            raise LedgerError(
                f"release #{rid} may still be running (its process is alive on this machine, "
                "or it was recorded within a minute of this clock on a machine this one cannot "
                "look into); its run settles its own entry"
            )
        at_path = any(_holds(path, sha) for path in paths)
        if outcome == "committed":
            if at_path:
                basis = BASIS_AT_PATH
            elif given_sha == sha:
                basis = BASIS_GIVEN_FILE
            elif given_sha is not None:
                raise LedgerError(
                    f"release #{rid} is not settled: the file given with --output is not its "
                    "output (its sha256 is not the one recorded)"
                )
            else:
                raise LedgerError(
                    f"release #{rid} is not settled: its output is not at its recorded path "
                    "(`ledger show` prints it) with its recorded sha256 as this machine sees "
                    "it; give the published file with --output FILE"
                )
            ledger._commit_rows(rid)
        else:
            if at_path:
                raise LedgerError(
                    f"release #{rid} is not abandoned: its output is at its recorded path with "
                    "its recorded sha256, so the release happened; settle it with --committed"
                )
            if any(_renames_began(path, sha) for path in paths):
                # The manifest is renamed into place first: the output may have followed it
                # and been moved since.  Automatic settling never abandons such a release.
                raise LedgerError(
                    f"release #{rid} is not abandoned: a manifest is at its recorded place that "
                    "describes its output, or cannot be read, so its files may have been put "
                    "in place; if the output was published, settle it with --committed "
                    "--output FILE, and if it never was, move that manifest away first"
                )
            basis = BASIS_STATEMENT
            ledger._abandon_rows(rid)
        store.upgrade_schema()
        settlement = {
            "release": rid,
            "outcome": outcome,
            "settled": now(),
            "settled_by": settled_by or custodian(),
            "basis": basis,
        }
        store.bulk_insert("settlements", tuple(settlement), [tuple(settlement.values())])
    return settlement


def _pending_row(ledger: Ledger, rid: int) -> tuple:
    """The release's row, inside the caller's transaction; LedgerError unless it is pending."""
    rows = ledger.store.query(
        "SELECT state, owner, created, output_path, output_sha256, records, new_draws, "
        "epsilon FROM releases WHERE id = ?",
        (rid,),
    )
    if not rows:
        raise LedgerError(f"the ledger has no release #{rid} (`ledger show` lists them)")
    state = rows[0][0]
    if state != "pending":
        raise LedgerError(
            f"release #{rid} is {state}, not pending: only a pending release can be settled by hand"
        )
    return rows[0]


def _sha256_of_given(output: str | os.PathLike) -> str:
    """The sha256 of the file given with --output (a regular file, read before the
    transaction so that the ledger is not held while a large file is hashed)."""
    try:
        if not os.path.isfile(output):
            raise InvalidParameterError("--output must name an existing regular file")
        return sha256_of_file(output)
    except OSError as exc:
        raise InvalidParameterError(
            f"cannot read the file given with --output ({exc.strerror or type(exc).__name__})"
        ) from None
