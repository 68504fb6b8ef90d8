"""An epoll selector with nanosecond wake-ups, for on-time open-loop sends.

asyncio's epoll selector rounds every timeout up to whole milliseconds (epoll_wait's
unit), so a send due in 0.2 ms goes out ~1 ms late; select() is precise but limited
to 1024 file descriptors. This selector arms a timerfd (via ctypes; Python 3.11 has
no os.timerfd_create) for the exact timeout and lets epoll wake on it. sleep_until is the
coarse wait of the threads that pace windows and levels (not sends).
"""

from __future__ import annotations

import ctypes
import os
import selectors
import time
from time import perf_counter_ns
from typing import Any

_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = 0o4000
_TFD_CLOEXEC = 0o2000000


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


class TimerfdEpollSelector(selectors.EpollSelector):
    """EpollSelector whose timeouts are honoured to the microsecond."""

    def __init__(self) -> None:
        super().__init__()
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        self._settime = libc.timerfd_settime
        self._tfd = libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if self._tfd < 0:
            raise OSError(ctypes.get_errno(), "timerfd_create failed")
        self._spec = _Itimerspec()
        self._spec_ref = ctypes.byref(self._spec)
        self._armed = False
        # The stdlib selector's epoll object and key map are private but stable since 3.4.
        self._selector.register(self._tfd, selectors.EVENT_READ)  # type: ignore[attr-defined]  # the stdlib selector's private epoll internals, stable since 3.4 but not in typeshed

    def _arm(self, timeout: float) -> None:
        ns = max(int(timeout * 1e9), 1)
        self._spec.it_value.tv_sec, self._spec.it_value.tv_nsec = divmod(ns, 1_000_000_000)
        self._settime(self._tfd, 0, self._spec_ref, None)
        self._armed = True

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is not None and 0 < timeout < 1.0:
            self._arm(timeout)
            timeout = timeout + 0.002  # epoll's own (rounded) timeout is only a backstop
        ready = self._selector.poll(  # type: ignore[attr-defined]  # the stdlib selector's private epoll internals, stable since 3.4 but not in typeshed
            -1 if timeout is None else timeout,
            max(len(self._fd_to_key), 1) + 1,  # type: ignore[attr-defined]  # the stdlib selector's private epoll internals, stable since 3.4 but not in typeshed
        )
        out: list[tuple[selectors.SelectorKey, int]] = []
        for fd, event in ready:
            if fd == self._tfd:
                try:
                    os.read(self._tfd, 8)
                except BlockingIOError:
                    pass
                continue
            events = 0
            if event & 0x004:  # EPOLLOUT
                events |= selectors.EVENT_WRITE
            if event & ~0x004:  # EPOLLIN, EPOLLHUP, EPOLLERR...
                events |= selectors.EVENT_READ
            key = self._key_from_fd(fd)  # type: ignore[attr-defined]  # the stdlib selector's private epoll internals, stable since 3.4 but not in typeshed
            if key:
                out.append((key, events & key.events))
        return out

    def close(self) -> None:
        try:
            os.close(self._tfd)
        except OSError:
            pass
        super().close()


def precise_selector() -> Any:
    """The most precise selector available: timerfd+epoll on Linux, else select()."""
    try:
        return TimerfdEpollSelector()
    except (OSError, AttributeError):
        return selectors.SelectSelector()


def sleep_until(t_ns: int) -> None:
    """Block until perf_counter_ns() reaches t_ns (in sleeps of at most 0.25 s)."""
    while True:
        left = (t_ns - perf_counter_ns()) / 1e9
        if left <= 0:
            return
        time.sleep(min(left, 0.25))
