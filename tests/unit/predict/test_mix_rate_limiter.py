"""The mix simulator under Triton's rate limiter (predict/_mix_limiter.py) against schedules
derived by hand from core's src/rate_limiter.cc rules, and the long-run share its scaled
priority gives."""

from __future__ import annotations

import pytest

from perfkit.predict import BatcherConfig, MixMember, ServiceModel, simulate_mix
from perfkit.predict._mix import _Member
from perfkit.predict._mix_limiter import DeviceLimiter, FreeInstances, run_mix

MS = 1e-3


def _member(name: str, priority: int, device_fraction: float = 0.0) -> MixMember:
    """One instance, no batching, 1 ms an execution."""
    return MixMember(
        name, BatcherConfig(instances=1), ServiceModel(fixed_us=1000.0, per_item_us=0.0), 1.0,
        device_fraction, 1e6, rate_limit_priority=priority,
    )  # fmt: skip


def _run(a: MixMember, b: MixMember, n: tuple[int, int], total: int | None = None) -> tuple[_Member, _Member]:
    """A's n[0] and B's n[1] requests all arriving at 0 (A's queued first), run under the limiter."""
    cell = [0.0]
    ra, rb = _Member([0.0] * n[0], a, cell), _Member([0.0] * n[1], b, cell)
    run_mix([ra, rb], DeviceLimiter([ra, rb], total))
    return ra, rb


def _ms(starts: list[float]) -> list[float]:
    return [round(s / MS, 6) for s in starts]


def test_priority_two_schedule_by_hand() -> None:
    """Both claim the one unit; A priority 1, B priority 2, six 1 ms requests each at t=0.
    t=0: A0 staged first and allocated (the unit taken); B0 staged, waits. Each end: the ended
    instance's exec_count + 1, staged again at exec_count x priority, the least allocated:
      t=1 A1 vs B0 -> B | t=2 A1 vs B2 -> A | t=3 A2 vs B2 (B staged first) -> B | t=4 A2 vs B4 -> A
      t=5 A3 vs B4 -> A | t=6 A4 vs B4 (B first) -> B | t=7 A4 vs B6 -> A | t=8 A5 vs B6 -> A, done;
      then B alone at 9, 10, 11."""
    ra, rb = _run(_member("A", 1), _member("B", 2), (6, 6))
    assert _ms(ra.starts) == [0, 2, 4, 5, 7, 8]
    assert _ms(rb.starts) == [1, 3, 6, 9, 10, 11]


def test_equal_priorities_alternate() -> None:
    ra, rb = _run(_member("A", 1), _member("B", 1), (4, 4))
    assert _ms(ra.starts) == [0, 2, 4, 6]
    assert _ms(rb.starts) == [1, 3, 5, 7]


@pytest.mark.parametrize("p", [2, 3, 4])
def test_long_run_share_is_the_priority_ratio(p: int) -> None:
    """Both backlogged, exec_A x 1 and exec_B x p stay within one step of each other: of the
    first N executions A runs N p / (p + 1), to within one."""
    ra, rb = _run(_member("A", 1), _member("B", p), (400, 400))
    n = 200
    first = sorted([(s, "A") for s in ra.starts] + [(s, "B") for s in rb.starts])[:n]
    a_runs = sum(1 for _, m in first if m == "A")
    assert abs(a_runs - n * p / (p + 1)) <= 1


def test_a_count_of_two_lets_both_run_at_once() -> None:
    """--rate-limit-resource giving the unit a count of 2: the two claims never wait."""
    ra, rb = _run(_member("A", 1), _member("B", 4), (5, 5), total=2)
    assert _ms(ra.starts) == _ms(rb.starts) == [0, 1, 2, 3, 4]


def test_the_limiter_serializes_what_the_device_otherwise_interleaves() -> None:
    """Without claims the two models overlap their instance-own parts (half an execution each);
    with claims one whole execution runs at a time, so the pair takes twice as long per request."""
    cell = [0.0]
    free = [_Member([0.0] * 4, _member(x, 0, 0.5), cell) for x in ("A", "B")]
    run_mix(free, FreeInstances(free))
    ra, rb = _run(_member("A", 1, 0.5), _member("B", 1, 0.5), (4, 4))
    assert max(free[0].ends + free[1].ends) == pytest.approx(4.5 * MS)
    assert max(ra.ends + rb.ends) == pytest.approx(8 * MS)


def test_priority_moves_the_tail_between_models_in_a_mix() -> None:
    """simulate_mix with the models claiming the device: the favoured model's p99 is the lower."""

    def figs(pa: int, pb: int) -> dict[str, float]:
        members = [_member("A", pa), _member("B", pb)]
        return {f.name: f.latency_us for f in simulate_mix(members, 800.0, requests=3000)}

    a_first, b_first = figs(1, 4), figs(4, 1)
    assert a_first["A"] < b_first["A"] and b_first["B"] < a_first["B"]


def test_priority_combinations_alike_but_for_a_factor_are_one() -> None:
    from perfkit.tuner._search._predict_mix import priority_combos

    combos = priority_combos({"A": (0, 1, 2, 4), "B": (0, 1, 2, 4), "C": ()})
    pairs = {(c["A"], c["B"]) for c in combos}
    assert len(combos) == len(pairs) and all(set(c) == {"A", "B"} for c in combos)
    # 2:2 and 4:4 are 1:1; 2:4 is 1:2; 4:2 is 2:1; a lone claim is one whatever its priority
    assert pairs == {(0, 0), (0, 1), (1, 0), (1, 1), (1, 2), (1, 4), (2, 1), (4, 1)}
