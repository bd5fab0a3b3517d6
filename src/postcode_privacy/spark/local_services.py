"""Spark services on this machine, bound to 127.0.0.1: a standalone master and worker, and a
Spark Connect server, each a separate JVM started from the pip-installed PySpark.

For tests, benchmarks and trying the Spark path out (docs/spark.md, "Trying it on one
machine"); not for production clusters.  Every service is started in its own process group and
stopped by its process id (SIGTERM, then SIGKILL after a grace period), so that nothing it
spawned (executors, Python workers) outlives it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HOST = "127.0.0.1"
CONNECT_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


def spark_home() -> Path:
    """The Spark distribution inside the installed PySpark package (bin/, sbin/, jars/)."""
    import pyspark

    return Path(pyspark.__file__).parent


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


@dataclass
class Service:
    """One JVM started by this module; ``stop`` ends it and its process group."""

    name: str
    process: subprocess.Popen
    log: Path
    port: int

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_until_listening(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with code {self.process.returncode}; see {self.log}"
                )
            try:
                socket.create_connection((HOST, self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.5)
        raise TimeoutError(
            f"{self.name} did not listen on {HOST}:{self.port} within "
            f"{timeout:.0f} s; see {self.log}"
        )

    def stop(self, grace: float = 20) -> None:
        """End the service's process group (the JVM was started as its leader), by id."""
        if self.process.poll() is None:
            with _ignore_missing():
                os.killpg(self.pid, signal.SIGTERM)
            try:
                self.process.wait(grace)
            except subprocess.TimeoutExpired:
                pass
        with _ignore_missing():  # children left behind (executors, Python daemons)
            os.killpg(self.pid, signal.SIGKILL)
        if self.process.poll() is None:
            self.process.wait(grace)


class _ignore_missing:
    def __enter__(self):
        return self

    def __exit__(self, kind, value, trace):
        return kind is not None and issubclass(kind, ProcessLookupError)


def _environment(extra: dict[str, str] | None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOCAL_IP": HOST,
            "SPARK_DAEMON_MEMORY": env.get("SPARK_DAEMON_MEMORY", "256m"),
            "PYSPARK_PYTHON": env.get("PYSPARK_PYTHON", sys.executable),
        }
    )
    env.update(extra or {})
    return env


def _start(
    name: str, command: list[str], workdir: Path, port: int, env: dict[str, str] | None
) -> Service:
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / f"{name.replace(' ', '-')}.log"
    # spark-class and spark-submit exec the JVM, so the process id is the JVM's.
    with log.open("wb") as output:  # the child keeps its own copy of the descriptor
        process = subprocess.Popen(
            command,
            cwd=workdir,
            env=_environment(env),
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Service(name, process, log, port)


@dataclass
class StandaloneCluster:
    """A standalone master and one worker; ``url`` is the master's ``spark://`` address."""

    master: Service
    worker: Service
    workdir: Path

    @property
    def url(self) -> str:
        return f"spark://{HOST}:{self.master.port}"

    def stop(self) -> None:
        for service in (self.worker, self.master):
            service.stop()


def start_standalone(
    workdir: Path,
    *,
    cores: int = 1,
    memory: str = "1g",
    env: dict[str, str] | None = None,
    timeout: float = 180,
) -> StandaloneCluster:
    """Start a master and one worker with ``cores`` and ``memory`` for executors.

    On failure everything started so far is stopped before the error propagates.
    """
    spark_class = str(spark_home() / "bin" / "spark-class")
    port = free_port()
    master = _start(
        "standalone master",
        [
            spark_class,
            "org.apache.spark.deploy.master.Master",
            "--host",
            HOST,
            "--port",
            str(port),
            "--webui-port",
            str(free_port()),
        ],
        workdir,
        port,
        env,
    )
    worker = None
    try:
        master.wait_until_listening(timeout)
        worker_port = free_port()
        worker = _start(
            "standalone worker",
            [
                spark_class,
                "org.apache.spark.deploy.worker.Worker",
                f"spark://{HOST}:{port}",
                "--host",
                HOST,
                "--port",
                str(worker_port),
                "--webui-port",
                str(free_port()),
                "--cores",
                str(cores),
                "--memory",
                memory,
                "--work-dir",
                str(workdir / "work"),
            ],
            workdir,
            worker_port,
            env,
        )
        worker.wait_until_listening(timeout)
        _wait_for_registration(worker, timeout)
    except BaseException:
        if worker is not None:
            worker.stop()
        master.stop()
        raise
    return StandaloneCluster(master, worker, workdir)


def _wait_for_registration(worker: Service, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if b"Successfully registered with master" in worker.log.read_bytes():
            return
        if worker.process.poll() is not None:
            break
        time.sleep(0.5)
    raise RuntimeError(f"the worker did not register with the master; see {worker.log}")


def start_connect_server(
    workdir: Path,
    *,
    master: str = "local[1]",
    conf: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
    driver_memory: str = "1g",
    timeout: float = 240,
) -> Service:
    """Start a Spark Connect server on a free port of 127.0.0.1 (clients use
    ``sc://127.0.0.1:<port>``); ``master`` is where it runs jobs."""
    port = free_port()
    settings = {
        "spark.ui.enabled": "false",
        "spark.connect.grpc.binding.address": HOST,
        "spark.connect.grpc.binding.port": str(port),
        "spark.driver.host": HOST,
        "spark.driver.bindAddress": HOST,
        **(conf or {}),
    }
    command = [
        str(spark_home() / "bin" / "spark-submit"),
        "--class",
        CONNECT_SERVER_CLASS,
        "--name",
        "postcode-privacy Spark Connect server",
        "--master",
        master,
        "--driver-memory",
        driver_memory,
    ]
    for name, value in settings.items():
        command += ["--conf", f"{name}={value}"]
    # The launcher sizes this server's heap from SPARK_DAEMON_MEMORY, not --driver-memory.
    env = {"SPARK_DAEMON_MEMORY": driver_memory, **(env or {})}
    server = _start("spark connect server", command, workdir, port, env)
    try:
        server.wait_until_listening(timeout)
    except BaseException:
        server.stop()
        raise
    return server


def connect_url(server: Service) -> str:
    return f"sc://{HOST}:{server.port}"
