"""Who recorded a pending release (ledger/owner.py; docs/ledger.md, "Atomicity")."""

from __future__ import annotations

import os
import socket

import pytest

from postcode_privacy.ledger import owner as owner_module
from postcode_privacy.ledger.owner import Owner

BOOT = "0123abcd-0000-4000-8000-00000000cafe"


def test_an_owner_reads_back_exactly_whatever_its_host_name():
    for host in ("node-1", "a;b:c", "", "host:with:colons"):
        owner = Owner(BOOT, 4026531836, (64, 1234), host, 4321)
        text = owner.to_text()
        assert text == f"owner2;{BOOT};4026531836;64,1234;{host}:4321"
        assert Owner.from_text(text) == owner
    unknown = Owner(None, None, None, "h", 1)
    assert unknown.to_text() == "owner2;-;-;-;h:1"
    assert Owner.from_text("owner2;-;-;-;h:1") == unknown


def test_the_current_owner_is_this_process_in_its_output_directory(tmp_path):
    owner = Owner.current(tmp_path)
    info = os.stat(tmp_path)
    assert (owner.host, owner.pid, owner.directory) == (
        socket.gethostname(),
        os.getpid(),
        (info.st_dev, info.st_ino),
    )
    if os.path.exists("/proc/sys/kernel/random/boot_id"):
        with open("/proc/sys/kernel/random/boot_id") as handle:
            assert owner.boot_id == handle.read().strip()
        assert owner.pid_namespace == os.stat("/proc/self/ns/pid").st_ino
        assert owner.ran_here() and owner.wrote_into(tmp_path) and owner.is_alive()
    assert not owner.wrote_into(tmp_path / "missing")


def test_the_older_format_reads_as_an_owner_that_never_ran_here():
    old = Owner.from_text(f"{socket.gethostname()}:1")
    assert old == Owner(None, None, None, socket.gethostname(), 1)
    assert not old.ran_here()


@pytest.mark.skipif(
    not os.path.exists("/proc/sys/kernel/random/boot_id"), reason="no boot id on this platform"
)
@pytest.mark.parametrize("part", ["boot_id", "pid_namespace", "host", "unknown"])
def test_an_owner_ran_here_only_if_every_part_is_known_and_ours(tmp_path, part):
    here = Owner.current(tmp_path)
    changed = {
        "boot_id": Owner(BOOT, here.pid_namespace, here.directory, here.host, here.pid),
        "pid_namespace": Owner(
            here.boot_id, (here.pid_namespace or 0) + 1, here.directory, here.host, here.pid
        ),
        "host": Owner(here.boot_id, here.pid_namespace, here.directory, here.host + "x", here.pid),
        "unknown": Owner(None, here.pid_namespace, here.directory, here.host, here.pid),
    }[part]
    assert here.ran_here() and not changed.ran_here()


def test_an_owner_never_ran_here_where_this_process_cannot_tell(tmp_path, monkeypatch):
    recorded = Owner.current(tmp_path)
    monkeypatch.setattr(owner_module, "boot_id", lambda: None)
    assert not recorded.ran_here()
    monkeypatch.undo()
    monkeypatch.setattr(owner_module, "pid_namespace", lambda: None)
    assert not recorded.ran_here()


def test_a_stopped_process_is_not_alive():
    assert Owner(None, None, None, "h", os.getpid()).is_alive()
    assert not Owner(None, None, None, "h", 999_999_999).is_alive()


@pytest.mark.parametrize(
    "text",
    [
        "",
        "h",
        "h:",
        "h:0",
        "h:-1",
        "h:+1",
        "h: 1",
        "h:1_0",
        "h:\u0663",
        "h:2147483648",
        "owner2;",
        "owner2;-;-;-",
        f"owner2;{BOOT.upper()};1;1,1;h:1",
        "owner2;not-a-boot;1;1,1;h:1",
        f"owner2;{BOOT};x;1,1;h:1",
        f"owner2;{BOOT};1;1;h:1",
        f"owner2;{BOOT};1;1,;h:1",
        f"owner2;{BOOT};1;1,1;h",
        None,
        b"h:1",
    ],
)
def test_a_garbled_owner_is_a_value_error(text):
    with pytest.raises(ValueError, match="owner|number|boot id|process id"):
        Owner.from_text(text)
