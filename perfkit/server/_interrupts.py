"""SIGINT and SIGTERM while a config guard is active: the first signal ends the guarded block (a
KeyboardInterrupt), and no signal can stop the guard half-way through putting the user's file back.

Python runs a signal's handler on the main thread, between two bytecodes, wherever that thread
is: also on the first line of a guard's `__exit__`, before the file is back. A plain Ctrl-C handler
(or a SIGTERM one that raises every time) therefore lets a second signal, one that lands while
the block unwinds from the first (Ctrl-C pressed twice, SIGTERM and Ctrl-C together), skip the
restore and leave the candidate config in place. `Interrupts` raises for the first signal only;
any signal that lands after it, or while a function marked `@holds_signals` runs (the guards'
exits), is held, and raised once the guard has finished if nothing was raised before.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import CodeType, FrameType
from typing import Any, TypeVar

_F = TypeVar("_F", bound=Callable[..., Any])
_HOLDING: set[CodeType] = set()
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def holds_signals(func: _F) -> _F:
    """Mark func as restoring a guarded file: while it runs, a guard's handler holds SIGINT/SIGTERM."""
    _HOLDING.add(func.__code__)
    return func


def _restoring(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code in _HOLDING:
            return True
        frame = frame.f_back
    return False


class Interrupts:
    """The handler a guard installs on the main thread for SIGTERM (where none is set) and SIGINT
    (where Python's default one is): the first signal raises KeyboardInterrupt, later ones and
    those that land while a guard restores are held (see the module's docstring)."""

    def __init__(self) -> None:
        self.raised = False
        self.held: int | None = None
        self._previous: dict[int, Any] = {}

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.raised or _restoring(frame):
            self.held = signum
            return
        self.raised = True
        raise KeyboardInterrupt(signal.Signals(signum).name)

    def install(self) -> bool:
        """Take SIGTERM if it has no handler and SIGINT if it has Python's; returns whether it took either."""
        if threading.current_thread() is not threading.main_thread():
            return False
        for sig, free in ((signal.SIGTERM, (signal.SIG_DFL, None)), (signal.SIGINT, (signal.default_int_handler,))):
            current = signal.getsignal(sig)
            if current in free:
                signal.signal(sig, self)
                self._previous[sig] = signal.SIG_DFL if current is None else current
        return bool(self._previous)

    def uninstall(self) -> None:
        """Put the previous handlers back; raise KeyboardInterrupt for a held signal if none was raised."""
        while self._previous:
            sig, handler = self._previous.popitem()
            signal.signal(sig, handler)
        if self.held is not None and not self.raised:
            self.raised = True
            raise KeyboardInterrupt(signal.Signals(self.held).name)


@contextlib.contextmanager
def signals_blocked() -> Iterator[None]:
    """SIGINT and SIGTERM blocked on the main thread for the block (a no-op on other threads).

    The mask is read before anything changes: `signal.pthread_sigmask` runs handlers of signals
    that are already pending after it has changed the mask, so one may raise from the blocking call
    itself; the `finally` then still puts the mask back.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, ())
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
