"""SIGINT and SIGTERM, the same way for every command, wherever perfkit was started from.

Every long-running command (serve, profile, tune, gate --ab, run) cleans up in `finally`
blocks and context managers as a KeyboardInterrupt unwinds them: server stopped, record saved,
config.pbtxt restored, exit 130. That only works if the signal becomes a KeyboardInterrupt:
- SIGTERM's default action kills the process without unwinding anything;
- a non-interactive shell starts background jobs (`perfkit serve ... &`) with SIGINT ignored,
  and Python keeps an inherited SIG_IGN instead of installing its own handler, so `kill -INT`
  would do nothing at all.
`handled()` sets one handler for both on the main thread. The first signal raises
KeyboardInterrupt; a second one during the cleanup only says that cleanup is under way (so an
impatient Ctrl-C cannot leave a server running or a config half-restored); a third gives up
waiting and raises again.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM)
_received = 0


def _interrupt(signum: int, frame: FrameType | None) -> None:
    global _received
    _received += 1
    if _received == 2:
        # os.write, not print: a handler may run in the middle of another write to stderr.
        os.write(2, b"perfkit: cleaning up (stopping the server, saving results); signal again to abort\n")
        return
    raise KeyboardInterrupt(signal.Signals(signum).name)


@contextlib.contextmanager
def handled() -> Iterator[bool]:
    """SIGINT and SIGTERM raise KeyboardInterrupt in the main thread while in the block; yields whether set.

    The previous handlers come back on leaving, so a caller that runs a command in-process (a test,
    a script) keeps its own. Off the main thread, where Python cannot set handlers, does nothing.
    """
    global _received
    if threading.current_thread() is not threading.main_thread():
        yield False
        return
    _received = 0
    previous = {sig: signal.getsignal(sig) for sig in SIGNALS}
    for sig in SIGNALS:
        signal.signal(sig, _interrupt)
    try:
        yield True
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
