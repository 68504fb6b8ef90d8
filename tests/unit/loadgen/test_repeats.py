"""Stated repeats: the order of a --repeat-fraction sequence, a file's own repeats, the file written."""

from __future__ import annotations

import json

import numpy as np
import pytest

from perfkit.errors import UsageError
from perfkit.loadgen import ModelIO, Tensor
from perfkit.loadgen._repeats import REPEAT_MIN_AGE, count_repeats, distinct_needed, repeat_order, write_input_data
from perfkit.measure._repeat_setup import check_repeat_spec, repeat_workload
from perfkit.records import LoadLevel, ProfileSpec


def _repeats_in(order: list[int]) -> int:
    seen: set[int] = set()
    n = 0
    for k in order:
        n += k in seen
        seen.add(k)
    return n


@pytest.mark.parametrize("fraction", [0.0, 0.1, 0.5, 0.9, 1 / 3])
def test_every_prefix_holds_the_stated_fraction_within_one_request(fraction: float) -> None:
    order = repeat_order(3000, fraction, seed=7)
    for n in (1, 2, 10, 99, 1000, 3000):
        assert abs(_repeats_in(order[:n]) - n * fraction) <= 1
    assert len(set(order)) == distinct_needed(3000, fraction)


def test_a_repeat_only_sends_an_input_already_sent_and_new_inputs_come_in_order() -> None:
    order = repeat_order(2000, 0.5, seed=1)
    high = -1
    for k in order:
        assert k <= high + 1  # never an input not yet sent, except the next new one
        high = max(high, k)
    assert order[0] == 0
    for i, k in enumerate(order):  # a repeat is of an input sent long enough before (answered, cached)
        if k < max(order[:i], default=-1) + 1 and i > 2 * REPEAT_MIN_AGE + 2:
            assert k < max(order[:i]) + 1 - REPEAT_MIN_AGE
    assert repeat_order(2000, 0.5, seed=1) == order  # seeded
    assert repeat_order(2000, 0.5, seed=2) != order


@pytest.mark.parametrize("fraction", [-0.1, 1.0, 1.5])
def test_a_fraction_outside_zero_to_one_is_refused(fraction: float) -> None:
    with pytest.raises(ValueError):
        repeat_order(10, fraction)
    with pytest.raises(UsageError, match="--repeat-fraction"):
        check_repeat_spec(ProfileSpec(model="m", levels=(LoadLevel("concurrency", 1),), repeat_fraction=fraction))


def _t(values: list[float]) -> list[Tensor]:
    return [Tensor("INPUT0", "FP32", (1, len(values)), np.array(values, dtype=np.float32).tobytes())]


def test_a_files_repeats_are_counted_as_equal_inputs() -> None:
    reqs = [_t([1, 2]), _t([3, 4]), _t([1, 2]), _t([1, 2]), _t([5, 6])]
    assert count_repeats(reqs) == (pytest.approx(2 / 5), 3)
    assert count_repeats([]) == (0.0, 0)


def test_the_written_file_reads_back_step_by_step_with_its_repeats(tmp_path) -> None:
    reqs = [_t([1, 2]), _t([3, 4]), _t([1, 2])]
    path = write_input_data(tmp_path / "data.json", reqs, batched=True)
    data = json.loads(path.read_text())["data"]
    assert [s["INPUT0"]["content"] for s in data] == [[1.0, 2.0], [3.0, 4.0], [1.0, 2.0]]
    assert data[0]["INPUT0"]["shape"] == [2]


def _io() -> ModelIO:
    return ModelIO(name="m", version="", max_batch_size=0, inputs=(("INPUT0", "FP32", (16,)),), outputs=("OUTPUT0",))


def test_generated_repeats_state_the_fraction_sent_and_differ_run_to_run() -> None:
    spec = ProfileSpec(model="m", levels=(LoadLevel("concurrency", 1),), repeat_fraction=0.5)
    distinct, order, stats = repeat_workload(_io(), spec, [], [])
    assert stats is not None and order is not None
    assert stats.fraction_asked == 0.5 and stats.source == "generated"
    assert stats.fraction_sent == pytest.approx(0.5, abs=1 / stats.requests)
    assert stats.distinct_inputs == len(distinct) == len(set(order))
    assert len(order) == stats.requests
    again, _, _ = repeat_workload(_io(), spec, [], [])
    assert distinct[0][0].data != again[0][0].data  # a later run's "new" inputs are new to a cache too


def test_without_a_fraction_generated_data_states_no_repeats() -> None:
    spec = ProfileSpec(model="m", levels=(LoadLevel("concurrency", 1),))
    steps = [_t([0.0] * 16)]
    assert repeat_workload(_io(), spec, steps, []) == (steps, None, None)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"input_data": "zero"}, "generates random inputs"),
        ({"workers": 2}, "--workers"),
        ({"streaming": True}, "decoupled"),
        ({"shared_memory": "system"}, "--shared-memory"),
    ],
)
def test_what_a_repeat_sequence_cannot_carry_is_refused(kw: dict, match: str) -> None:
    spec = ProfileSpec(model="m", levels=(LoadLevel("concurrency", 1),), repeat_fraction=0.5, **kw)
    with pytest.raises(UsageError, match=match):
        check_repeat_spec(spec)
