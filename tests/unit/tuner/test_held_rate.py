"""The request path's ceiling in the calibration (_held_rate): the highest of the saturated rate's
15% steps down that holds the budget, then half a step above it where that holds too, so that the
capacity (and every claim of a config the path bounds, which starts there) is read to ~7.5%, not
15%: onnx_mlp saturated at 10,923 req/s, held 7,892 (0.85^2) and not 9,285 (0.85)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from perfkit.gate.synthetic import synthetic_level, synthetic_record
from perfkit.records import Budget, ProfileSpec
from perfkit.tuner._find_load import TrialLoadSettings
from perfkit.tuner._search._model_calibrate import HELD_STEP, _held_rate, held_config

SATURATED_RPS = 10_923.0
BUDGET = Budget(20.0, 99.0, "latency")


def _runner(holds_up_to_rps: float) -> tuple[SimpleNamespace, list[float]]:
    """A stand-in runner whose path holds p99 <= 20 ms up to holds_up_to_rps; the rates measured."""
    rates: list[float] = []

    def measure(server: Any, spec: ProfileSpec, **kw: Any) -> Any:
        rate = spec.levels[0].value
        rates.append(rate)
        p99_ms = 5.0 if rate <= holds_up_to_rps else 60.0
        return synthetic_record([synthetic_level(latency_ms=p99_ms / 1.3, noise=0.0)], model=spec.model)

    trial_load = TrialLoadSettings(budget=BUDGET, load_mode="rate", protocol="grpc")
    return SimpleNamespace(measure=measure, trial_load=trial_load, model="m", server=None), rates


@pytest.mark.parametrize(
    ("holds_up_to", "want", "steps"),
    [
        (8_800.0, SATURATED_RPS * HELD_STEP**1.5, 2),  # between 0.85^2 and 0.85: half a step above 0.85^2 holds
        (8_000.0, SATURATED_RPS * HELD_STEP**2, 2),  # half a step above does not: 0.85^2
        (10_200.0, SATURATED_RPS * HELD_STEP**0.5, 1),  # 0.85 holds, and half a step above it
    ],
)
def test_the_path_capacity_is_read_to_half_a_step(holds_up_to: float, want: float, steps: int) -> None:
    t, rates = _runner(holds_up_to)
    got = _held_rate(t, SATURATED_RPS)  # type: ignore[arg-type]  # a stand-in with the runner's fields
    assert got == pytest.approx(want)
    assert got <= holds_up_to < got / HELD_STEP**0.5  # within half a step of what the path holds
    # the 15% steps down to the first held, then the one half-step level above it
    assert rates == pytest.approx([SATURATED_RPS * HELD_STEP**k for k in range(1, steps + 1)]
                                  + [SATURATED_RPS * HELD_STEP ** (steps - 0.5)])  # fmt: skip


def test_nothing_held_is_zero_and_measures_every_step() -> None:
    t, rates = _runner(0.0)
    assert _held_rate(t, SATURATED_RPS) == 0.0  # type: ignore[arg-type]  # as above
    assert len(rates) == 5 and rates[-1] == pytest.approx(SATURATED_RPS * HELD_STEP**5)


BATCH = {"max_batch_size": 128, "dynamic_batching": True, "max_queue_delay_us": 5_000, "instance_count": 1}


def test_the_capacity_is_read_at_the_spaces_shortest_delay_on_the_count_with_the_most_room() -> None:
    """onnx_mlp on one CPU: its two instances share it in full (room alike), so the path's ceiling
    is read on one instance at the space's 1 ms, as the config measured first runs, not on the two
    the calibration loaded last at its own 5 ms."""
    alike = held_config(BATCH, [1000], [1, 2], lambda c: 7_600.0)
    assert alike == {**BATCH, "max_queue_delay_us": 1000, "instance_count": 1}
    # where two instances could complete more, on two; the shortest delay scored
    assert held_config(BATCH, [250, 1000, 4000], [1, 2], lambda c: 1_500.0 * c)["instance_count"] == 2
    assert held_config(BATCH, [250, 1000, 4000], [1, 2], lambda c: 1_500.0 * c)["max_queue_delay_us"] == 250
    # within 1%: the fewer instances
    assert held_config(BATCH, [], [1, 2], lambda c: 7_600.0 + 50.0 * c)["instance_count"] == 1
    # no delay scored, no second count measured: the calibration's config as it is
    assert held_config(BATCH, [], [], lambda c: 0.0) == BATCH
