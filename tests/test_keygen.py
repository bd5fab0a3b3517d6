"""``postcode-privacy keygen``: a new key, created exclusively, owner-only, never overwritten."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from postcode_privacy.cli import main
from postcode_privacy.keyfile import read_key_file


def test_keygen_creates_an_owner_only_key_and_prints_its_fingerprint(tmp_path, capsys):
    path = tmp_path / "release.key"
    assert main(["keygen", "-o", str(path)]) == 0
    out = capsys.readouterr().out
    key = read_key_file(path)
    assert f"fingerprint: {key.fingerprint}" in out
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_text()
    assert text.startswith("postcode-privacy key file v1\n")
    assert text.split("\n")[1][5:] not in out  # the key itself is never printed


def test_keygen_is_owner_only_even_with_a_permissive_umask(tmp_path):
    old = os.umask(0)
    try:
        assert main(["keygen", "-o", str(tmp_path / "a.key")]) == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.key").stat().st_mode) == 0o600


def test_keygen_never_overwrites(tmp_path, capsys):
    path = tmp_path / "release.key"
    assert main(["keygen", "-o", str(path)]) == 0
    before = path.read_bytes()
    capsys.readouterr()
    assert main(["keygen", "-o", str(path)]) == 4
    assert f"refusing to overwrite {path}: a file already exists" in capsys.readouterr().err
    assert path.read_bytes() == before
    other = tmp_path / "other.txt"
    other.write_text("not a key")
    assert main(["keygen", "-o", str(other)]) == 4
    assert other.read_text() == "not a key"


def test_each_key_is_new(tmp_path):
    paths = [tmp_path / f"{i}.key" for i in range(3)]
    for path in paths:
        assert main(["keygen", "-o", str(path)]) == 0
    keys = [read_key_file(p) for p in paths]
    assert len({k.fingerprint for k in keys}) == 3
    assert keys[0] != keys[1]


def test_keygen_into_a_missing_directory_fails_cleanly(tmp_path, capsys):
    path = tmp_path / "missing" / "release.key"
    assert main(["keygen", "-o", str(path)]) == 4
    # (it said "cannot create key file: No such file or directory", naming nothing)
    assert "the key file's directory does not exist" in capsys.readouterr().err
    assert not Path(path).exists()


def test_keygen_requires_an_output(capsys):
    assert main(["keygen"]) == 2
