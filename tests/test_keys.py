"""Keys: secret never shown, constant-time equality, a key-file format that cannot be confused."""

from __future__ import annotations

import os
import pickle
import stat

import pytest
from hostile_files import fifo_nobody_writes

from postcode_privacy import Key, KeyFileError
from postcode_privacy.keyfile import read_key_file, write_key_file


def test_generate_gives_32_fresh_bytes():
    a, b = Key.generate(), Key.generate()
    assert a != b
    assert len(a._material) == 32


def test_short_keys_refused():
    with pytest.raises(KeyFileError):
        Key.from_bytes(b"x" * 31)
    assert Key.from_bytes(b"x" * 32) == Key.from_bytes(b"x" * 32)


def test_repr_shows_fingerprint_only():
    key = Key.from_bytes(bytes(range(32)))
    text = repr(key) + str(key)
    assert key.fingerprint in text
    assert bytes(range(32)).hex() not in text
    assert len(key.fingerprint) == 16
    assert "AAECAwQF" not in text  # base64 of the material


def test_not_picklable():
    with pytest.raises(TypeError):
        pickle.dumps(Key.generate())


def test_file_round_trip_exclusive_owner_only(tmp_path):
    key = Key.generate()
    path = tmp_path / "k.key"
    write_key_file(key, path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert read_key_file(path) == key
    with pytest.raises(KeyFileError, match="overwrite"):
        write_key_file(Key.generate(), path)
    assert read_key_file(path) == key  # untouched


@pytest.mark.parametrize(
    "mangle",
    [
        lambda d: b"",
        lambda d: d[: len(d) // 2],
        lambda d: d.replace(b"v1", b"v2"),
        lambda d: d.replace(d.split(b"\n")[1][6:10], b"AAAA"),
        lambda d: d.split(b"\n")[1],
        lambda d: bytes(range(32)).hex().encode(),
        lambda d: b"\xff\xfe" + d,
    ],
)
def test_malformed_key_files_refused(tmp_path, mangle):
    data = Key.from_bytes(bytes(range(32))).to_file_bytes()
    path = tmp_path / "bad.key"
    path.write_bytes(mangle(data))
    path.chmod(0o600)  # so that the content, not the permissions, is what is refused
    with pytest.raises(KeyFileError):
        read_key_file(path)


def test_missing_key_file(tmp_path):
    with pytest.raises(KeyFileError, match=r"^the key file does not exist: .*nope$"):
        read_key_file(tmp_path / "nope")


def test_top_level_key_file_functions(tmp_path):
    import postcode_privacy

    key = Key.generate()
    postcode_privacy.write_key_file(key, tmp_path / "k")
    assert postcode_privacy.read_key_file(tmp_path / "k") == key
    assert stat.S_IMODE(os.stat(tmp_path / "k").st_mode) == 0o600
    with pytest.raises(KeyFileError):
        postcode_privacy.write_key_file(Key.generate(), tmp_path / "k")
    assert not hasattr(Key, "save") and not hasattr(Key, "load")  # one key-file API


def test_exactly_32_bytes_so_padding_cannot_make_a_second_key():
    # HMAC pads short keys with zero bytes: k and k + b"\0" would release identically under
    # two fingerprints.  Only one of them can be a key.
    material = bytes(range(1, 33))
    assert Key.from_bytes(material).fingerprint
    for other in (material + b"\0", material + b"\0" * 32, material * 2, material[:31]):
        with pytest.raises(KeyFileError, match="exactly 32 bytes"):
            Key.from_bytes(other)


def test_all_zero_key_refused():
    with pytest.raises(KeyFileError, match="all zero"):
        Key.from_bytes(bytes(32))


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644, 0o660, 0o606, 0o610])
def test_key_file_open_to_group_or_others_refused(tmp_path, mode):
    path = tmp_path / "k.key"
    write_key_file(Key.generate(), path)
    path.chmod(mode)
    with pytest.raises(KeyFileError, match="chmod 600") as refused:
        read_key_file(path)
    assert f"{mode:04o}" in str(refused.value)
    path.chmod(0o600)
    assert read_key_file(path).fingerprint  # the same file, owner-only, is accepted
    path.chmod(0o400)
    assert read_key_file(path).fingerprint


def test_long_key_files_from_older_versions_are_refused(tmp_path):
    # A 33-byte key written by the old format (same v1 layout) no longer loads.
    import base64
    import hashlib

    from postcode_privacy.mechanism.keys import FILE_MAGIC

    material = bytes(range(1, 34))
    check = hashlib.sha256(FILE_MAGIC.encode() + material).hexdigest()[:16]
    path = tmp_path / "old.key"
    path.write_text(f"{FILE_MAGIC}\nkey: {base64.b64encode(material).decode()}\ncheck: {check}\n")
    path.chmod(0o600)
    with pytest.raises(KeyFileError, match="exactly 32 bytes"):
        read_key_file(path)


@pytest.mark.skipif(os.name != "posix", reason="FIFOs and devices are POSIX")
def test_a_key_path_that_is_no_regular_file_is_read_or_refused_without_waiting(tmp_path):
    """A pipe holding a key (process substitution, ``/dev/fd/N``) is read; a FIFO nobody
    writes to is an empty key file at once, never a wait for ever (through the CLI too, with
    the key-file exit code); a directory or a device is refused whatever its mode."""
    import subprocess
    import sys
    import time

    from postcode_privacy import Key, read_key_file, write_key_file
    from postcode_privacy.errors import KeyFileError

    good = tmp_path / "good.key"
    write_key_file(Key.from_bytes(bytes(range(1, 33))), good)
    read, write = os.pipe()
    os.write(write, good.read_bytes())
    os.close(write)
    try:
        assert read_key_file(f"/dev/fd/{read}") == read_key_file(good)
    finally:
        os.close(read)
    fifo = tmp_path / "fifo.key"
    fifo_nobody_writes(fifo).chmod(0o600)  # (fails, not hangs, if the read waits)
    started = time.monotonic()
    with pytest.raises(KeyFileError):
        read_key_file(fifo)
    assert time.monotonic() - started < 5
    wide = tmp_path / "keydir"
    wide.mkdir(mode=0o755)
    narrow = tmp_path / "privatedir"
    narrow.mkdir(mode=0o700)
    for path in (wide, narrow, "/dev/null"):
        with pytest.raises(KeyFileError, match="not a regular file or a pipe"):
            read_key_file(path)
    big = tmp_path / "big.key"
    big.write_bytes(b"x" * 5000)
    big.chmod(0o600)
    with pytest.raises(KeyFileError, match="too large"):
        read_key_file(big)
    cli = [sys.executable, "-m", "postcode_privacy", "perturb", "in.csv", "-o", "out.csv"]
    cli += ["--key", str(fifo), "--epsilon", "1", "--id-column", "a", "--postcode-column", "b"]
    (tmp_path / "in.csv").write_text("a,b\n1,LS1 1AA\n")
    done = subprocess.run(cli, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 4 and "Traceback" not in done.stderr
    assert not (tmp_path / "out.csv").exists()
