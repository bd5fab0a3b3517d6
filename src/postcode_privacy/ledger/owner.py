"""Who recorded a pending release, told apart well enough to abandon it safely
(docs/ledger.md, "Atomicity").

A host name and a process id do not identify a run: two machines (containers, VMs, cluster
nodes) can share a host name and a ledger, and a process id is reused after a reboot and means
another process in another PID namespace.  So a release's owner is recorded as

    owner2;BOOT;PIDNS;DEV,INO;HOST:PID

the kernel's boot id (``/proc/sys/kernel/random/boot_id``), the inode of the PID namespace
(``/proc/self/ns/pid``), the output directory's ``(st_dev, st_ino)``, the host name and the
process id; ``-`` marks a part this platform could not tell.  The host name comes last, so
that any character in it (even ``;`` or ``:``) reads back unchanged.

Invariant (:meth:`Owner.ran_here`): an owner counts as "this machine and PID namespace" only
when its boot id, PID namespace and host name are all known and equal to ours; an owner in the
older ``HOST:PID`` format, or with any part unknown, never does, so its release is never
abandoned here (it keeps counting: an over-count, never an under-count).
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass

__all__ = ["Owner", "OWNER_FORMAT", "directory_identity"]

OWNER_FORMAT = "owner2"
_UNKNOWN = "-"
_BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"
_PID_NAMESPACE_FILE = "/proc/self/ns/pid"
_BOOT_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_NUMBER = re.compile(r"[0-9]{1,20}")  # ASCII digits only: int() would also take " 1", "1_0", "١"
_MAX_PID = 2**31 - 1  # os.kill takes a C int: a larger number would raise OverflowError


@dataclass(frozen=True)
class Owner:
    """The run that recorded a release.  ``None`` (or an empty host) marks a part unknown."""

    boot_id: str | None
    pid_namespace: int | None
    directory: tuple[int, int] | None  # (st_dev, st_ino) of the output's directory
    host: str
    pid: int

    @classmethod
    def current(cls, output_directory: str | os.PathLike) -> Owner:
        """This process, about to write into ``output_directory``."""
        return cls(
            boot_id(),
            pid_namespace(),
            directory_identity(output_directory),
            socket.gethostname(),
            os.getpid(),
        )

    def to_text(self) -> str:
        device_inode = _UNKNOWN if self.directory is None else "{},{}".format(*self.directory)
        return ";".join(
            (
                OWNER_FORMAT,
                self.boot_id or _UNKNOWN,
                _UNKNOWN if self.pid_namespace is None else str(self.pid_namespace),
                device_inode,
                f"{self.host}:{self.pid}",
            )
        )

    @classmethod
    def from_text(cls, text: object) -> Owner:
        """Parse a stored owner; ``ValueError`` if it is neither format (a hand edit, damage).

        The older ``HOST:PID`` format reads as an owner with every other part unknown."""
        if not isinstance(text, str):
            raise ValueError("an owner is text")
        if not text.startswith(OWNER_FORMAT + ";"):
            return cls(None, None, None, *_host_and_pid(text))
        parts = text.split(";", 4)
        if len(parts) != 5:
            raise ValueError("an owner has five parts")
        _, boot, namespace, device_inode, host_pid = parts
        if boot != _UNKNOWN and not _BOOT_ID.fullmatch(boot):
            raise ValueError("not a boot id")
        directory = None
        if device_inode != _UNKNOWN:
            device, _, inode = device_inode.partition(",")
            directory = (_number(device), _number(inode))
        return cls(
            None if boot == _UNKNOWN else boot,
            None if namespace == _UNKNOWN else _number(namespace),
            directory,
            *_host_and_pid(host_pid),
        )

    def ran_here(self) -> bool:
        """Whether this owner's run was on this machine, in this boot and PID namespace, so
        that its process id means a process this one can look up.  False when any part is
        unknown on either side."""
        here_boot, here_namespace = boot_id(), pid_namespace()
        return (
            self.boot_id is not None
            and self.pid_namespace is not None
            and bool(self.host)
            and here_boot is not None
            and here_namespace is not None
            and self.boot_id == here_boot
            and self.pid_namespace == here_namespace
            and self.host == socket.gethostname()
        )

    def wrote_into(self, output_directory: str | os.PathLike) -> bool:
        """Whether the directory this process sees at that path is the one the owner recorded
        (the same path on another machine, or remounted, is another directory)."""
        return self.directory is not None and self.directory == directory_identity(output_directory)

    def is_alive(self) -> bool:
        """Whether a process with the owner's id exists (precondition: :meth:`ran_here`,
        without which the id names nothing this process can look up; and on a platform
        without PID namespaces, where ``os.kill`` may not merely probe, it is never reached).
        A process that exists but is not ours (permission denied, an id reused) counts as
        alive: when in doubt, the release is not abandoned."""
        if self.pid == os.getpid():
            return True  # this process's own recorder settles its release itself
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except OSError:
            return True
        return True


def boot_id() -> str | None:
    """This kernel's boot id (a random UUID per boot; containers share their host's), or None."""
    try:
        with open(_BOOT_ID_FILE, encoding="ascii") as handle:
            text = handle.read(64).strip()
    except (OSError, ValueError):
        return None
    return text if _BOOT_ID.fullmatch(text) else None


def pid_namespace() -> int | None:
    """The inode of this process's PID namespace, or None where it cannot be read."""
    try:
        return os.stat(_PID_NAMESPACE_FILE).st_ino
    except (OSError, ValueError):
        return None


def directory_identity(directory: str | os.PathLike) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of a directory, or None if it cannot be looked up."""
    try:
        info = os.stat(directory)
    except (OSError, ValueError):
        return None
    return (info.st_dev, info.st_ino)


def _number(text: str) -> int:
    if not _NUMBER.fullmatch(text):
        raise ValueError("not a number")
    return int(text)


def _host_and_pid(text: str) -> tuple[str, int]:
    host, colon, pid = text.rpartition(":")
    if not colon:
        raise ValueError("no process id")
    number = _number(pid)
    if not 1 <= number <= _MAX_PID:
        raise ValueError("not a process id")
    return host, number
