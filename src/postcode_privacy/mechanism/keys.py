"""The secret key that makes every release deterministic.

A :class:`Key` never shows its secret: its repr is a fingerprint, comparison is constant time,
and the bytes leave only through :meth:`Key.to_file_bytes`, the versioned, checksummed key-file
encoding.  Reading and writing key files is :func:`postcode_privacy.read_key_file` and
:func:`postcode_privacy.write_key_file` (``keyfile.py``); this module does no I/O.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets

from ..errors import KeyFileError

KEY_BYTES = 32
FILE_MAGIC = "postcode-privacy key file v1"
_FINGERPRINT_DOMAIN = b"postcode-privacy/key-fingerprint/v1"


class Key:
    """A secret key of exactly 32 bytes for the keyed stream (HMAC-SHA256).

    Exactly 32, not "at least": HMAC pads a key shorter than its 64-byte block with zero bytes,
    so ``k`` and ``k + b"\\0"`` would give identical releases under different fingerprints.
    With one fixed length, two keys that release identically are the same key.  The all-zero
    key is refused: it is what an unset or wiped buffer looks like, never a generated secret.
    """

    __slots__ = ("_material",)

    def __init__(self, material: bytes):
        if not isinstance(material, (bytes, bytearray)):
            raise TypeError("key material must be bytes")
        if len(material) != KEY_BYTES:
            raise KeyFileError(f"a key must be exactly {KEY_BYTES} bytes")
        if not any(material):
            raise KeyFileError(
                "the key is all zero bytes: not a secret; generate one with "
                "`postcode-privacy keygen`"
            )
        self._material = bytes(material)

    @classmethod
    def generate(cls) -> Key:
        """A fresh 32-byte key from the operating system's CSPRNG."""
        return cls(secrets.token_bytes(KEY_BYTES))

    @classmethod
    def from_bytes(cls, material: bytes) -> Key:
        return cls(material)

    @property
    def fingerprint(self) -> str:
        """16 hex digits identifying the key in manifests; reveals nothing usable about it."""
        return hashlib.sha256(_FINGERPRINT_DOMAIN + self._material).hexdigest()[:16]

    def __repr__(self) -> str:
        return f"<Key fingerprint={self.fingerprint}>"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Key):
            return NotImplemented
        return hmac.compare_digest(self._material, other._material)

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    def __reduce__(self) -> tuple[object, ...]:
        # Pickling would copy the secret silently (e.g. into a Spark plan); make it explicit.
        raise TypeError("Key objects are not picklable; pass the key file instead")

    def to_file_bytes(self) -> bytes:
        """The key-file encoding: a format line, the key in base64, and a checksum line."""
        body = base64.b64encode(self._material).decode("ascii")
        check = hashlib.sha256(FILE_MAGIC.encode() + self._material).hexdigest()[:16]
        return f"{FILE_MAGIC}\nkey: {body}\ncheck: {check}\n".encode("ascii")

    @classmethod
    def from_file_bytes(cls, data: bytes) -> Key:
        """Parse a key file's contents, refusing anything that is not exactly that format."""
        if not data:
            raise KeyFileError("key file is empty")
        try:
            text = data.decode("ascii")
        except UnicodeDecodeError:
            raise KeyFileError("key file is not a postcode-privacy key file") from None
        lines = text.strip().splitlines()
        if not lines or lines[0].strip() != FILE_MAGIC:
            raise KeyFileError(
                "key file is not a postcode-privacy key file (wrong or missing header)"
            )
        if (
            len(lines) != 3
            or not lines[1].startswith("key: ")
            or not lines[2].startswith("check: ")
        ):
            raise KeyFileError("key file is truncated or malformed")
        try:
            material = base64.b64decode(lines[1][5:].strip(), validate=True)
        except (binascii.Error, ValueError):
            raise KeyFileError("key file is malformed (key is not base64)") from None
        check = hashlib.sha256(FILE_MAGIC.encode() + material).hexdigest()[:16]
        if not hmac.compare_digest(check, lines[2][7:].strip()):
            raise KeyFileError("key file checksum does not match (truncated or edited)")
        return cls(material)
