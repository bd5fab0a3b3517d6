"""Drawing a whole file's records in one engine batch, between the check pass and the writing.

Chunk by chunk, a postcode that recurs across a file is explored again in every chunk that
holds it: for a national file, where most postcodes appear a few times each but rarely twice in
one 100,000-record chunk, the engine works as if every record had a postcode of its own.  When
the check pass reads every chunk anyway (``on_error="error"``, no ledger), it can keep what
the engine needs of each accepted record, its canonical identifier and its node, compactly;
:class:`DrawAhead` then draws them all in one batch, grouped by postcode across the whole file,
and the writing pass attaches each chunk's share of the outputs instead of drawing it.

Every output is the one the chunk-by-chunk path gives: the engine's outputs depend on each
record alone, never on how records are batched (docs/performance.md, "Why the outputs are
identical").  Only memory differs: about 50 bytes plus the identifier's length a record, so
a file is drawn ahead only up to :data:`MAX_RECORDS` records and :data:`MAX_ID_BYTES` of
identifiers (with their offsets); past either, the release goes chunk by chunk as before.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence
from typing import overload

import numpy as np

from ..engine.batch import _start_canonical
from ..errors import InputDataError
from .plan import PendingChunk, ReleasePlan

__all__ = ["CompactIds", "DrawAhead", "MAX_ID_BYTES", "MAX_RECORDS"]

MAX_RECORDS = 10_000_000  # records drawn ahead at most (about 0.5 GB with short identifiers)
MAX_ID_BYTES = 256 * 2**20  # bytes of identifiers (UTF-8) and their offsets kept at most


class CompactIds(Sequence[str]):
    """Canonical identifiers kept as one UTF-8 buffer per chunk and offsets, not as millions
    of Python strings (which the engine's forked workers would copy page by page as they
    touch them)."""

    def __init__(self) -> None:
        self._parts: list[tuple[bytes, np.ndarray]] = []  # (buffer, offsets) per chunk
        self._starts: list[int] = [0]  # index of each part's first identifier, then the total
        self.nbytes = 0

    def append(self, ids: Sequence[str]) -> None:
        encoded = [i.encode("utf-8") for i in ids]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(e) for e in encoded], out=offsets[1:])
        buffer = b"".join(encoded)
        self._parts.append((buffer, offsets))
        self._starts.append(self._starts[-1] + len(encoded))
        self.nbytes += len(buffer) + offsets.nbytes

    def __len__(self) -> int:
        return self._starts[-1]

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("identifier index out of range")
        return self._decode(index)

    def _decode(self, index: int) -> str:
        starts = self._starts
        part = bisect_right(starts, index) - 1
        buffer, offsets = self._parts[part]
        k = index - starts[part]
        return buffer[offsets[k] : offsets[k + 1]].decode("utf-8")

    def decode_at(self, indices: np.ndarray) -> list[str]:
        """The identifiers at ``indices`` (the engine's batch order: a group of records at a
        time, often one), each in range.  The engine looks for this method by name (a name
        numpy and pandas do not use)."""
        return [self._decode(index) for index in indices.tolist()]


class DrawAhead:
    """The accepted records of a file's checked chunks, drawn in one batch (:meth:`draw`) and
    handed back chunk by chunk, in input order (:meth:`attach`)."""

    def __init__(self) -> None:
        self.ids = CompactIds()
        self._nodes: list[np.ndarray] = []
        self._counts: list[int] = []  # accepted records of each chunk
        self.abandoned = False  # over the limits: the release goes chunk by chunk
        self._drawn: np.ndarray | None = None
        self._chunk = 0
        self._next = 0

    @property
    def records(self) -> int:
        """Records kept so far."""
        return len(self.ids)

    def add(self, pending: PendingChunk) -> None:
        """Keep what the engine needs of this checked chunk's accepted records (in input
        order), unless that would pass the limits; then keep nothing more."""
        if self.abandoned:
            return
        accepted = pending.accepted
        if len(self.ids) + len(accepted) > MAX_RECORDS:
            self._abandon()
            return
        self.ids.append(accepted)
        if self.ids.nbytes > MAX_ID_BYTES:
            self._abandon()
            return
        self._nodes.append(pending.checked.nodes[pending.ok])
        self._counts.append(len(accepted))

    def _abandon(self) -> None:
        self.abandoned = True
        self.ids = CompactIds()
        self._nodes, self._counts = [], []

    def draw(self, plan: ReleasePlan, progress: Callable[[int], None] | None) -> None:
        """Draw every kept record in one engine batch (grouped by postcode across chunks).
        ``progress`` is called as the engine finishes its tasks."""
        if self.abandoned:
            raise RuntimeError("nothing to draw ahead: the limits were passed")
        nodes = np.concatenate(self._nodes) if self._nodes else np.empty(0, dtype=np.int64)
        self._nodes = []
        draws = _start_canonical(
            plan.mechanism,
            plan.key,
            self.ids,
            nodes,
            brackets=plan._brackets,
            progress=progress,
            profiles=plan.profiles,
            quiet=plan.quiet,
        )
        self._drawn = draws.result()  # stops the workers if interrupted
        self.ids = CompactIds()  # the engine is done with them

    def attach(self, pending: PendingChunk) -> None:
        """Give the next chunk (the writing pass re-checks chunks in input order) its
        outputs from the batch, in place of drawing them."""
        drawn = self._drawn
        if drawn is None:
            raise RuntimeError("draw() first")
        count = len(pending.accepted)
        if self._chunk >= len(self._counts) or count != self._counts[self._chunk]:
            # The checks are deterministic: only an input changed between passes gets here.
            raise InputDataError(
                "the input file changed while it was being released; nothing was written"
            )
        pending.use_drawn(drawn[self._next : self._next + count])
        self._chunk += 1
        self._next += count

    def finish(self) -> None:
        """After the writing pass: every chunk drawn was written (a shorter input is refused
        here rather than only by the input's hash at the end)."""
        if self._drawn is None or self._chunk != len(self._counts):
            raise InputDataError(
                "the input file changed while it was being released; nothing was written"
            )
