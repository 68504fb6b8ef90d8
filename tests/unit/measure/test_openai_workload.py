"""A level's requests as sent against the server's usage (perfkit.measure.workload_check), on synthetic samples."""

from __future__ import annotations

import numpy as np

from perfkit.measure import workload_check
from perfkit.records import STATUS_OK, Samples


def _samples(sent: list[int], reported: list[int], outputs: list[int], status: list[int] | None = None) -> Samples:
    n = len(sent)
    t = np.arange(n, dtype=np.int64) * 1000
    return Samples(
        due_ns=np.full(n, -1, dtype=np.int64),
        sent_ns=t,
        done_ns=t + 500,
        status=np.array(status or [STATUS_OK] * n, dtype=np.int32),
        output_tokens=np.array(outputs, dtype=np.int64),
        input_tokens=np.stack([np.array(sent, dtype=np.int64), np.array(reported, dtype=np.int64)], axis=1),
    )


def test_what_the_server_counted_as_sent_is_no_mismatch():
    s = _samples([32, 40, 20], [32, 40, 20], [16, 16, 16])
    check = workload_check(s, np.ones(3, dtype=bool), [16, 16])
    assert check.mismatch == "" and check.reported_requests == 3
    assert check.sent_input_tokens_mean == check.reported_input_tokens_mean == 92 / 3
    assert check.sent_output_tokens_mean == check.reported_output_tokens_mean == 16


def test_errors_that_cancel_in_the_mean_are_still_a_mismatch_per_request():
    s = _samples([30, 30], [20, 40], [4, 4])  # the mean agrees (30), each request is off by 10
    check = workload_check(s, np.ones(2, dtype=bool), [4])
    assert "input tokens per request" in check.mismatch and "2 of 2 requests" in check.mismatch


def test_a_difference_within_the_tolerance_is_no_mismatch():
    s = _samples([100, 100], [104, 99], [8, 8])  # 4% and 1 token
    assert workload_check(s, np.ones(2, dtype=bool), [8]).mismatch == ""


def test_an_answer_shorter_than_asked_is_a_mismatch():
    s = _samples([8, 8], [8, 8], [3, 5])
    check = workload_check(s, np.ones(2, dtype=bool), [16])
    assert "output tokens per request where 16.0 were asked" in check.mismatch


def test_a_server_without_usage_is_said_and_requests_outside_the_level_or_failed_are_left_out():
    s = _samples([8, 8, 8], [-1, -1, -1], [2, 2, 2])
    check = workload_check(s, np.ones(3, dtype=bool), [2])
    assert check.reported_requests == 0 and check.reported_input_tokens_mean is None
    assert "reported no usage" in check.mismatch
    s = _samples([8, 8, 8], [8, 99, 99], [2, 2, 2], status=[STATUS_OK, 500, STATUS_OK])
    check = workload_check(s, np.array([True, True, False]), [2])
    assert check.requests == 2 and check.reported_requests == 1 and check.mismatch == ""
