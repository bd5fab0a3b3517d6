"""A real PostgreSQL server for the ledger tests, started on 127.0.0.1 (test helper).

Debian's ``postgresql`` package provides the binaries (``.ci/run`` installs it when it can).
As root, ``initdb`` and ``postgres`` run as the ``postgres`` user through ``runuser``.  The
data directory is temporary and the port free; the server is stopped at the end.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time


def postgres_bin() -> str | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    if found:
        return os.path.dirname(found[-1])
    path = shutil.which("postgres")
    return os.path.dirname(path) if path else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    def __init__(self, bindir: str):
        self.bindir = bindir
        self.root = tempfile.mkdtemp(prefix="pp-ledger-pg-")
        self.data = os.path.join(self.root, "data")
        self.port = _free_port()
        self.user = "postgres" if os.getuid() == 0 else None
        if self.user:
            shutil.chown(self.root, self.user)
        self._run(
            [
                os.path.join(bindir, "initdb"),
                "-D",
                self.data,
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ]
        )
        # (a port free when chosen may be taken before the server binds it: then another)
        for attempt in range(3):
            self.proc = self._start(bindir)
            if self._ready():
                break
            if attempt == 2:
                self.stop()
                raise RuntimeError("the PostgreSQL test server did not start")
            self._end_process()  # (one that could not bind the port has exited already)
            self.port = _free_port()
        self._databases = 0

    def _start(self, bindir: str) -> subprocess.Popen:
        return subprocess.Popen(
            self._as_user(
                [
                    os.path.join(bindir, "postgres"),
                    "-D",
                    self.data,
                    "-p",
                    str(self.port),
                    "-h",
                    "127.0.0.1",
                    "-k",
                    self.root,
                    "-c",
                    "fsync=off",
                ]
            ),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def _ready(self) -> bool:
        """Whether the server accepts a session within a minute (False once it has exited).
        An open port is not enough: for some milliseconds after it listens, the server refuses
        sessions while it starts up ("the database system is starting up")."""
        import psycopg

        deadline = time.monotonic() + 60
        while self.proc.poll() is None and time.monotonic() < deadline:
            try:
                with psycopg.connect(self.url("postgres"), connect_timeout=2) as conn:
                    # (the port may be another server's, one that took it first: another
                    # test process's, under pytest -n; then this one fails to bind, and exits)
                    where = conn.execute("SHOW data_directory").fetchone()[0]
                return os.path.realpath(where) == os.path.realpath(self.data)
            except psycopg.OperationalError:
                time.sleep(0.2)
        return False

    def _as_user(self, argv: list[str]) -> list[str]:
        return ["runuser", "-u", self.user, "--", *argv] if self.user else argv

    def _run(self, argv: list[str]) -> None:
        subprocess.run(
            self._as_user(argv), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )

    def new_database(self) -> str:
        import psycopg

        self._databases += 1
        name = f"ledger_{self._databases}"
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        self._end_process()
        shutil.rmtree(self.root, ignore_errors=True)

    def _end_process(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
