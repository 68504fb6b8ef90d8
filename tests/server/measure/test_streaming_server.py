"""Streaming (decoupled) and sequence models against the real server and the fixtures' known truth.

streamer: first token after first_token_ms (20), then one token per token_ms (5) plus
token_ms_per_stream (1) per other stream in flight, max_tokens tokens, then an empty
final response. accumulator / accumulator_oldest: running sum and step index per
sequence, with an audit file proving every sequence's steps arrived whole and in order.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from perfkit.errors import UsageError
from perfkit.measure import profile
from perfkit.recorder import concat
from perfkit.records import LoadLevel, ProfileSpec, RunRecord
from perfkit.server import LocalLaunch, launch_local
from tests.conftest import copy_models

FIRST_TOKEN_MS, TOKEN_MS, PER_STREAM_MS = 20.0, 5.0, 1.0


def _data(tmp_path: Path, max_tokens: int, stream: bool = True) -> str:
    path = tmp_path / f"tokens{max_tokens}-{stream}.json"
    path.write_text(json.dumps({"data": [{"text_input": ["hi"], "max_tokens": [max_tokens], "stream": [stream]}]}))
    return str(path)


def _spec(model: str, *levels: LoadLevel, **kw) -> ProfileSpec:
    base = dict(protocol="grpc", measurement_interval_ms=400, max_trials=3, min_windows=2, warmup_s=0.3)
    base.update(kw)
    return ProfileSpec(model=model, levels=levels, **base)


def test_streamed_tokens_match_the_fixture_closed_and_open_loop(triton, tmp_path):
    spec = _spec(
        "streamer",
        LoadLevel("concurrency", 1),
        LoadLevel("concurrency", 4),
        LoadLevel("request_rate", 10, "constant"),
        streaming=True,
        input_data=_data(tmp_path, 6),
        goodput_slo_ms={"ttft": 10_000, "itl": 10_000},
    )
    rec = profile(triton, spec)
    c1, c4, rate = rec.levels
    for lv in rec.levels:
        st = lv.streaming
        assert st is not None and lv.error_count == 0 and st.request_count > 0
        assert st.output_len_mean == 6 and st.output_len_max == 6  # every token, the empty final not counted
        assert st.ttft.count == st.request_count and st.itl.count == 5 * st.request_count
        assert st.second_token.count == st.request_count
        assert st.ttft.min_us >= FIRST_TOKEN_MS * 1e3  # the model sleeps at least that long
        assert st.goodput_fraction == 1.0  # loose SLOs: every completed request counts
        assert len(st.windows) == len(lv.windows)  # per-window figures for the gate's significance test
        # a request ends at its final (empty) response, after its last token
        assert lv.service.p50_us > st.ttft.p50_us + 4 * st.itl.min_us
    # the known per-token delay, and its growth with streams in flight (continuous batching). The mean,
    # not the median: a response sent or read late shortens the gap after it by as much as it lengthens
    # the one before, so on a busy machine the gaps bunch (the median falls below the model's delay)
    # while their mean, a request's last token less its first over the gaps, keeps it.
    assert c1.streaming.itl.mean_us >= TOKEN_MS * 1e3 * 0.9
    assert c4.streaming.itl.mean_us >= (TOKEN_MS + 2 * PER_STREAM_MS) * 1e3
    assert c4.streaming.output_tokens_per_s > c1.streaming.output_tokens_per_s
    assert c1.streaming.ttft_corrected is None
    assert rate.streaming.ttft_corrected is not None and rate.dropped_count == 0
    assert rate.streaming.ttft_corrected.count == rate.streaming.request_count
    assert RunRecord.from_dict(json.loads(rec.to_json())) == rec


def test_a_final_response_that_carries_the_data_ends_the_request(triton, tmp_path):
    # stream=false: the model sends one response holding every token, flagged final
    spec = _spec("streamer", LoadLevel("concurrency", 2), streaming=True, input_data=_data(tmp_path, 4, stream=False))
    lv = profile(triton, spec).levels[0]
    assert lv.error_count == 0 and lv.streaming is not None
    assert lv.streaming.output_len_max == 1 and lv.streaming.itl.count == 0
    assert lv.streaming.ttft.min_us >= (FIRST_TOKEN_MS + 3 * TOKEN_MS) * 1e3


def test_output_tokens_from_a_declared_tensor(triton, tmp_path):
    spec = _spec("streamer", LoadLevel("concurrency", 2), streaming=True, input_data=_data(tmp_path, 5))
    lv = profile(triton, dataclasses.replace(spec, output_tokens_tensor="text_output")).levels[0]
    assert lv.error_count == 0 and lv.streaming.output_len_max == 5 and lv.streaming.output_len_mean == 5
    with pytest.raises(UsageError, match="--output-tokens-tensor output_ids: model 'streamer' has no such output"):
        profile(triton, dataclasses.replace(spec, output_tokens_tensor="output_ids"))
    with pytest.raises(UsageError, match="--workers 2: streamed requests run in one process"):
        profile(triton, dataclasses.replace(spec, workers=2))


def test_decoupled_model_needs_streaming_and_sequence_streams_need_grpc(triton, tmp_path):
    with pytest.raises(UsageError, match="decoupled"):
        profile(triton, _spec("streamer", LoadLevel("concurrency", 1)))
    with pytest.raises(UsageError, match="streams over gRPC only"):
        profile(triton, _spec("accumulator", LoadLevel("concurrency", 1), protocol="http", streaming=True))


# quiet: the per-token delay read over HTTP is a verdict on timing. Under load the frontend can hold an
# event back and flush it with the next (gaps of 0), the first token's included, which the gaps' mean
# cannot make up for (it is the last token less the first over the gaps)
@pytest.mark.quiet
def test_http_generate_stream_server_sent_events(triton, tmp_path):
    spec = _spec(
        "streamer",
        LoadLevel("concurrency", 2),
        LoadLevel("request_rate", 10, "poisson"),
        streaming=True,
        protocol="http",
        input_data=_data(tmp_path, 5),
    )
    for lv in profile(triton, spec).levels:
        st = lv.streaming
        assert lv.error_count == 0 and st is not None and st.request_count > 0
        assert st.output_len_mean == 5 and st.itl.count == 4 * st.request_count  # one event per token
        assert st.ttft.min_us >= FIRST_TOKEN_MS * 1e3
        assert st.itl.mean_us >= TOKEN_MS * 1e3 * 0.9  # the mean: bunched gaps keep it (above)
    assert lv.streaming.ttft_corrected is not None


def test_cli_streaming_prints_ttft_and_goodput(triton, tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "perfkit", "profile", "-m", "streamer", "-i", "grpc",
         "-u", triton.endpoints.grpc_url, "--admin-url", triton.endpoints.http_url, "--streaming",
         "--input-data", _data(tmp_path, 3), "--goodput", "ttft:5s", "-p", "300", "-r", "2",
         "-o", str(tmp_path / "run.json"), "-f", str(tmp_path / "run.csv")],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "TTFT p50" in out.stdout and "goodput" in out.stdout
    level = RunRecord.load(tmp_path / "run.json").levels[0]
    assert level.streaming is not None
    header, row = (tmp_path / "run.csv").read_text().splitlines()[:2]
    assert header.startswith("Concurrency,Inferences/Second,Response Throughput,")  # as perf_analyzer writes
    assert float(row.split(",")[2]) == pytest.approx(level.streaming.responses_per_s, rel=1e-3)
    bad = subprocess.run(
        [sys.executable, "-m", "perfkit", "profile", "-m", "streamer", "-u", triton.endpoints.http_url,
         "--goodput", "tpot:3ms", "-o", str(tmp_path / "bad.json")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2 and "--goodput tpot:3ms" in bad.stderr and "Traceback" not in bad.stderr
    closed = subprocess.run(
        [sys.executable, "-m", "perfkit", "profile", "-m", "streamer", "-i", "grpc", "-u", "127.0.0.1:9",
         "--admin-url", triton.endpoints.http_url, "--streaming", "-o", str(tmp_path / "closed.json")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert closed.returncode == 5 and "cannot open a gRPC stream to 127.0.0.1:9" in closed.stderr
    assert "Traceback" not in closed.stderr


def _audit(audit_dir: Path) -> dict[str, list[list[tuple[int, bool, bool]]]]:
    """Per correlation ID, its sequences as lists of (step, start, end) in arrival order."""
    seqs: dict[str, list[list[tuple[int, bool, bool]]]] = defaultdict(list)
    for path in sorted(audit_dir.glob("*.audit")):
        for line in path.read_text().splitlines():
            corrid, step, start, end = line.split()
            if start == "1" or not seqs[corrid]:
                seqs[corrid].append([])
            seqs[corrid][-1].append((int(step), start == "1", end == "1"))
    return seqs


@pytest.fixture(scope="module")
def audited_server(tritonserver, tmp_path_factory):
    """A server with both accumulators writing their audit files to one folder."""
    tmp = tmp_path_factory.mktemp("seq")
    repo = copy_models(tmp, ["accumulator", "accumulator_oldest"])
    audit = tmp / "audit"
    audit.mkdir()
    for name in ("accumulator", "accumulator_oldest"):
        cfg = repo / name / "config.pbtxt"
        text = cfg.read_text()
        cfg.write_text(
            text.replace(
                'key: "audit_dir"\n  value: { string_value: "" }',
                f'key: "audit_dir"\n  value: {{ string_value: "{audit}" }}',
            )
        )
    with launch_local(LocalLaunch(repo)) as server:
        yield server, audit


@pytest.mark.parametrize(
    ("model", "level", "extra"),
    [
        ("accumulator", (LoadLevel("concurrency", 2), LoadLevel("concurrency", 3)), {}),
        ("accumulator_oldest", LoadLevel("concurrency", 3), {}),
        ("accumulator", LoadLevel("request_rate", 150, "poisson"), {"num_of_sequences": 3}),
        # serial sequences at 150 req/s is what an idle machine holds; a loaded one may not: the rate offered is
        # at most half of what a closed-loop probe of the same sequences reads first (probe_share)
        (
            "accumulator_oldest",
            LoadLevel("request_rate", 150, "constant"),
            {"num_of_sequences": 4, "serial_sequences": True, "probe_share": 0.5},
        ),
        ("accumulator", LoadLevel("concurrency", 3), {"protocol": "http"}),
        ("accumulator_oldest", LoadLevel("request_rate", 150, "poisson"), {"protocol": "http", "num_of_sequences": 4}),
    ],
    ids=[
        "direct-closed",
        "oldest-closed",
        "direct-open",
        "oldest-open-serial",
        "http-direct-closed",
        "http-oldest-open",
    ],
)
def test_sequences_arrive_whole_and_in_order(audited_server, model, level, extra):
    server, audit = audited_server
    for old in audit.glob("*"):
        old.write_text("")  # the model appends (line-buffered); start each case empty
    levels = level if isinstance(level, tuple) else (level,)
    extra = dict(extra)
    share = extra.pop("probe_share", None)
    seq = dict(sequence_length=6, sequence_length_variation=50, sequence_id_start=1000)
    if share is not None:
        (probed,) = profile(
            server, _spec(model, LoadLevel("concurrency", extra["num_of_sequences"]), **seq, **extra)
        ).levels
        levels = tuple(dataclasses.replace(lv, value=min(lv.value, share * probed.completed_rps)) for lv in levels)
    for old in audit.glob("*"):
        old.write_text("")  # the probe's sequences are not this case's
    spec = _spec(model, *levels, **seq, **extra)
    for lv in profile(server, spec).levels:
        assert lv.error_count == 0 and lv.request_count > 20
    seqs = _audit(audit)
    assert seqs, "the model audited no steps"
    complete = 0
    lengths = set()
    for corrid, runs in seqs.items():
        assert int(corrid) >= 1000
        assert len(runs) == 1, f"ID {corrid} reused (across levels too) while IDs are unbounded"
        for steps in runs:
            assert steps[0][1], f"sequence {corrid} began without its start flag: {steps[:3]}"
            assert [s[0] for s in steps] == list(range(1, len(steps) + 1)), f"sequence {corrid} out of order"
            assert not any(s[2] for s in steps[:-1]), f"sequence {corrid} ended early"
            if steps[-1][2]:
                complete += 1
                lengths.add(len(steps))
                # 6 +/- 50%, or shorter: a level's end closes its live sequences with one last step
                assert 1 <= len(steps) <= 9
    assert complete > 0 and len(lengths & {3, 4, 5, 6, 7, 8, 9}) > 1
    open_at_end = [c for c, runs in seqs.items() if not runs[-1][-1][2]]
    assert not open_at_end, f"sequences left open after the run: {open_at_end[:5]}"


# -- trace replay -------------------------------------------------------------------------------


def test_jsonl_trace_sessions_replay_as_ordered_sequences(audited_server, tmp_path):
    server, audit = audited_server
    for old in audit.glob("*"):
        old.write_text("")
    lines = []
    for turn in range(4):  # three sessions, turns 2 ms apart: a turn is often due while the previous is in flight
        for session in ("a", "b", "c"):
            ts = turn * 2 + {"a": 0, "b": 0.5, "c": 1}[session]
            lines.append(json.dumps({"timestamp": ts, "inputs": {"INPUT": [turn + 1]}, "session_id": session}))
    trace = tmp_path / "trace.jsonl"
    trace.write_text("\n".join(lines) + "\n")
    rec = profile(server, _spec("accumulator", LoadLevel("concurrency", 1), trace=str(trace), sequence_id_start=500))
    (lv,) = rec.levels
    assert lv.load.mode == "trace" and lv.request_count == 12 and lv.error_count == 0
    assert lv.corrected is not None and lv.corrected.count == 12
    seqs = _audit(audit)
    assert sorted(seqs) == ["500", "501", "502"]  # one sequence per session, IDs from the start
    for corrid, runs in seqs.items():
        assert len(runs) == 1, f"session {corrid} split: {runs}"
        assert runs[0] == [(1, True, False), (2, False, False), (3, False, False), (4, False, True)]


def test_a_sequence_model_trace_needs_sessions(audited_server, tmp_path):
    from perfkit.errors import InputError

    server, _ = audited_server
    trace = tmp_path / "nosession.jsonl"
    trace.write_text('{"timestamp": 0, "inputs": {"INPUT": [1]}}\n')
    with pytest.raises(InputError, match="every request needs a 'session_id'"):
        profile(server, _spec("accumulator", LoadLevel("concurrency", 1), trace=str(trace)))


def test_fixed_schedule_replays_each_entry_once_at_its_timestamp(triton, tmp_path):
    data = tmp_path / "schedule.json"
    entries = [{"text_input": ["q"], "max_tokens": [3], "stream": [True], "timestamp": [i * 40]} for i in range(8)]
    data.write_text(json.dumps({"data": entries}))
    spec = _spec("streamer", LoadLevel("concurrency", 1), streaming=True, input_data=str(data), fixed_schedule=True)
    (lv,) = profile(triton, spec).levels
    assert lv.load.mode == "trace" and lv.load.value == pytest.approx(8 / 0.28)
    assert lv.request_count == 8 and lv.error_count == 0 and lv.dropped_count == 0
    assert lv.streaming is not None and lv.streaming.output_len_max == 3
    assert lv.streaming.ttft_corrected is not None and lv.streaming.ttft_corrected.count == 8


def test_jsonl_trace_of_lengths_over_http_generate_stream(triton, tmp_path):
    trace = tmp_path / "lengths.jsonl"
    trace.write_text(
        "\n".join(
            json.dumps({"timestamp": i * 30, "input_length": 5, "output_length": n}) for i, n in enumerate([2, 4, 6])
        )
    )
    spec = _spec("streamer", LoadLevel("concurrency", 1), streaming=True, protocol="http", trace=str(trace))
    (lv,) = profile(triton, spec).levels
    assert lv.request_count == 3 and lv.error_count == 0
    assert lv.streaming.output_len_mean == 4 and lv.streaming.output_len_max == 6


@pytest.mark.parametrize("transport", ["grpc", "grpc.aio"])
def test_both_grpc_stream_transports_carry_large_requests_and_every_token(triton, transport):
    import numpy as np

    from perfkit.loadgen import LoadGenerator, ModelIO, StreamConfig, Tensor, grpc_payload, to_wire

    io = ModelIO.from_server(triton.model_metadata("streamer", ""), triton.model_config("streamer"))
    prompt = np.array([b"x" * 40_000], dtype=np.object_)  # spans several HTTP/2 DATA frames
    tensors = [
        Tensor("text_input", "BYTES", (1,), to_wire(prompt, "BYTES")),
        Tensor("max_tokens", "INT32", (1,), to_wire(np.array([3], dtype=np.int32), "INT32")),
        Tensor("stream", "BOOL", (1,), to_wire(np.array([True]), "BOOL")),
    ]
    host, port = triton.endpoints.host, int(triton.endpoints.grpc_port)
    cfg = StreamConfig(host, port, (grpc_payload(io, tensors),), transport=transport)
    parts = []
    with LoadGenerator(cfg) as gen:
        gen.start(LoadLevel("concurrency", 2))
        deadline = time.monotonic() + 60
        while sum(len(p) for p in parts) < 10 and time.monotonic() < deadline:  # wait on completions
            parts.append(gen.drain())
        parts.append(gen.stop(30))
    samples = concat(parts)
    assert len(samples) >= 10
    assert (samples.status == 0).all()
    assert all(len(r) == 3 for r in samples.response_ns)
    assert (samples.done_ns >= np.array([r[-1] for r in samples.response_ns])).all()


def test_open_loop_streams_past_max_outstanding_are_dropped_and_counted(triton, tmp_path):
    spec = _spec(
        "streamer", LoadLevel("request_rate", 200, "constant"), streaming=True, input_data=_data(tmp_path, 8),
        max_outstanding=2,
    )  # fmt: skip
    (lv,) = profile(triton, spec).levels
    # each stream takes ~60 ms: at 200 req/s at most 2 in flight leaves most sends undone
    assert lv.dropped_count > lv.request_count // 2 and lv.errors.get("dropped") == lv.dropped_count
    assert lv.streaming is not None and lv.streaming.request_count > 0
    assert lv.streaming.request_count + lv.dropped_count <= lv.request_count
