"""After a level, the server's counts are read again while they still grow, not for a fixed time.

A loaded server (a container's Triton on a busy Docker engine) can count a level's last requests
seconds after their responses; one that stopped counting short of the client's answers (requests it
never counted, a server that keeps no statistics) is not waited for past a pause.
"""

from __future__ import annotations

from perfkit.measure._server_stats import settled


class Timeline:
    """A fake clock and a server whose success count grows by `step` every `every_s`, up to `final`."""

    def __init__(self, start: int, final: int, every_s: float, step: int = 1) -> None:
        self.now_s = 0.0
        self.start, self.final, self.every_s, self.step = start, final, every_s, step
        self.reads = 0

    def count(self) -> int:
        return min(self.final, self.start + self.step * int(self.now_s / self.every_s))

    def stats(self, name: str) -> dict:
        self.reads += 1
        self.now_s += 0.05  # a read takes time
        n = self.count()
        return {"model_stats": [{"name": name, "inference_stats": {"success": {"count": n, "ns": n * 1000}}}]}

    def sleep(self, s: float) -> None:
        self.now_s += s


def _settle(t: Timeline, answered: int, **kw) -> int:
    before = {"m": {"success": [0, 0], "execution_count": 0, "batch": {}}}
    after = settled(t.stats, ["m"], before, answered, clock=lambda: t.now_s, sleep=t.sleep, **kw)
    return after["m"]["success"][0]


def test_a_count_that_keeps_growing_is_waited_for_past_a_fixed_timeout():
    # one more request counted every 1.5 s: each step is within the pause, the whole takes 15 s
    t = Timeline(start=90, final=100, every_s=1.5)
    assert _settle(t, answered=100, pause_s=2.0) == 100
    assert t.now_s > 14.0


def test_a_count_that_stopped_short_is_left_after_the_pause():
    t = Timeline(start=95, final=97, every_s=0.5)  # two more, then nothing: the server never counts the rest
    assert _settle(t, answered=100, pause_s=2.0) == 97
    assert 2.0 <= t.now_s < 4.0


def test_the_wait_is_capped_in_all():
    t = Timeline(start=1, final=10_000, every_s=1.0)  # slow, steady progress that would outlast any level
    assert _settle(t, answered=10_000, pause_s=2.0, cap_s=30.0) < 10_000
    assert 30.0 <= t.now_s < 31.0


def test_a_server_that_counts_nothing_is_read_once():
    t = Timeline(start=0, final=0, every_s=1.0)
    assert _settle(t, answered=50) == 0
    assert t.reads == 1


def test_a_count_already_complete_is_read_once():
    t = Timeline(start=50, final=50, every_s=1.0)
    assert _settle(t, answered=50) == 50
    assert t.reads == 1
