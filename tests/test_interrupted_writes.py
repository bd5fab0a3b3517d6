"""A stop signal (Ctrl-C, SIGTERM) that lands inside a small write: the key file half
written, or the moment a ledger transaction has begun.  Each must leave nothing behind that
blocks or breaks the next run (hostile review of the interrupt handling)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from postcode_privacy import Key, write_key_file
from postcode_privacy.ledger.sqlite_store import SqliteStore


class _StopAfter:
    """A file or connection whose method ``name`` does its work, then is interrupted, once."""

    def __init__(self, wrapped, name: str, when=lambda *args: True):
        self._wrapped, self._name, self._when, self.fired = wrapped, name, when, False

    def __enter__(self):
        self._wrapped.__enter__()
        return self

    def __exit__(self, *exc):
        return self._wrapped.__exit__(*exc)

    def __getattr__(self, attribute):
        real = getattr(self._wrapped, attribute)
        if attribute != self._name:
            return real

        def interrupted(*args, **kwargs):
            result = real(*args, **kwargs)
            if not self.fired and self._when(*args):
                self.fired = True
                raise KeyboardInterrupt
            return result

        return interrupted


def test_a_key_file_interrupted_while_written_is_removed(tmp_path, monkeypatch):
    """Only an OSError removed the half-written file: after a Ctrl-C the next keygen (or
    ledger init) was refused, as a file already stood at the key's path."""
    import postcode_privacy.keyfile as keyfile

    real_fdopen = keyfile.os.fdopen
    monkeypatch.setattr(
        keyfile.os, "fdopen", lambda *a, **k: _StopAfter(real_fdopen(*a, **k), "write")
    )
    path = tmp_path / "k.key"
    with pytest.raises(KeyboardInterrupt):
        write_key_file(Key.generate(), path)
    assert not path.exists()
    monkeypatch.undo()
    write_key_file(Key.generate(), path)  # the next try is not blocked
    assert path.stat().st_size > 0


def test_a_stop_the_moment_the_key_file_is_created_leaves_no_empty_key(tmp_path, monkeypatch):
    """A signal handled just after ``os.open`` returned, before the write's clean-up was in
    place, left an empty file at the key's path, which blocked the next try."""
    import signal

    import postcode_privacy.keyfile as keyfile

    real_open = keyfile.os.open

    def open_then_signal(*args, **kwargs):
        fd = real_open(*args, **kwargs)
        signal.raise_signal(signal.SIGINT)  # Python's handler runs at the next bytecode
        return fd

    monkeypatch.setattr(keyfile.os, "open", open_then_signal)
    path = tmp_path / "k.key"
    with pytest.raises(KeyboardInterrupt):
        write_key_file(Key.generate(), path)
    assert not path.exists()


def test_a_stop_just_after_the_ledger_key_is_written_removes_it(tmp_path, monkeypatch):
    """``ledger init`` set its made-key flag only after ``write_key_file`` returned: a stop
    between the two left a key without a ledger, which blocked the next ``ledger init``."""
    import postcode_privacy.keyfile as keyfile
    from postcode_privacy.ledger import Ledger

    real_write = keyfile.write_key_file

    def write_then_stop(*args, **kwargs):
        real_write(*args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(keyfile, "write_key_file", write_then_stop)
    location = tmp_path / "l.sqlite"
    with pytest.raises(KeyboardInterrupt):
        Ledger.create(str(location))
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    monkeypatch.undo()
    Ledger.create(str(location))  # the next try is not blocked
    assert sorted(p.name for p in tmp_path.iterdir()) == ["l.sqlite", "l.sqlite.key"]


def test_a_stop_just_after_begin_leaves_no_transaction_open(tmp_path):
    """A KeyboardInterrupt the moment ``BEGIN IMMEDIATE`` returned escaped before the
    rollback, so the write that settles the release on the way out met an open transaction:
    a traceback (exit 1) instead of "interrupted"."""
    store = SqliteStore(str(tmp_path / "l.sqlite"), create=True)
    try:
        with store.write():
            store.execute("CREATE TABLE t (x INTEGER)")
        real = store.conn
        store.conn = _StopAfter(real, "execute", lambda sql, *rest: sql == "BEGIN IMMEDIATE")
        with pytest.raises(KeyboardInterrupt), store.write():
            store.execute("INSERT INTO t VALUES (1)")
        assert store.conn.fired and not real.in_transaction
        with store.write():  # the next write works, and the interrupted one left nothing
            store.execute("INSERT INTO t VALUES (2)")
        assert store.query("SELECT x FROM t") == [(2,)]
    finally:
        store.close()


def test_a_stop_after_the_release_is_in_place_says_so(tmp_path, monkeypatch, capsys):
    """A Ctrl-C after the last rename (while the closing lines or the ledger's commit run)
    gave exit 130 and "interrupted", though the release was complete; the message now says
    the files are complete and in place.  A stop before the renames still says only
    "interrupted", and leaves no file."""
    from graphs import leeds_grid

    from postcode_privacy.atomic import OutputClaim
    from postcode_privacy.cli import main

    graph, codes = leeds_grid()
    graph.save(tmp_path / "g.ppgraph")
    write_key_file(Key.from_bytes(b"k" * 32), tmp_path / "release.key")
    (tmp_path / "in.csv").write_text(
        "person,pc\n" + "".join(f"{i},{codes[i % len(codes)]}\n" for i in range(20)),
        encoding="utf-8",
    )

    def perturb(out: str) -> int:
        args = ["perturb", str(tmp_path / "in.csv"), "-o", str(tmp_path / out), "-q"]
        args += ["--key", str(tmp_path / "release.key"), "--graph", str(tmp_path / "g.ppgraph")]
        return main(args + ["--epsilon", "1", "--id-column", "person", "--postcode-column", "pc"])

    real_commit = OutputClaim.commit

    def commit_then_stop(self):
        real_commit(self)
        raise KeyboardInterrupt

    monkeypatch.setattr(OutputClaim, "commit", commit_then_stop)
    assert perturb("late.csv") == 130
    err = capsys.readouterr().err
    assert "interrupted after the files were written: they are complete and in place" in err
    assert (tmp_path / "late.csv").exists() and (tmp_path / "late.csv.manifest.json").exists()

    def stop_before(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(OutputClaim, "commit", stop_before)
    assert perturb("early.csv") == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == "interrupted"
    assert not list(tmp_path.glob("early.csv*"))


def test_a_stop_during_a_cache_s_renames_waits_for_the_last_and_still_stops(tmp_path):
    """A cached table is moved into place as two files, the header last: a stop between the
    renames left a table and an old header (refused and rebuilt at the next use).  Now it waits
    for both renames, and then stops the run as it would have."""
    import os
    import signal

    from postcode_privacy.engine.table_cache import cache_files

    paths = [tmp_path / "t.npy", tmp_path / "t.json"]
    real_replace = os.replace
    renamed: list[str] = []

    def replace_and_signal(source, target):
        real_replace(source, target)
        renamed.append(os.path.basename(target))
        if len(renamed) == 1:
            signal.raise_signal(signal.SIGINT)  # between the two renames

    os.replace = replace_and_signal
    try:
        with pytest.raises(KeyboardInterrupt), cache_files(paths) as partials:
            for partial in partials:
                partial.write_bytes(b"new")
    finally:
        os.replace = real_replace
    assert renamed == ["t.npy", "t.json"]
    assert [p.read_bytes() for p in paths] == [b"new", b"new"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json", "t.npy"]


def test_the_command_line_starts_without_numpy_and_a_stop_while_it_loads_is_handled():
    """The commands load numpy, pandas and the graph code (a fifth of a second) while Python's
    own SIGINT handler is in place: a Ctrl-C then printed a traceback.  The console script now
    starts from a module that loads none of them, and reports a stop during the rest."""
    import subprocess
    import sys
    import tomllib
    from pathlib import Path

    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text("utf-8"))
    assert (
        project["project"]["scripts"]["postcode-privacy"] == "postcode_privacy._start:entry_point"
    )
    light = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, postcode_privacy._start; "
            "print(sorted(m for m in ('numpy', 'pandas', 'click') if m in sys.modules))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert light.stdout.strip() == "[]"
    run = _console_script_stopped_while_loading("raise KeyboardInterrupt")
    assert run.returncode == 130 and run.stderr == "interrupted\n", run.stderr


def _console_script_stopped_while_loading(stop: str):
    """Run the console script's entry point with ``stop`` (a statement) done the moment it
    imports the commands (``postcode_privacy.cli``)."""
    import subprocess
    import sys

    script = (
        "import os, signal, sys\n"
        "class Stop:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'postcode_privacy.cli':\n"
        f"            {stop}\n"
        "sys.meta_path.insert(0, Stop())\n"
        "from postcode_privacy._start import entry_point\n"
        "entry_point()\n"
    )
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)


def test_a_sigterm_while_the_command_line_loads_is_reported_as_a_stop():
    """Python's own SIGTERM action ended the process with no word (status -15) while the
    commands loaded; the guard handles it as Ctrl-C, as every command does once loaded."""
    run = _console_script_stopped_while_loading("os.kill(os.getpid(), signal.SIGTERM)")
    assert run.returncode == 130 and run.stderr == "interrupted\n", run.stderr


def test_a_stop_while_numba_compiles_lands_after_the_compilation():
    """LLVM calls back into Python while numba compiles, and a KeyboardInterrupt raised in a
    ctypes callback is printed and dropped: a Ctrl-C during a cold start was lost (the run
    went on) or left numba's "no compiled object yet".  Stops are held while numba holds its
    compiler lock, then delivered: here one sent mid-compilation arrives once the kernel is
    compiled, and the kernel works."""
    import signal

    import numba.core.event as numba_events

    from postcode_privacy._numba import njit

    sent = []

    class SignalMidCompile(numba_events.Listener):
        def on_start(self, event):
            if not sent:
                sent.append(True)
                signal.raise_signal(signal.SIGINT)

        def on_end(self, event):
            pass

    @njit(cache=False)
    def twice(x):
        return 2 * x

    listener = SignalMidCompile()
    numba_events.register("numba:run_pass", listener)
    try:
        with pytest.raises(KeyboardInterrupt):
            twice(21)
    finally:
        numba_events.unregister("numba:run_pass", listener)
    assert sent and len(twice.overloads) == 1  # compiled whole before the stop landed
    assert twice(21) == 42


class _StoppedBeforeTheHold:
    """In place of ``signals_deferred``: a stop that lands before the hold is in place."""

    def __enter__(self):
        raise KeyboardInterrupt

    def __exit__(self, *exc):
        return False


def _then_signal(real):
    """``real``, followed by a SIGINT the moment it returns (as if Ctrl-C landed there)."""
    import signal

    def wrapped(*args, **kwargs):
        result = real(*args, **kwargs)
        signal.raise_signal(signal.SIGINT)
        return result

    return wrapped


def test_a_stop_as_a_temporary_file_or_the_lock_is_made_leaves_neither(tmp_path, monkeypatch):
    """A stop between a file's creation and its registration with the claim (a few bytecodes)
    left a hidden .tmp file or the .lock file behind."""
    from postcode_privacy import atomic

    out = tmp_path / "o.csv"
    monkeypatch.setattr(atomic.OutputClaim, "_lock", _then_signal(atomic.OutputClaim._lock))
    with pytest.raises(KeyboardInterrupt), atomic.OutputClaim([out]):
        pass
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    monkeypatch.setattr(atomic, "TempFile", _then_signal(atomic.TempFile))
    with pytest.raises(KeyboardInterrupt), atomic.OutputClaim([out]) as claim:
        claim.temp(out)
    assert list(tmp_path.iterdir()) == []


def test_a_stop_as_a_ledger_file_is_made_leaves_none(tmp_path, monkeypatch):
    import postcode_privacy.ledger.ledger as ledger_module
    from postcode_privacy.ledger import Ledger

    monkeypatch.setattr(ledger_module, "open_store", _then_signal(ledger_module.open_store))
    with pytest.raises(KeyboardInterrupt):
        Ledger.create(str(tmp_path / "l.sqlite"))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["keygen", "ledger"])
def test_a_stop_once_a_key_or_ledger_is_written_says_it_is_complete(
    command, tmp_path, monkeypatch, capsys
):
    """keygen and ledger init said only "interrupted" (nothing was written) when the stop came
    as the closing lines were printed, and a retry was then refused: the files existed."""
    import postcode_privacy.keyfile as keyfile
    from postcode_privacy.cli import main
    from postcode_privacy.ledger.sqlite_store import SqliteStore

    if command == "keygen":
        monkeypatch.setattr(keyfile, "write_key_file", _then_signal(keyfile.write_key_file))
        argv, written = ["keygen", "-o", str(tmp_path / "k.key")], ["k.key"]
    else:
        monkeypatch.setattr(SqliteStore, "publish", _then_signal(SqliteStore.publish))
        argv, written = ["ledger", "init", str(tmp_path / "l.sqlite")], ["l.sqlite", "l.sqlite.key"]
    assert main(argv) == 130
    assert "complete and in place" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == written


def test_a_stop_as_the_compile_hold_begins_leaves_the_hold_usable(monkeypatch):
    """A stop landing as the hold began counted a hold that was never in place, so a process
    that caught the KeyboardInterrupt and went on held no stop during any later compilation."""
    from postcode_privacy import _numba

    listener = _numba._StopsHeldWhileCompiling()
    monkeypatch.setattr(_numba, "signals_deferred", _StoppedBeforeTheHold)
    with pytest.raises(KeyboardInterrupt):
        listener.on_start(None)
    monkeypatch.undo()
    assert listener._depth == 0 and listener._held is None
    listener.on_start(None)
    assert listener._depth == 1 and listener._held is not None
    listener.on_end(None)
    assert listener._depth == 0 and listener._held is None


def test_a_stop_as_the_claim_is_recorded_or_as_its_clean_up_begins_leaves_no_lock(
    tmp_path, monkeypatch
):
    """A stop after the lock was taken but before ``__enter__`` returned (so before the
    ``with`` armed ``__exit__``), or one before ``__exit__``'s hold was in place, left the
    .lock file behind."""
    from postcode_privacy import atomic

    out = tmp_path / "o.csv"
    real_claims = atomic._CLAIMS

    class SignalOnSet:
        def get(self):
            return real_claims.get()

        def set(self, value):
            return _then_signal(real_claims.set)(value)

        def reset(self, token):
            return real_claims.reset(token)

    monkeypatch.setattr(atomic, "_CLAIMS", SignalOnSet())
    with pytest.raises(KeyboardInterrupt), atomic.OutputClaim([out]):
        pass
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()

    claim = atomic.OutputClaim([out])
    claim.__enter__()
    claim.temp(out)
    monkeypatch.setattr(atomic, "signals_deferred", _StoppedBeforeTheHold)
    with pytest.raises(KeyboardInterrupt):
        claim.__exit__(None, None, None)
    assert list(tmp_path.iterdir()) == []


def test_a_stop_after_the_command_finished_says_its_files_are_complete():
    """A stop while the finished command flushed its output reached the start-up guard, which
    said only "interrupted" (nothing was written) though every file was in place."""
    import subprocess
    import sys

    script = (
        "import postcode_privacy.cli as cli\n"
        "from postcode_privacy._interrupts import note_files_in_place\n"
        "def finished_then_stopped():\n"
        "    note_files_in_place()\n"
        "    raise KeyboardInterrupt\n"
        "cli.entry_point = finished_then_stopped\n"
        "from postcode_privacy._start import entry_point\n"
        "entry_point()\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert run.returncode == 130
    assert run.stderr == (
        "interrupted after the files were written: they are complete and in place\n"
    )


@pytest.mark.parametrize("hold", ["signals_deferred", "signals_held"])
def test_a_hold_handler_left_in_place_passes_later_signals_on(hold):
    """A stop landing while a hold put the handlers back (SIGINT's back, SIGTERM's not yet)
    left the hold's handler in place, and it took note of every later SIGTERM for ever: a
    library caller's process could no longer be stopped by one."""
    import signal

    from postcode_privacy import _signal_holds

    def stop(signum, frame):
        raise KeyboardInterrupt

    before = signal.signal(signal.SIGTERM, stop)
    try:
        with getattr(_signal_holds, hold)():
            left_behind = signal.getsignal(signal.SIGTERM)
        assert signal.getsignal(signal.SIGTERM) is stop
        signal.signal(signal.SIGTERM, left_behind)  # as if putting it back had been cut short
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, before)


@pytest.mark.skipif(not hasattr(__import__("signal"), "SIGHUP"), reason="no SIGHUP here")
@pytest.mark.parametrize("hold", ["signals_deferred", "signals_held"])
@pytest.mark.parametrize("owner", ["ignored (nohup)", "the program's own handler"])
def test_a_hold_leaves_a_hangup_that_is_not_a_stop_alone(hold, owner):
    """SIGHUP became a stop signal this round, and the hold around a release's final renames
    took it whatever its handler: under ``nohup`` a hangup there printed "a stop signal
    arrived", and a program embedding the library (reloading its settings on SIGHUP) never saw
    it (a review).  A hold now takes SIGHUP only where it is a stop, and no ignored signal."""
    import signal

    from postcode_privacy import _signal_holds

    seen: list[int] = []
    handler = signal.SIG_IGN if owner.startswith("ignored") else (lambda s, f: seen.append(s))
    before = signal.signal(signal.SIGHUP, handler)
    try:
        with getattr(_signal_holds, hold)() as arrived:
            assert signal.getsignal(signal.SIGHUP) is handler
            signal.raise_signal(signal.SIGHUP)
        assert not arrived  # (signals_deferred yields None: nothing to deliver either)
        assert seen == ([] if handler is signal.SIG_IGN else [signal.SIGHUP])
    finally:
        signal.signal(signal.SIGHUP, before)


NUMBA_CACHE_UNWRITABLE = r"""
import errno, sys
sys.path.insert(0, sys.argv[1])
import numba.core.caching as caching

def refuse(*args, **kwargs):
    raise OSError(errno.EFBIG, "File too large")

caching.IndexDataCacheFile.save = refuse  # as a file-size limit or a full disk would
import kernel_for_test
print(kernel_for_test.add_one(41))
"""


@pytest.mark.slow  # a fresh process compiles a kernel: about two seconds
def test_a_kernel_numba_cannot_write_or_read_in_its_cache_is_compiled_all_the_same(tmp_path):
    """A full disk or a file-size limit while numba wrote a newly compiled kernel to its cache
    ended the run with numba's traceback (a hostile review of round 28): the write is skipped,
    and the kernel runs."""
    (tmp_path / "kernel_for_test.py").write_text(
        "from postcode_privacy._numba import njit\n\n\n"
        "@njit(cache=True)\ndef add_one(x):\n    return x + 1\n"
    )
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    done = subprocess.run(
        [sys.executable, "-c", NUMBA_CACHE_UNWRITABLE, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert (done.returncode, done.stdout.strip()) == (0, "42"), done.stderr
    # A damaged cache is a miss: every run after one failed with an unpickling error.
    run = [
        sys.executable,
        "-c",
        "import sys; sys.path.insert(0, sys.argv[1]); "
        "import kernel_for_test as k; print(k.add_one(41))",
        str(tmp_path),
    ]
    assert subprocess.run(run, capture_output=True, timeout=120, env=env).returncode == 0
    cached = [f for f in (tmp_path / "cache").rglob("*") if f.suffix in (".nbi", ".nbc")]
    assert cached
    for file in cached:
        file.write_bytes(b"garbage")
    done = subprocess.run(run, capture_output=True, text=True, timeout=120, env=env)
    assert (done.returncode, done.stdout.strip()) == (0, "42"), done.stderr
    index = [f for f in cached if f.suffix == ".nbi"]
    assert index and all(f.read_bytes() != b"garbage" for f in index)  # written anew


def test_a_claim_whose_exit_never_ran_is_cleaned_up_when_the_process_ends(tmp_path):
    """Python may raise a KeyboardInterrupt on entering ``__exit__`` itself, and then none of
    the clean-up runs: stopped within milliseconds of their final renames, a third of the runs
    left the lock file behind (a temporary file, earlier).  The process's exit now removes
    them; a forked copy of the process leaves its parent's lock alone."""
    out = tmp_path / "o.csv"
    script = (
        "import os, sys\n"
        "from postcode_privacy.atomic import OutputClaim\n"
        f"claim = OutputClaim([{str(out)!r}])\n"
        "claim.__enter__()\n"
        f"claim.temp({str(out)!r}).handle.write(b'part')\n"
        "child = os.fork()\n"
        "if child == 0:\n"
        "    sys.exit(0)  # (a normal exit, exit handlers and all)\n"
        "os.waitpid(child, 0)\n"
        "print(sorted(os.listdir(sys.argv[1])))\n"
        "raise KeyboardInterrupt  # (as if it had landed on entering __exit__)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True
    )
    assert run.returncode != 0 and "KeyboardInterrupt" in run.stderr
    during = run.stdout.strip()
    assert ".o.csv.lock" in during and ".tmp" in during  # (the child removed neither)
    assert list(tmp_path.iterdir()) == []


def test_a_stop_python_dropped_is_not_printed_and_the_command_says_it_was_stopped(tmp_path, capsys):
    """A KeyboardInterrupt raised in a finaliser or an exit handler is dropped by Python,
    which printed "Exception ignored" with a traceback; a command that went on to its end
    then exited 0.  It now prints nothing of it and exits 130, saying whether its files are
    complete; once the command is over, stops are ignored, so its exit cannot be cut short."""
    import signal

    from postcode_privacy import cli
    from postcode_privacy._interrupts import stop_once

    class StoppedInAFinaliser:
        def __del__(self):
            stop_once(signal.SIGINT, None)

    @cli.cli.command("finalised-test-command")
    def finalised() -> None:
        StoppedInAFinaliser()  # (dropped at once: Python calls sys.unraisablehook)

    try:
        assert cli.main(["finalised-test-command"]) == 130
    finally:
        del cli.cli.commands["finalised-test-command"]
    err = capsys.readouterr().err
    assert err == "interrupted\n"

    script = (
        "import os, signal\n"
        "import postcode_privacy.cli as cli\n"
        "def finished():\n"
        "    return 0\n"
        "cli._main = lambda argv, restore_signals: finished()\n"
        "import atexit\n"
        "atexit.register(lambda: (os.kill(os.getpid(), signal.SIGINT), print('after')))\n"
        "from postcode_privacy._start import entry_point\n"
        "entry_point()\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert (run.returncode, run.stdout, run.stderr) == (0, "after\n", "")


def test_a_claim_cleaned_up_late_leaves_another_run_s_lock_alone(tmp_path):
    """A claim whose clean-up was skipped is cleaned up when its process ends; meanwhile its
    lock may have been removed by hand and another run may hold a new one under the name:
    removing that one let a third run claim the output while the second wrote it."""
    from postcode_privacy import atomic

    out = tmp_path / "o.csv"
    first = atomic.OutputClaim([out])
    first.__enter__()  # (its __exit__ never runs: as if a stop had skipped it)
    os.unlink(first.lock_path)  # removed by hand
    second = atomic.OutputClaim([out])
    with second:
        first._token = None  # (what the process's exit does for the first claim)
        first._clean_up()
        assert second.lock_path.exists()
        with pytest.raises(atomic.OutputExistsError, match="another run is writing"):
            atomic.OutputClaim([out]).__enter__()
    assert list(tmp_path.iterdir()) == []
    assert first._lock_fd is None


def test_a_stop_python_dropped_while_the_command_line_loads_still_stops_it(tmp_path):
    """A stop whose handler ran inside an import's callback, while the command line loaded,
    was printed as "Exception ignored ... KeyboardInterrupt" and lost: the command began
    afresh, wrote its files and exited 0 (a stop-signal soak test met it in ``keygen``)."""
    key = tmp_path / "k.key"
    script = (
        "import os, signal, sys, weakref\n"
        "class Thing: pass\n"
        "class DropAStop:  # a stop that lands inside a weakref callback, as Python runs one\n"
        "    done = False\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'postcode_privacy.cli' and not DropAStop.done:\n"
        "            DropAStop.done = True\n"
        "            thing = Thing()\n"
        "            def stop(_):\n"
        "                os.kill(os.getpid(), signal.SIGINT)\n"
        "                for _ in range(1000): pass  # (its handler runs here, and is dropped)\n"
        "            watch = weakref.ref(thing, stop)\n"
        "            del thing\n"
        "sys.meta_path.insert(0, DropAStop())\n"
        f"sys.argv = ['postcode-privacy', 'keygen', '-o', {str(key)!r}]\n"
        "from postcode_privacy._start import entry_point\n"
        "entry_point()\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert (run.returncode, run.stderr) == (130, "interrupted\n")
    assert not key.exists()


def test_a_stopped_command_says_interrupted_with_no_blank_line_before(tmp_path, capsys):
    """click printed an empty line on stderr for a KeyboardInterrupt passing through it, so a
    log held a blank line before "interrupted"."""
    from postcode_privacy import cli

    @cli.cli.command("stopped-test-command")
    def stopped() -> None:
        raise KeyboardInterrupt

    try:
        assert cli.main(["stopped-test-command"]) == 130
    finally:
        del cli.cli.commands["stopped-test-command"]
    assert capsys.readouterr().err == "interrupted\n"
