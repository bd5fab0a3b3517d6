"""Files that misbehave, for the hostile-input tests."""

from __future__ import annotations

import os
import threading
import time


def fifo_nobody_writes(path, after: float = 0.0):
    """A FIFO no one writes to; from ``after`` seconds on, for ten seconds, every reader blocked
    on it is freed (a writer opens and closes it), so code that waits fails a test instead of
    hanging it."""
    os.mkfifo(path)

    def free_blocked_readers():
        time.sleep(after)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:  # succeeds only while a reader has the FIFO open
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
            time.sleep(0.05)

    threading.Thread(target=free_blocked_readers, daemon=True).start()
    return path
