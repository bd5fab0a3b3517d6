"""File digests are computed in one place (``postcode_privacy._digest``), by
``hashlib.file_digest``: no module hand-writes its own read-and-hash loop."""

from __future__ import annotations

import ast
import bz2
import gzip
import hashlib
import io
import lzma
import os
from pathlib import Path

import pytest

from postcode_privacy._digest import sha256_of_file
from postcode_privacy.release.writers import uncompressed_sha256

SRC = Path(__file__).parents[1] / "src" / "postcode_privacy"


def _hashes_in_a_read_loop(function: ast.AST) -> bool:
    """Whether ``function`` makes a hash object and, in a loop, reads a file."""
    calls = [n for n in ast.walk(function) if isinstance(n, ast.Call)]
    hashes = any(
        isinstance(c.func, ast.Attribute)
        and isinstance(c.func.value, ast.Name)
        and c.func.value.id == "hashlib"
        and c.func.attr in ("sha256", "new", "sha512", "blake2b")
        for c in calls
    )
    if not hashes:
        return False
    for loop in (n for n in ast.walk(function) if isinstance(n, ast.For | ast.While)):
        for node in ast.walk(loop):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("read", "readinto")
            ):
                return True
    return False


def test_no_module_hand_writes_a_file_hashing_loop():
    offenders = []
    uses = 0
    for path in sorted(SRC.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        uses += source.count("hashlib.file_digest(")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef) and _hashes_in_a_read_loop(node):
                offenders.append(f"{path.relative_to(SRC)}:{node.name}")
    assert offenders == []
    assert uses == 1


def test_a_file_digest_is_its_bytes_digest(tmp_path):
    data = os.urandom(3 * (1 << 18) + 17)  # several of file_digest's blocks, and a part
    (tmp_path / "f").write_bytes(data)
    assert sha256_of_file(tmp_path / "f") == hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize(
    ("suffix", "compress"),
    [(".gz", lambda b: gzip.compress(b, mtime=0)), (".bz2", bz2.compress), (".xz", lzma.compress)],
)
def test_the_uncompressed_digest_never_hashes_the_compressed_file(
    tmp_path, monkeypatch, suffix, compress
):
    """``hashlib.file_digest`` may read a file through its descriptor; a decompressing
    reader's descriptor is the compressed file's.  Run with a file_digest that does so
    whenever it can, the digest is still the CSV text's."""
    text = b"subject,postcode_dp\n" + b"".join(b"%d,BD1 1AA\n" % i for i in range(50_000))
    path = tmp_path / f"out.csv{suffix}"
    path.write_bytes(compress(text))
    real = hashlib.file_digest

    def by_descriptor_when_it_can(fileobj, digest, /):
        try:
            fd = fileobj.fileno()
        except (OSError, io.UnsupportedOperation):
            return real(fileobj, digest)
        with open(os.dup(fd), "rb") as raw:
            return real(raw, digest)

    monkeypatch.setattr(hashlib, "file_digest", by_descriptor_when_it_can)
    assert uncompressed_sha256(path, path.name) == hashlib.sha256(text).hexdigest()
