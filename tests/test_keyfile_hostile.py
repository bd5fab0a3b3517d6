"""Key files and the terminated-postcode sidecar against a hostile or mistaken user: a file that
is no key is called so before any advice on its permissions, an empty path is named as such,
``keygen`` never writes over a file, the permission message is true of a ledger's secret too,
and a sidecar that is a FIFO, a device or far too large is refused without being read."""

from __future__ import annotations

import os

import pytest
from test_build_hostile import fifo_nobody_writes

from postcode_privacy.cli import main
from postcode_privacy.errors import ArtefactError, KeyFileError
from postcode_privacy.keyfile import read_key_file, write_key_file
from postcode_privacy.ledger import Ledger
from postcode_privacy.mechanism import Key
from postcode_privacy.release.terminated import read_sidecar

posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")


@posix_only
@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"QZXSECRET not a key\n", "not a postcode-privacy key file"),
        (b"", "empty"),
        (b"x" * 5000, "too large to be a key file"),
    ],
)
def test_a_file_that_is_no_key_is_not_given_permission_advice(tmp_path, content, expected):
    path = tmp_path / "data.txt"
    path.write_bytes(content)
    path.chmod(0o644)
    with pytest.raises(KeyFileError, match=expected) as excinfo:
        read_key_file(path)
    assert "chmod" not in str(excinfo.value)
    assert "QZX" not in str(excinfo.value)


@posix_only
def test_an_open_key_file_is_still_refused_with_the_advice(tmp_path):
    path = tmp_path / "k.key"
    write_key_file(Key.generate(), path)
    path.chmod(0o640)
    with pytest.raises(KeyFileError, match="chmod 600") as excinfo:
        read_key_file(path)
    # True of a ledger's secret as much as of a release key: no talk of releases.
    assert "release" not in str(excinfo.value)


@posix_only
def test_the_ledger_secret_permission_message_is_true_of_it(tmp_path):
    location = str(tmp_path / "ledger.db")
    Ledger.init(location).store.close()
    os.chmod(location + ".key", 0o644)
    with pytest.raises(KeyFileError, match="the ledger's secret: .*chmod 600") as excinfo:
        Ledger.open(location)
    assert "release" not in str(excinfo.value)


def test_an_empty_key_path_is_named_as_empty(tmp_path, capsys):
    with pytest.raises(KeyFileError, match="key file path is empty"):
        read_key_file("")
    with pytest.raises(KeyFileError, match="key file path is empty"):
        write_key_file(Key.generate(), "")
    assert main(["keygen", "-o", ""]) == 4
    assert "key file path is empty" in capsys.readouterr().err


def test_keygen_never_writes_over_a_file_and_says_what_is_there(tmp_path, capsys):
    data = tmp_path / "records.csv"
    data.write_bytes(b"id,postcode\n")
    assert main(["keygen", "-o", str(data)]) == 4
    err = capsys.readouterr().err
    assert f"refusing to overwrite {data}: a file already exists there" in err
    assert "choose a new name" in err
    assert data.read_bytes() == b"id,postcode\n"


def test_a_fifo_sidecar_is_refused_without_waiting(tmp_path):
    fifo = fifo_nobody_writes(tmp_path / "g.ppgraph.terminated.parquet", after=3)
    with pytest.raises(ArtefactError, match="sidecar is not a regular file"):
        read_sidecar(fifo)


@pytest.mark.skipif(not os.path.exists("/dev/null"), reason="needs /dev/null")
def test_a_device_sidecar_is_refused():
    with pytest.raises(ArtefactError, match="sidecar is not a regular file"):
        read_sidecar("/dev/null")


def test_a_sidecar_larger_than_any_is_refused_unread(tmp_path):
    path = tmp_path / "g.ppgraph.terminated.parquet"
    with open(path, "wb") as handle:
        handle.truncate(300 * 2**20)  # sparse: no disk, and it must not be read into memory
    with pytest.raises(ArtefactError, match="sidecar is larger than 256 MiB"):
        read_sidecar(path)
