"""The keyed stream: the only source of randomness in any output.

Every draw is derived from HMAC-SHA256 under the secret key over an unambiguous encoding of
everything that must be unchanged for a repeated release to be identical (docs/threat-model.md,
"When repeated releases count as one"): a domain tag, the output-stability version, the graph's
content hash, epsilon, the radius, the subject identifier and the normalised postcode.  Each
use (the shell uniform, the within-shell draw, each tail attempt) reads its own sub-stream, so
the bits one draw consumes never shift another.  Encoding: docs/spec.md, "Keyed stream".
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable

from .keys import Key

DOMAIN = b"postcode-privacy/draw/v1"
BLOCK_BITS = 256
_BLOCK_SUFFIXES: dict[tuple[bytes, int], bytes] = {}  # (label, 0, counter) encodings


def _field(data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + data


def _u64(value: int) -> bytes:
    return _field(value.to_bytes(8, "big"))


def _block_suffix(label: bytes, counter: int) -> bytes:
    """The encoding of (label, index 0, counter) that ends a block's message, kept for the
    counters met in practice (below 64), so the cache stays small."""
    suffix = _BLOCK_SUFFIXES.get((label, counter))
    if suffix is None:
        suffix = _field(label) + _u64(0) + _u64(counter)
        if counter < 64:
            _BLOCK_SUFFIXES[label, counter] = suffix
    return suffix


def _message_head(subject_id: str, postcode: str) -> bytes:
    """The encoding of (subject, postcode) that follows the context's fields in every block's
    message (``for_subject`` feeds the same bytes in two updates)."""
    data, place = subject_id.encode("utf-8"), postcode.encode("utf-8")
    return b"".join((len(data).to_bytes(4, "big"), data, len(place).to_bytes(4, "big"), place))


class StreamContext:
    """The per-release part of the encoding, hashed once and copied per subject."""

    def __init__(
        self, key: Key, *, stability_version: str, graph_sha256: str, epsilon_text: str, radius: int
    ):
        mac = hmac.new(key._material, digestmod=hashlib.sha256)
        for part in (
            DOMAIN,
            stability_version.encode(),
            graph_sha256.encode(),
            epsilon_text.encode(),
            str(radius).encode(),
        ):
            mac.update(_field(part))
        self._mac = mac
        # The C object behind hmac.HMAC when there is one (same copy/update/digest, less
        # overhead per call), for the engine's batched blocks; the Python object otherwise.
        self._root = getattr(mac, "_hmac", None) or mac

    def for_subject(self, subject_id: str, postcode: str) -> SubjectStream:
        mac = self._mac.copy()
        mac.update(_field(subject_id.encode("utf-8")))
        mac.update(_field(postcode.encode("utf-8")))
        return SubjectStream(mac)

    def first_blocks(
        self, subject_ids: Iterable[str], postcode: str, labels: tuple[bytes, ...]
    ) -> list[list[int]]:
        """For many subjects at one postcode: block (label, 0, 0) of each label, as integers.

        ``result[j][r]`` equals ``int.from_bytes(self.for_subject(subject_ids[r],
        postcode).block(labels[j], 0, 0), "big")``: the same HMAC over the same bytes (HMAC
        input may be fed in any split), without building a stream object per subject.  Used
        by the batch engine, where these blocks are nearly all a record ever reads.
        """
        place = _field(postcode.encode("utf-8"))
        suffixes = [_block_suffix(label, 0) for label in labels]
        out: list[list[int]] = [[] for _ in labels]
        from_bytes, copy = int.from_bytes, self._root.copy
        columns = list(zip(out, suffixes))
        for subject_id in subject_ids:
            data = subject_id.encode("utf-8")
            head = len(data).to_bytes(4, "big") + data + place  # _field(data) + place
            # One update of the whole message per block: the message is short, so sharing a
            # copy that has hashed the head saves no hashing, only adds calls.
            for column, suffix in columns:
                mac = copy()
                mac.update(head + suffix)
                column.append(from_bytes(mac.digest(), "big"))
        return out

    def first_blocks_of(
        self, subject_id: str, postcode: str, labels: tuple[bytes, ...]
    ) -> list[int]:
        """``first_blocks`` for one subject: block (label, 0, 0) of each label, as integers
        (``result[j]`` is ``first_blocks([subject_id], postcode, labels)[j][0]``), without its
        lists of lists."""
        return [
            int.from_bytes(block, "big")
            for block in self.first_block_bytes((subject_id,), (postcode,), labels)
        ]

    def first_block_bytes(
        self, subject_ids: Iterable[str], postcodes: Iterable[str], labels: tuple[bytes, ...]
    ) -> list[bytes]:
        """For many (subject, postcode) pairs: block (label, 0, 0) of each label, the pairs'
        blocks joined in order (``result[j][32 r : 32 r + 32]`` is the r-th pair's block of
        ``labels[j]``), for the engine to read as arrays (engine/alone.py)."""
        suffixes = [_block_suffix(label, 0) for label in labels]
        out: list[list[bytes]] = [[] for _ in labels]
        copy = self._root.copy
        columns = list(zip(out, suffixes))
        for subject_id, postcode in zip(subject_ids, postcodes, strict=True):
            head = _message_head(subject_id, postcode)
            for column, suffix in columns:
                mac = copy()
                mac.update(head + suffix)
                column.append(mac.digest())
        return [b"".join(column) for column in out]

    def block_int(self, subject_id: str, postcode: str, label: bytes, counter: int) -> int:
        """``int.from_bytes(self.for_subject(subject_id, postcode).block(label, 0, counter),
        "big")``: the same HMAC over the same bytes in one update, as ``first_blocks`` does,
        for the engine's rejected within-shell attempts (about a quarter of the records)."""
        mac = self._root.copy()
        mac.update(_message_head(subject_id, postcode) + _block_suffix(label, counter))
        return int.from_bytes(mac.digest(), "big")


class SubjectStream:
    """Sub-streams for one (subject, postcode): ``block(label, index, counter)``."""

    __slots__ = ("_mac",)

    def __init__(self, mac: hmac.HMAC) -> None:
        self._mac = mac

    def block(self, label: bytes, index: int, counter: int) -> bytes:
        mac = self._mac.copy()
        mac.update(_field(label) + _u64(index) + _u64(counter))
        return mac.digest()

    def uniform_int(self, n: int, label: bytes, index: int = 0) -> int:
        """Uniform integer in [0, n) without modulo bias (docs/spec.md, "Uniform integers").

        Attempt c reads block c of the sub-stream and keeps its top k = bit_length(n - 1) bits;
        the first value below n is returned.  Each attempt succeeds with probability > 1/2.
        """
        if n < 1:
            raise ValueError("n must be positive")
        if n == 1:
            return 0
        k = (n - 1).bit_length()
        if k > BLOCK_BITS:
            raise ValueError("n is too large for one block")
        counter = 0
        while True:
            value = int.from_bytes(self.block(label, index, counter), "big") >> (BLOCK_BITS - k)
            if value < n:
                return value
            counter += 1

    def uniform_bits(self, label: bytes, blocks: int) -> int:
        """The first ``blocks * 256`` bits of the uniform real U in [0, 1), as an integer."""
        value = 0
        for counter in range(blocks):
            value = (value << BLOCK_BITS) | int.from_bytes(self.block(label, 0, counter), "big")
        return value


class LazyUniform:
    """U in [0, 1) read lazily: known to lie in [u / 2**k, (u + 1) / 2**k)."""

    __slots__ = ("_stream", "_label", "blocks", "u")

    def __init__(self, stream: SubjectStream, label: bytes):
        self._stream, self._label = stream, label
        self.blocks = 1
        self.u = stream.uniform_bits(label, 1)

    @property
    def bits(self) -> int:
        return self.blocks * BLOCK_BITS

    def refine(self) -> None:
        block = self._stream.block(self._label, 0, self.blocks)
        self.u = (self.u << BLOCK_BITS) | int.from_bytes(block, "big")
        self.blocks += 1
