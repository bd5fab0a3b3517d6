"""The records of one true postcode while the engine samples them, and their member draws.

A *group* is every record of a batch whose true postcode is one node x.  ``Group`` holds what
their keyed streams need; ``Decided`` is a group whose shells are decided, with what drawing its
members needs (engine/fast.py draws it alone, engine/shared_draws.py up to 64 groups in one
sweep).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from ..mechanism.sampler import MEMBER
from ..mechanism.stream import BLOCK_BITS, StreamContext, SubjectStream

__all__ = ["Decided", "Group", "member_value"]


def member_value(
    context: StreamContext, subject_id: str, label: str, n: int, first_block: int
) -> int:
    """The record's ``uniform_int(n, MEMBER)``, its first block already read: attempt 0 keeps
    the top bit_length(n - 1) bits of block 0; only a rejected attempt needs the stream."""
    if n < 1:
        raise ValueError("n must be positive")  # as uniform_int; C rules it out
    drop = BLOCK_BITS - (n - 1).bit_length()
    value = first_block >> drop if n > 1 else 0
    attempt = 0
    while value >= n:  # rejected: attempt c reads block c, as uniform_int does
        attempt += 1
        value = context.block_int(subject_id, label, MEMBER, attempt) >> drop
    return value


class Group:
    """The records of one true postcode being sampled: their stream context, node, identifiers,
    label and first shell blocks, and the keyed streams opened for the few that need more."""

    __slots__ = ("context", "node", "subject_ids", "label", "shell_blocks", "_streams")

    def __init__(
        self,
        context: StreamContext,
        node: int,
        subject_ids: Sequence[str],
        label: str,
        shell_blocks: list[int],
    ):
        self.context, self.node, self.subject_ids = context, node, subject_ids
        self.label, self.shell_blocks = label, shell_blocks
        self._streams: dict[int, SubjectStream] = {}

    def stream(self, r: int) -> SubjectStream:
        """Record r's keyed stream (opened once)."""
        stream = self._streams.get(r)
        if stream is None:
            stream = self._streams[r] = self.context.for_subject(self.subject_ids[r], self.label)
        return stream

    def member_draw(self, r: int, n: int, first_block: int) -> int:
        """Record r's ``uniform_int(n, MEMBER)`` (``member_value``)."""
        return member_value(self.context, self.subject_ids[r], self.label, n, first_block)


class Decided(NamedTuple):
    """A group whose shells are decided, and what drawing its members needs."""

    group: Group
    shells: list[int]
    member_blocks: list[int]
    table_row: np.ndarray | None  # what the guard checks the explored balls against
    floor: np.ndarray | None
    far_row: np.ndarray | None
    table_masses: list[int] | None  # node-shell masses 0 .. D from the table, if read
    pending: list[int]  # records left undecided (``FastSampler.decide`` with ``defer``)
