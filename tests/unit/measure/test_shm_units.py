"""Shared-memory cleanup: a region the server still uses is unregistered once it lets go."""

from __future__ import annotations

from perfkit.errors import ServerError
from perfkit.measure import _shm


def test_unregister_retries_while_the_server_still_uses_the_region():
    calls: list[str] = []

    def unregister(name: str) -> None:
        calls.append(name)
        if len(calls) < 3:  # what Triton answers while requests it executes hold the region
            raise ServerError(f"Cannot unregister shared memory region '{name}', it is currently in use.")

    _shm._unregister(unregister, "perfkit_1_abc_s0_INPUT0")
    assert calls == ["perfkit_1_abc_s0_INPUT0"] * 3


def test_unregister_gives_up_after_its_bound_and_says_so(monkeypatch, caplog):
    monkeypatch.setattr(_shm, "UNREGISTER_WAIT_S", 0.0)
    calls: list[str] = []

    def refuse(name: str) -> None:
        calls.append(name)
        raise ServerError("in use")

    _shm._unregister(refuse, "r")
    assert len(calls) <= 2
    assert "left registered" in caplog.text


def test_unregister_stops_at_once_when_the_server_is_gone():
    calls: list[str] = []

    def gone(name: str) -> None:
        calls.append(name)
        raise ConnectionRefusedError(111, "Connection refused")

    _shm._unregister(gone, "r")
    assert calls == ["r"]
