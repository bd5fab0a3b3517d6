"""Subjects seen with more than one postcode in a release (docs/release.md, "Subject
identifiers").

Each (identifier, postcode) pair is a separate draw, so a subject listed with two postcodes is
released twice; the release warns with :class:`DuplicateSubjectWarning`, naming record numbers
only.  :class:`_SubjectTracker` finds such subjects across chunks in bounded memory.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd

from ..errors import DuplicateSubjectWarning, warn_at_caller

__all__ = ["DuplicateSubjectWarning", "WARN_ROWS", "subject_hash", "warn_duplicate_subjects"]

WARN_ROWS = 5  # record numbers quoted in a warning


def _tracker_hashes(canonical: list[str]) -> np.ndarray:
    """64-bit hashes of canonical identifiers for the run's subject tracker (vectorised
    SipHash of the UTF-8 text, pandas' ``hash_array``).  Used only within one run, in
    memory: they decide nothing but which identifiers a warning counts."""
    if not canonical:
        return np.zeros(0, dtype=np.uint64)
    return pd.util.hash_array(np.array(canonical, dtype=object), categorize=False)


def subject_hash(canonical: str) -> int:
    return int.from_bytes(hashlib.blake2b(canonical.encode("utf-8"), digest_size=8).digest(), "big")


class _SubjectTracker:
    """Which postcode each subject identifier has been seen with, in bounded, compact memory.

    Holds one 64-bit hash of each distinct canonical identifier and one 32-bit number for its
    first postcode (12 bytes per identifier), in sorted arrays merged chunk by chunk.  It never
    misses an identifier seen with two postcodes within a run; a spurious report needs two
    different identifiers with the same 64-bit hash (probability about n**2 / 2**65 for n
    identifiers).
    """

    def __init__(self) -> None:
        self._ids = np.zeros(0, dtype=np.uint64)
        self._codes = np.zeros(0, dtype=np.int32)  # widened in add() should a number not fit
        self._flagged: set[int] = set()

    @property
    def conflicts(self) -> int:
        return len(self._flagged)

    def add(self, id_hashes: np.ndarray, codes: np.ndarray, rows: np.ndarray) -> list[int]:
        """Record a chunk; return the record numbers at which a new conflict shows, ascending."""
        if id_hashes.size == 0:
            return []
        order = np.lexsort((rows, id_hashes))
        ids, cds, rws = id_hashes[order], codes[order], rows[order]
        first = np.ones(ids.size, dtype=bool)
        first[1:] = ids[1:] != ids[:-1]
        starts = np.flatnonzero(first)
        group = np.cumsum(first) - 1
        # Within the chunk: a row whose code differs from its identifier's first row here.
        first_code = cds[starts][group]
        inner = cds != first_code
        # Against earlier chunks: the identifier's first code then.
        uniq, uniq_code = ids[starts], cds[starts]
        pos = np.searchsorted(self._ids, uniq)
        known = pos < self._ids.size
        known[known] = self._ids[pos[known]] == uniq[known]
        earlier = np.full(uniq.size, -1, dtype=np.int64)
        earlier[known] = self._codes[pos[known]]
        outer = known[group] & (cds != earlier[group])
        new_rows: list[int] = []
        for i in np.flatnonzero(inner | outer):
            key = int(ids[i])
            if key not in self._flagged:
                self._flagged.add(key)
                new_rows.append(int(rws[i]))
        fresh = ~known
        if fresh.any():
            at = np.searchsorted(self._ids, uniq[fresh])
            self._ids = np.insert(self._ids, at, uniq[fresh])
            codes_new = uniq_code[fresh]
            fits = np.iinfo(self._codes.dtype)
            if codes_new.max() > fits.max or codes_new.min() < fits.min:  # not for real tables
                self._codes = self._codes.astype(np.int64)
            self._codes = np.insert(self._codes, at, codes_new)
        return sorted(new_rows)


def warn_duplicate_subjects(count: int, rows: list[int]) -> None:
    where = ", ".join(str(r) for r in rows[:WARN_ROWS])
    warn_at_caller(
        f"{count} subject identifier(s) appear with more than one postcode (again at record(s) "
        f"{where}{', ...' if count > len(rows[:WARN_ROWS]) else ''}); each (identifier, "
        "postcode) pair is a separate draw, so such a subject is released more than once",
        DuplicateSubjectWarning,
    )
