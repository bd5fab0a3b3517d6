"""Drawing a whole file's records in one engine batch, between the check pass and the writing.

Chunk by chunk, a postcode that recurs across a file is explored again in every chunk that
holds it: for a national file, where most postcodes appear a few times each but rarely twice in
one 100,000-record chunk, the engine works as if every record had a postcode of its own.  When
the check pass reads every chunk anyway (``on_error="error"``, no ledger), it can keep what
the engine needs of each accepted record, its canonical identifier and its node, compactly;
:class:`DrawAhead` then draws them all in one batch, grouped by postcode across the whole file,
and the writing pass attaches each chunk's share of the outputs instead of drawing it (and
instead of checking the chunk again: the check pass has done that, subjects included).

Every output is the one the chunk-by-chunk path gives: the engine's outputs depend on each
record alone, never on how records are batched (docs/performance.md, "Why the outputs are
identical").  Only memory differs: about 50 bytes plus the identifier's length a record, so
a file is drawn ahead only up to :data:`MAX_RECORDS` records and :data:`MAX_ID_BYTES` of
identifiers (with their offsets); past either, the release goes chunk by chunk as before.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_right
from collections.abc import Callable, Generator, Iterable, Sequence
from typing import overload

import numpy as np
import pandas as pd
import pyarrow as pa

from ..engine import start_draws
from ..errors import InputDataError
from .plan import PendingChunk, ReleasePlan

__all__ = ["CompactIds", "DrawAhead", "MAX_ID_BYTES", "MAX_RECORDS"]

MAX_RECORDS = 10_000_000  # records drawn ahead at most (about 0.5 GB with short identifiers)
MAX_ID_BYTES = 256 * 2**20  # bytes of identifiers (UTF-8) and their offsets kept at most


class CompactIds(Sequence[str]):
    """Canonical identifiers kept as one buffer per chunk and offsets, not as millions of
    Python strings (which the engine's forked workers would copy page by page as they touch
    them).  A chunk of ASCII identifiers (the usual case) is kept as one ``str``, sliced
    without decoding; any other as UTF-8 bytes."""

    def __init__(self) -> None:
        # (text or UTF-8 buffer, offsets into it as a memoryview of int64) per chunk
        self._parts: list[tuple[str | bytes, memoryview]] = []
        self._starts: list[int] = [0]  # index of each part's first identifier, then the total
        self.nbytes = 0

    def append(self, ids: Sequence[str]) -> None:
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        joined = "".join(ids)
        text: str | bytes = joined
        if not joined.isascii():  # a character may take several bytes: offsets count bytes
            text = joined.encode("utf-8")
            lengths = np.fromiter((len(i.encode("utf-8")) for i in ids), np.int64, len(ids))
        offsets = np.zeros(len(ids) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        # A memoryview gives Python ints when indexed, several times faster than numpy's.
        self._parts.append((text, offsets.data))
        self._starts.append(self._starts[-1] + len(ids))
        self.nbytes += len(text) + offsets.nbytes

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
        return self.decode_at(np.array([index]))[0]

    def decode_at(self, indices: np.ndarray) -> list[str]:
        """The identifiers at ``indices`` (the engine's batch order: a task of records at a
        time), each in range.  The engine looks for this method by name (a name
        numpy and pandas do not use)."""
        starts, parts = self._starts, self._parts
        out = []
        low = high = 0  # the identifiers of the part last looked in: a group is often in one
        text: str | bytes = ""
        offsets = memoryview(b"")
        for index in indices.tolist():
            if not low <= index < high:
                part = bisect_right(starts, index) - 1
                low, high = starts[part], starts[part + 1]
                text, offsets = parts[part]
            k = index - low
            piece = text[offsets[k] : offsets[k + 1]]
            out.append(piece if isinstance(piece, str) else piece.decode("utf-8"))
        return out


class DrawAhead:
    """The accepted records of a file's checked chunks, drawn in one batch (:meth:`draw`) and
    released chunk by chunk as the writing pass reads them again (:meth:`released_chunks`).

    The check pass has already done each chunk's record checks and noted its subjects
    (:meth:`add`), so the writing pass only attaches the drawn outputs to the rows it reads.
    Those are the records checked and drawn: each chunk read again must have the SHA-256 of
    its cells that the check pass kept (:meth:`_digest`), whatever happened to the file in
    between, and the file's own SHA-256 must be the same at the end of the release as at its
    start (``files.py``).
    """

    def __init__(self, plan: ReleasePlan) -> None:
        self.plan = plan
        self.ids = CompactIds()
        self._nodes: list[np.ndarray] = []
        self._chunks: list[dict[str, int]] = []  # each kept chunk's counts, in input order
        self._digests: list[bytes] = []  # and the digest of its cells (``_digest``)
        self.abandoned = False  # over the limits: the release goes chunk by chunk
        self._all_nodes: np.ndarray | None = None
        self._drawn: np.ndarray | None = None
        self._chunk = 0
        self._next = 0

    @property
    def records(self) -> int:
        """Records kept so far."""
        return len(self.ids)

    def add(self, pending: PendingChunk) -> None:
        """Keep what the engine needs of this checked chunk's records (all accepted; chunks
        in input order) and note its subjects, unless that would pass the limits; then keep
        nothing more, and forget the subjects noted (the chunk-by-chunk release notes them)."""
        if self.abandoned:
            return
        if pending.ok.size != len(pending.df):
            raise ValueError("only chunks whose every record is accepted can be drawn ahead")
        accepted = pending.accepted
        if len(self.ids) + len(accepted) > MAX_RECORDS:
            self._abandon()
            return
        self.ids.append(accepted)
        if self.ids.nbytes > MAX_ID_BYTES:
            self._abandon()
            return
        self._nodes.append(pending.checked.nodes)
        self._chunks.append(pending.checked.check.counts)
        self._digests.append(self._digest(pending.df))
        self.plan.record_subjects(pending, warn=False)

    def _abandon(self) -> None:
        self.abandoned = True
        self.ids = CompactIds()
        self._nodes, self._chunks, self._digests = [], [], []
        self.plan.forget_subjects()

    def draw(self, progress: Callable[[int], None] | None) -> None:
        """Draw every kept record in one engine batch (grouped by postcode across chunks).
        ``progress`` is called as the engine finishes its tasks."""
        if self.abandoned:
            raise RuntimeError("nothing to draw ahead: the limits were passed")
        plan = self.plan
        nodes = np.concatenate(self._nodes) if self._nodes else np.empty(0, dtype=np.int64)
        self._nodes = []
        draws = start_draws(
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
        self._all_nodes = nodes  # kept for the displacement summary
        self.ids = CompactIds()  # the engine is done with them

    def released_chunks(
        self, chunks: Iterable[pd.DataFrame], progress: Callable[[int], None]
    ) -> Generator[tuple[pd.DataFrame, dict[str, int]], None, None]:
        """``(output frame, counts)`` of each chunk of the writing pass (the input read again,
        in order), as ``ReleasePlan.process_chunk`` would give them; then :meth:`finish`."""
        drawn, nodes = self._drawn, self._all_nodes
        if drawn is None or nodes is None:
            raise RuntimeError("draw() first")
        for df in chunks:
            # The digest covers the chunk's length too.  Only an input changed between the
            # passes fails here, even one changed back before its hash is taken at the end.
            if self._chunk >= len(self._digests) or self._digest(df) != self._digests[self._chunk]:
                raise _changed()
            span = slice(self._next, self._next + len(df))
            out = self.plan.released_frame(df, np.arange(len(df)), nodes[span], drawn[span])
            progress(len(df))
            yield out, self._chunks[self._chunk]
            self._chunk += 1
            self._next += len(df)

    @staticmethod
    def _digest(df: pd.DataFrame) -> bytes:
        """SHA-256 of a chunk's cells as read (their Arrow IPC bytes, or their reprs where
        Arrow cannot hold them), so that the writing pass releases exactly the chunks the
        check pass checked, even if the input changed between the passes and was changed
        back before its hash was taken again (docs/release.md, "Nothing is lost")."""
        digest = hashlib.sha256()
        arrow = _arrow_bytes(df)
        if arrow is not None:
            digest.update(b"arrow\0")
            digest.update(arrow)
            return digest.digest()
        digest.update(b"repr\0" + repr(list(df.columns)).encode("utf-8", "surrogatepass"))
        for position in range(df.shape[1]):
            pieces = [repr(cell) for cell in df.iloc[:, position].tolist()]
            digest.update(np.fromiter(map(len, pieces), np.int64, len(pieces)).tobytes())
            digest.update("".join(pieces).encode("utf-8", "surrogatepass"))
        return digest.digest()

    def finish(self) -> None:
        """After the writing pass: every chunk drawn was written (a shorter input is refused
        here rather than only by the input's hash at the end)."""
        if self._drawn is None or self._chunk != len(self._chunks):
            raise _changed()


def _arrow_bytes(df: pd.DataFrame) -> pa.Buffer | None:
    """The Arrow IPC stream of ``df`` (one piece per column, however the reader split its
    text), or None for cells Arrow cannot hold (mixed or unusual Python objects)."""
    try:
        table = pa.Table.from_pandas(df, preserve_index=False).combine_chunks()
    except (pa.ArrowException, TypeError, ValueError):
        return None
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def _changed() -> InputDataError:
    return InputDataError("the input file changed while it was being released; nothing was written")
