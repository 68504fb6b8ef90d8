"""`perfkit profile --service-kind openai` against the known-truth OpenAI server (tests/support/openai_server.py).

The server's timing is stated (first token 40 ms after a request gets one of its slots, one more
every 10 ms) and it logs what it did for each request (its receive time, each token's write time,
the prompt's length under the same tokenizer), so perfkit's figures are held against both: the
stated truth, loosely (the server's own timers run late on a loaded machine), and the server's
own log, tightly (the client's TTFT is the server's plus the loopback's delivery, never less).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from perfkit.cli import main
from perfkit.errors import ExitCode
from perfkit.records import RunRecord
from tests.support.openai_server import OpenAIServer, openai_server

TOKENIZER = Path(__file__).parents[2] / "support" / "tokenizer"
FIRST_MS, TOKEN_MS = 40.0, 10.0


@pytest.fixture(scope="module")
def truth(tmp_path_factory: pytest.TempPathFactory) -> Any:
    log = tmp_path_factory.mktemp("truth") / "requests.jsonl"
    with openai_server(TOKENIZER, log, first_token_ms=FIRST_MS, token_ms=TOKEN_MS, slots=4) as server:
        yield server


def _profile(server: OpenAIServer, out: Path, *args: str) -> tuple[int, RunRecord | None]:
    argv = [
        "profile", "--service-kind", "openai", "-u", server.url, "-m", "truth", "--tokenizer", str(TOKENIZER),
        "-o", str(out), *args,
    ]  # fmt: skip
    rc = main(argv)
    return rc, RunRecord.load(out) if out.exists() else None


def _server_truth(entries: list[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """The server's own TTFT (receive to first token's write) and gaps between tokens, in ms."""
    ttft = np.array([(e["token_ns"][0] - e["received_ns"]) / 1e6 for e in entries if e.get("token_ns")])
    gaps = np.concatenate([np.diff(e["token_ns"]) / 1e6 for e in entries if len(e.get("token_ns", ())) > 1])
    return ttft, gaps


@pytest.mark.quiet
@pytest.mark.parametrize("concurrency", [1, 4])
def test_streamed_chat_ttft_and_itl_are_the_servers_within_stated_bounds(truth, tmp_path, concurrency):
    skip = len(truth.entries())
    rc, rec = _profile(
        truth, tmp_path / "run.json", "--streaming", "--synthetic-input-tokens-mean", "32", "--output-tokens-mean",
        "16", "--concurrency-range", str(concurrency), "--request-count", "48",
    )  # fmt: skip
    assert rc == 0 and rec is not None
    (level,) = rec.levels
    st = level.streaming
    assert st is not None and st.request_count >= 48
    entries = truth.entries()[skip:]
    server_ttft, server_gaps = _server_truth(entries)
    ttft_ms, itl_ms = st.ttft.p50_us / 1e3, st.itl.p50_us / 1e3
    # the stated truth: never below it; above it by what the server's timers and the loopback add
    assert FIRST_MS <= ttft_ms <= FIRST_MS + 20.0
    assert abs(itl_ms - TOKEN_MS) <= 2.0
    # the server's own log: the client sees each token after the server wrote it, by little
    assert 0.0 <= ttft_ms - float(np.median(server_ttft)) <= 3.0
    assert abs(itl_ms - float(np.median(server_gaps))) <= 1.0
    assert st.output_len_mean == 16 and st.tpot is not None and abs(st.tpot.p50_us / 1e3 - TOKEN_MS) <= 2.0
    assert st.output_tokens_per_s_per_user is not None and 50 < st.output_tokens_per_s_per_user <= 110
    # tokens/s: every request's 16 tokens over the level, as the server produced them
    assert st.output_tokens_per_s == pytest.approx(16 * level.completed_rps, rel=0.1)


def test_the_server_received_prompts_of_exactly_the_requested_length(truth, tmp_path):
    skip = len(truth.entries())
    rc, rec = _profile(
        truth, tmp_path / "run.json", "--streaming", "--synthetic-input-tokens-mean", "24",
        "--synthetic-input-tokens-stddev", "6", "--output-tokens-mean", "4", "--concurrency-range", "4",
        "--request-count", "40",
    )  # fmt: skip
    assert rc == 0 and rec is not None
    entries = truth.entries()[skip:]
    assert len(entries) >= 40
    lengths = [e["prompt_tokens"] for e in entries]
    assert len(set(lengths)) > 3  # the stddev drew different lengths...
    check = rec.levels[0].workload
    assert check is not None and check.mismatch == ""  # ... and each was what the server counted
    assert check.reported_requests >= 40 and check.reported_output_tokens_mean == 4
    assert all(e["max_tokens"] == 4 for e in entries)


def test_a_server_that_counts_more_input_tokens_than_sent_is_a_warning_in_the_output_and_the_record(
    truth, tmp_path, capsys
):
    # the chat template's effect, made by a system prompt the server counts and the tokenizer did not
    rc, rec = _profile(
        truth, tmp_path / "run.json", "--synthetic-input-tokens-mean", "16", "--output-tokens-mean", "2",
        "--extra-inputs", 'messages:[{"role":"system","content":"report level"},{"role":"user","content":"model"}]',
        "--concurrency-range", "2", "--request-count", "10",
    )  # fmt: skip
    assert rc == 0 and rec is not None
    check = rec.levels[0].workload
    assert check is not None and "input tokens per request" in check.mismatch
    assert "WARNING: the server counted" in capsys.readouterr().err


def test_requests_beyond_the_slots_wait_so_ttft_grows_past_the_knee(tmp_path):
    log = tmp_path / "requests.jsonl"
    with openai_server(TOKENIZER, log, first_token_ms=FIRST_MS, token_ms=TOKEN_MS, slots=1) as server:
        rc, rec = _profile(
            server, tmp_path / "run.json", "--streaming", "--synthetic-input-tokens-mean", "8",
            "--output-tokens-mean", "4", "--concurrency-range", "2", "--request-count", "12",
        )  # fmt: skip
    assert rc == 0 and rec is not None
    st = rec.levels[0].streaming
    assert st is not None
    generation_ms = FIRST_MS + 3 * TOKEN_MS  # one slot: the second request waits for the first's whole answer
    assert st.ttft.p50_us / 1e3 > generation_ms
    assert st.itl.p50_us / 1e3 < generation_ms / 2  # once it has the slot, its tokens come at the server's pace


def test_completions_not_streamed_are_measured_as_whole_answers(truth, tmp_path):
    rc, rec = _profile(
        truth, tmp_path / "run.json", "--endpoint-type", "completions", "--synthetic-input-tokens-mean", "8",
        "--output-tokens-mean", "5", "--concurrency-range", "2", "--request-count", "10",
    )  # fmt: skip
    assert rc == 0 and rec is not None
    level = rec.levels[0]
    assert level.streaming is None and level.error_count == 0
    assert level.service.p50_us / 1e3 >= FIRST_MS + 4 * TOKEN_MS
    assert level.workload is not None and level.workload.reported_output_tokens_mean == 5
    assert level.workload.mismatch == ""


def test_an_open_loop_stays_open_and_counts_its_requests(truth, tmp_path):
    rc, rec = _profile(
        truth, tmp_path / "run.json", "--streaming", "--synthetic-input-tokens-mean", "8", "--output-tokens-mean",
        "3", "--request-rate-range", "20", "--request-distribution", "poisson", "--request-count", "30",
    )  # fmt: skip
    assert rc == 0 and rec is not None
    level = rec.levels[0]
    assert level.streaming is not None and level.streaming.ttft_corrected is not None
    assert level.request_count >= 30 and level.dropped_count == 0


def test_a_failing_server_makes_the_run_exit_non_zero_with_its_error_rate(tmp_path, capsys):
    log = tmp_path / "requests.jsonl"
    with openai_server(TOKENIZER, log, first_token_ms=5, token_ms=1, slots=4, fail_every=2) as server:
        rc, rec = _profile(
            server, tmp_path / "run.json", "--streaming", "--synthetic-input-tokens-mean", "8",
            "--output-tokens-mean", "2", "--concurrency-range", "1", "--request-count", "20",
        )  # fmt: skip
    assert rc == ExitCode.MEASUREMENT
    err = capsys.readouterr().err
    assert "error rate" in err and "http_500" in err
    assert rec is not None
    level = rec.levels[0]
    rate = level.error_count / level.request_count
    assert f"error rate {rate:.1%}" in err
    assert 0.4 <= rate <= 0.6  # every second request failed


def test_a_missing_tokenizer_is_refused_naming_the_path(truth, tmp_path, capsys):
    missing = tmp_path / "nowhere"
    rc = main(["profile", "--service-kind", "openai", "-u", truth.url, "-m", "truth", "--tokenizer", str(missing)])
    assert rc == ExitCode.USAGE
    assert str(missing) in capsys.readouterr().err


def test_a_model_the_server_does_not_serve_is_refused_naming_what_it_serves(truth, tmp_path, capsys):
    rc = main(["profile", "--service-kind", "openai", "-u", truth.url, "-m", "other", "--tokenizer", str(TOKENIZER)])
    assert rc == ExitCode.USAGE
    assert "the server serves truth" in capsys.readouterr().err


def test_the_record_round_trips_with_its_openai_spec_and_checks(truth, tmp_path):
    rc, rec = _profile(
        truth, tmp_path / "run.json", "--streaming", "--synthetic-input-tokens-mean", "8", "--output-tokens-mean",
        "2", "--concurrency-range", "1", "--request-count", "6", "--goodput", "time_to_first_token:500",
    )  # fmt: skip
    assert rc == 0 and rec is not None
    assert rec.spec.service_kind == "openai" and rec.spec.openai is not None
    assert rec.spec.openai.input_tokens_mean == 8 and rec.spec.openai.path == "/v1/chat/completions"
    assert rec.levels[0].streaming is not None and rec.levels[0].streaming.goodput_fraction == 1.0
    data = json.loads((tmp_path / "run.json").read_text())
    assert data["levels"][0]["workload"]["sent_input_tokens_mean"] == 8


@pytest.mark.quiet
def test_the_gate_judges_two_openai_runs_by_their_streaming_figures(truth, tmp_path, capsys):
    runs = []
    for name in ("a", "b"):
        rc, _ = _profile(
            truth, tmp_path / f"{name}.json", "--streaming", "--synthetic-input-tokens-mean", "8",
            "--output-tokens-mean", "4", "--concurrency-range", "2", "-p", "500", "--max-trials", "6",
        )  # fmt: skip
        assert rc == 0
        runs.append(str(tmp_path / f"{name}.json"))
    capsys.readouterr()
    rc = main(["gate", "--baseline", runs[0], "--current", runs[1], "--threshold", "itl_p50:+50%"])
    out = capsys.readouterr().out
    assert "itl_p50 (service)" in out
    assert rc in (ExitCode.OK, ExitCode.GATE_INCONCLUSIVE)  # judged: neither invalid nor a metric it lacks


def test_a_perf_analyzer_input_file_sends_its_bodies_as_written(truth, tmp_path):
    bodies = [
        {"messages": [{"role": "user", "content": "the model takes a prompt"}], "max_tokens": 3},
        {"messages": [{"role": "user", "content": "report"}], "max_tokens": 3},
    ]
    data = tmp_path / "inputs.json"
    data.write_text(json.dumps({"data": [{"payload": [b]} for b in bodies]}))
    skip = len(truth.entries())
    rc, rec = _profile(
        truth, tmp_path / "run.json", "--streaming", "--input-data", str(data), "--concurrency-range", "1",
        "--request-count", "6",
    )  # fmt: skip
    assert rc == 0 and rec is not None
    entries = truth.entries()[skip:]
    from perfkit.loadgen import count_tokens, load_tokenizer

    tok = load_tokenizer(str(TOKENIZER))
    expected = {count_tokens(tok, b["messages"][0]["content"]) for b in bodies}
    assert {e["prompt_tokens"] for e in entries} == expected and all(e["max_tokens"] == 3 for e in entries)
    check = rec.levels[0].workload
    assert check is not None and check.mismatch == "" and check.reported_output_tokens_mean == 3


def test_a_malformed_input_file_is_refused_naming_its_entry(truth, tmp_path, capsys):
    data = tmp_path / "inputs.json"
    data.write_text(json.dumps({"data": [{"payload": [{"prompt": "x"}]}, {"text": "no payload"}]}))
    rc = main(["profile", "--service-kind", "openai", "-u", truth.url, "-m", "truth", "--input-data", str(data)])
    assert rc == ExitCode.INPUT
    assert "data[1]" in capsys.readouterr().err


def test_an_open_loop_past_the_knee_keeps_its_schedule_and_counts_what_it_drops(tmp_path):
    log = tmp_path / "requests.jsonl"
    # one slot, each answer ~60 ms: 40 req/s is far past what it serves, and at most 3 may be in flight
    with openai_server(TOKENIZER, log, first_token_ms=FIRST_MS, token_ms=TOKEN_MS, slots=1) as server:
        rc, rec = _profile(
            server, tmp_path / "run.json", "--streaming", "--synthetic-input-tokens-mean", "8",
            "--output-tokens-mean", "3", "--request-rate-range", "40", "--max-outstanding", "3",
            "--request-count", "60",
        )  # fmt: skip
    assert rec is not None
    level = rec.levels[0]
    assert level.dropped_count > 0 and level.errors.get("dropped") == level.dropped_count
    assert rc == ExitCode.MEASUREMENT  # drops are failed requests: the run says its error rate
    # the sends that went out were not held back by the answers in flight: the schedule's rate
    assert level.sent_rps + level.dropped_count / level.duration_s == pytest.approx(40, rel=0.25)


def test_embeddings_are_sent_whole_and_their_input_checked(truth, tmp_path):
    skip = len(truth.entries())
    rc, rec = _profile(
        truth, tmp_path / "run.json", "--endpoint-type", "embeddings", "--synthetic-input-tokens-mean", "12",
        "--concurrency-range", "2", "--request-count", "10",
    )  # fmt: skip
    assert rc == 0 and rec is not None
    entries = truth.entries()[skip:]
    assert entries and all(e["path"] == "/v1/embeddings" and e["prompt_tokens"] == 12 for e in entries)
    check = rec.levels[0].workload
    assert check is not None and check.mismatch == "" and check.reported_input_tokens_mean == 12


@pytest.mark.parametrize("streaming", [True, False])
def test_a_server_that_closes_after_each_answer_is_no_lost_connection(tmp_path, streaming):
    log = tmp_path / "requests.jsonl"
    with openai_server(TOKENIZER, log, first_token_ms=5, token_ms=1, slots=2, close_each=True) as server:
        rc, rec = _profile(
            server, tmp_path / "run.json", "--synthetic-input-tokens-mean", "8", "--output-tokens-mean", "3",
            "--concurrency-range", "2", "--request-count", "20", *(["--streaming"] if streaming else []),
        )  # fmt: skip
    assert rc == 0 and rec is not None
    level = rec.levels[0]
    assert level.error_count == 0 and level.reconnects == 0 and "lost" not in level.note


@pytest.mark.parametrize("flag", [["-i", "grpc"], ["--shared-memory", "system"], ["--workers", "2"]])
def test_what_only_triton_carries_is_refused_for_an_openai_endpoint(truth, capsys, flag):
    argv = ["profile", "--service-kind", "openai", "-u", truth.url, "-m", "truth", "--tokenizer", str(TOKENIZER)]
    assert main([*argv, *flag]) == ExitCode.USAGE
    assert flag[0] in capsys.readouterr().err
