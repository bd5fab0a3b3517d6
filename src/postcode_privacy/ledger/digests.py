"""Keyed digests: the only form in which a ledger stores who was released where.

Construction (docs/ledger.md, "What the ledger stores"):

* three sub-keys are derived from the ledger secret ``s`` (never the release key):
  ``k_X = HMAC-SHA256(s, "postcode-privacy/ledger/v1/" + X)`` for X in subject, pair, draw;
* every field is encoded as a 4-byte big-endian length followed by its UTF-8 bytes, so the
  encoding of a tuple of fields is injective;
* ``subject = HMAC(k_subject, id)``, ``pair = HMAC(k_pair, id, postcode)`` and
  ``draw = HMAC(k_draw, key fingerprint, graph sha256, epsilon text, radius,
  output-stability version, id, postcode)``, each truncated to its first 16 bytes.

``id`` is the canonical subject identifier and ``postcode`` the normalised postcode the
mechanism was given (after a terminated postcode has been mapped to its nearest live one).
The draw digest covers the conditions of docs/threat-model.md, "When repeated releases
count as one" (the key enters as its fingerprint, and the terminated-postcode table through the
live postcode it gives), so two records share a draw digest exactly when they share a released
postcode by construction.
"""

from __future__ import annotations

import hashlib
import hmac
import struct

from ..mechanism.keys import Key

__all__ = ["DIGEST_BYTES", "Digester", "DrawParameters"]

DIGEST_BYTES = 16
_DOMAIN = b"postcode-privacy/ledger/v1/"
_LEN = struct.Struct(">I")


def _field(text: str) -> bytes:
    data = text.encode("utf-8")
    return _LEN.pack(len(data)) + data


class _Hmac:
    """HMAC-SHA256 (RFC 2104) with the key's inner and outer pads absorbed once.

    ``outer.copy().update(inner.copy().update(m).digest())`` equals ``hmac.digest(key, m)``
    (a test checks it); copying the two states saves hashing both pads for every record.
    """

    __slots__ = ("inner", "outer")

    def __init__(self, key: bytes):
        block = key.ljust(64, b"\0")  # keys are 32 bytes, shorter than SHA-256's block
        self.inner = hashlib.sha256(bytes(x ^ 0x36 for x in block))
        self.outer = hashlib.sha256(bytes(x ^ 0x5C for x in block))


class DrawParameters(tuple):
    """The release-wide conditions of a draw: (key fingerprint, graph sha256, epsilon text,
    radius, output-stability version)."""

    def __new__(
        cls,
        key_fingerprint: str,
        graph_sha256: str,
        epsilon: str,
        radius: int,
        output_stability_version: str,
    ):
        return super().__new__(
            cls, (key_fingerprint, graph_sha256, epsilon, int(radius), output_stability_version)
        )

    @property
    def key_fingerprint(self) -> str:
        return self[0]

    @property
    def graph_sha256(self) -> str:
        return self[1]

    @property
    def epsilon(self) -> str:
        return self[2]

    @property
    def radius(self) -> int:
        return self[3]

    @property
    def output_stability_version(self) -> str:
        return self[4]

    def encode(self) -> bytes:
        return b"".join(_field(str(part)) for part in self)


class Digester:
    """Computes the three digests under one ledger secret (contract: module docstring)."""

    __slots__ = ("_subject", "_pair", "_draw", "fingerprint")

    def __init__(self, secret: Key):
        material = secret._material  # the secret never leaves this object
        self._subject = _Hmac(hmac.digest(material, _DOMAIN + b"subject", "sha256"))
        self._pair = _Hmac(hmac.digest(material, _DOMAIN + b"pair", "sha256"))
        self._draw = _Hmac(hmac.digest(material, _DOMAIN + b"draw", "sha256"))
        self.fingerprint = secret.fingerprint

    def __repr__(self) -> str:
        return f"<Digester secret={self.fingerprint}>"

    def __reduce__(self):
        raise TypeError("Digester objects hold a secret and are not picklable")

    def digests(
        self, params: DrawParameters, subjects: list[str], postcodes: list[str]
    ) -> tuple[list[bytes], list[bytes], list[bytes]]:
        """(subject, pair, draw) digests of each (subject id, postcode), in order."""
        n = DIGEST_BYTES
        s_in, s_out = self._subject.inner, self._subject.outer
        p_in, p_out = self._pair.inner, self._pair.outer
        # The draw's release-wide prefix is absorbed once; each record continues from a copy.
        d_in = self._draw.inner.copy()
        d_in.update(params.encode())
        d_out = self._draw.outer
        subject_out: list[bytes] = []
        pair_out: list[bytes] = []
        draw_out: list[bytes] = []
        add_s, add_p, add_d = subject_out.append, pair_out.append, draw_out.append
        pack = _LEN.pack
        for sid, pc in zip(subjects, postcodes):
            a = sid.encode("utf-8")
            b = pc.encode("utf-8")
            s = pack(len(a)) + a
            sp = s + pack(len(b)) + b
            h = s_in.copy()
            h.update(s)
            o = s_out.copy()
            o.update(h.digest())  # noqa: E702
            add_s(o.digest()[:n])
            h = p_in.copy()
            h.update(sp)
            o = p_out.copy()
            o.update(h.digest())  # noqa: E702
            add_p(o.digest()[:n])
            h = d_in.copy()
            h.update(sp)
            o = d_out.copy()
            o.update(h.digest())  # noqa: E702
            add_d(o.digest()[:n])
        return subject_out, pair_out, draw_out
