"""The executors' Python: a probe job that checks it can run the release, and what its workers
raised, read back on the driver.

Spark reports a Python worker's failure as text (the worker's traceback inside its own
exception, local or over Spark Connect): the functions here turn it into one clear line, or
into the library's own error, rather than a Py4J or gRPC traceback.
"""

from __future__ import annotations

import re

from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from .. import errors
from ..errors import PostcodePrivacyError


class ExecutorEnvironmentError(RuntimeError):
    """The executors' Python cannot run the release (the package is missing or another version)."""


def _probe_function(expected: str):
    """A function for one tiny task that reports whether the executor's Python can import this
    package, and its output-stability version.  It is a nested function that names nothing of
    this module, so it is pickled by value: unpickling it on the executor needs no
    ``postcode_privacy`` (the release's own functions are pickled by reference and would fail
    there with a long trace)."""

    def postcode_privacy_probe():
        try:
            import importlib

            version = importlib.import_module("postcode_privacy.version")
            importlib.import_module("postcode_privacy.spark")
        except BaseException as exc:  # noqa: BLE001 - any failure is reported as text
            return f"import failed: {type(exc).__name__}: {exc}"
        found = version.OUTPUT_STABILITY_VERSION
        return (
            ""
            if found == expected
            else (f"output-stability version {found} is installed there, {expected} on the driver")
        )

    return postcode_privacy_probe


_RAISED = re.compile(r"^\s*([\w.]*(?:Error|Exception): .+)$", re.MULTILINE)


# A JVM cause line: ": org.apache.spark.SparkException: ..." or "Caused by: java.io....: ...".
_JVM_CAUSE = re.compile(r"^(?::|Caused by:)\s*([\w.$]*(?:Error|Exception): .+)$", re.MULTILINE)


def _python_failed(exc: Exception) -> bool:
    """Whether a failed job's error comes from a Python worker (its traceback is quoted), not
    from Spark itself (a file it could not fetch, no resources, a bad setting)."""
    text = str(exc)
    return "PythonException" in text or "Traceback (most recent call last)" in text


def _spark_failure(exc: Exception) -> str:
    """The deepest cause Spark gives for a job that failed on its own side (the last "Caused
    by" line), else ``_worker_failure``'s line."""
    causes = _JVM_CAUSE.findall(str(exc))
    return causes[-1].strip()[:300] if causes else _worker_failure(exc)


def _worker_failure(exc: Exception) -> str:
    """The line of a failed probe job that says why: the last exception its Python worker
    raised (such as "ModuleNotFoundError: No module named 'pyarrow'", where Spark runs even a
    plain UDF through Arrow), else the first line; Spark's own first line is a generic header.
    (The probe reads no records, so nothing here can quote one.)"""
    text = str(exc).strip()
    if not text:
        return type(exc).__name__
    raised = _RAISED.findall(text)
    return (raised[-1] if raised else text.splitlines()[0]).strip()[:300]


def _probe_executors(session) -> None:
    """Run one tiny job that imports the package on an executor; fail with one clear message.

    Raises :class:`ExecutorEnvironmentError` naming ``PYSPARK_PYTHON`` when the executors' Python
    cannot import ``postcode_privacy`` or has another output-stability version (which could
    change released postcodes).  Costs one single-row job per call.
    """
    from ..version import OUTPUT_STABILITY_VERSION

    probe = F.udf(_probe_function(OUTPUT_STABILITY_VERSION), StringType())
    advice = (
        "install postcode-privacy (the same version as on the driver) in the Python "
        "environment the executors use, or point PYSPARK_PYTHON (spark.pyspark.python) at "
        'a Python that has it; see docs/spark.md, "What the workers need"'
    )
    try:
        found = session.range(0, 1, 1, 1).select(probe().alias("v")).collect()[0]["v"]
    except Exception as exc:
        if not _python_failed(exc):
            # Spark's own failure, not the executors' Python: its cause, without the advice
            # to reinstall (a review found a user's missing sc.addFile blamed on Python).
            raise ExecutorEnvironmentError(
                f"Spark could not run a one-row job on the executors ({_spark_failure(exc)}); "
                "the cause is on Spark's side, not the executors' Python: see the driver's log"
            ) from exc
        raise ExecutorEnvironmentError(  # the Python worker itself could not start
            f"the executors could not run a Python task ({_worker_failure(exc)}); {advice}"
        ) from None
    if found:
        raise ExecutorEnvironmentError(
            f"the executors' Python cannot run the release: {found}; {advice}"
        )


_WORKER_ERROR = re.compile(r"^postcode_privacy\.errors\.(\w+): (.+)$", re.MULTILINE)


def _library_error(exc: Exception) -> PostcodePrivacyError | None:
    """The library's own error that a Python worker raised, as Spark reports it (the worker's
    traceback inside a ``PythonException``, local or over Spark Connect), rebuilt as that
    type with the same message; None if the failure was not one of the library's errors.
    So an executor that cannot read the shipped graph fails the check pass with
    :class:`ArtefactError`, as ``perturb_frame`` would, not a Py4J or gRPC traceback."""
    found = _WORKER_ERROR.findall(str(exc))
    if not found:
        return None
    name, message = found[-1]
    kind = getattr(errors, name, None)
    if not (isinstance(kind, type) and issubclass(kind, PostcodePrivacyError)):
        return None
    return kind(message)
