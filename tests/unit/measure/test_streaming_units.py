"""Streaming and sequence pieces without a server: wire suffix, sequence rules, figures, records."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tritonclient.grpc import service_pb2

from perfkit.errors import UsageError
from perfkit.loadgen import SequenceSpec
from perfkit.loadgen._sequences import SequenceManager
from perfkit.loadgen._stream_parts import request_suffix
from perfkit.measure import parse_goodput
from perfkit.measure._streaming import streaming_summary
from perfkit.recorder import concat, summarize
from perfkit.records import (
    STATUS_DROPPED,
    STATUS_OK,
    LevelResult,
    LoadLevel,
    Machine,
    ModelInfo,
    Precision,
    ProfileSpec,
    RunRecord,
    Samples,
    ServerInfo,
    StreamingSummary,
    from_dict,
    to_dict,
)


def test_request_suffix_sets_id_and_sequence_parameters_on_a_prebuilt_request():
    base = service_pb2.ModelInferRequest(model_name="m", id="old").SerializeToString()
    req = service_pb2.ModelInferRequest.FromString(base + request_suffix("42", sequence_id=7, start=True, end=False))
    assert req.model_name == "m" and req.id == "42"  # the appended id wins
    p = req.parameters
    assert p["triton_enable_empty_final_response"].bool_param is True
    assert p["sequence_id"].int64_param == 7
    assert p["sequence_start"].bool_param is True and p["sequence_end"].bool_param is False
    big = service_pb2.ModelInferRequest.FromString(base + request_suffix("1", sequence_id=2**40 + 3, end=True))
    assert big.parameters["sequence_id"].int64_param == 2**40 + 3 and big.parameters["sequence_end"].bool_param
    text = service_pb2.ModelInferRequest.FromString(base + request_suffix("1", sequence_id="user-9"))
    assert text.parameters["sequence_id"].string_param == "user-9"
    plain = service_pb2.ModelInferRequest.FromString(base + request_suffix("5"))
    assert "sequence_id" not in plain.parameters


def _run_slot(mgr: SequenceManager, slot: int, requests: int, payloads: int = 3) -> list[tuple[int, int, bool, bool]]:
    return [mgr.next_request(slot, payloads) for _ in range(requests)]


def test_sequences_have_start_and_end_flags_and_lengths_within_the_variation():
    mgr = SequenceManager(SequenceSpec(length=10, length_variation_pct=20), slots=1, seed=3)
    steps = _run_slot(mgr, 0, 500)
    lengths, current = [], 0
    for i, (payload, _, start, end) in enumerate(steps):
        assert start == (current == 0)
        assert payload == current % 3  # steps walk the payloads in order
        current += 1
        if end:
            lengths.append(current)
            current = 0
        if i and start:
            assert steps[i - 1][3]  # a sequence starts only after the previous one ended
    assert lengths and all(8 <= n <= 12 for n in lengths)
    assert len(set(lengths)) > 1  # the variation is applied
    ids = [s[1] for s in steps if s[2]]
    assert ids == list(range(1, len(ids) + 1))  # new IDs from the default start, 1
    later = SequenceManager(SequenceSpec(length=2), slots=1, first_id=mgr.ids_issued)
    assert later.next_request(0, 1)[1] == len(ids) + 1  # a later level goes on from there


def test_sequence_id_range_wraps_and_never_reuses_a_live_id():
    mgr = SequenceManager(SequenceSpec(length=2, length_variation_pct=0, id_start=5, id_end=8), slots=3)
    first = [mgr.next_request(s, 1) for s in range(3)]
    assert [f[1] for f in first] == [5, 6, 7]
    assert [f[2] for f in first] == [True, True, True]
    for s in range(3):
        assert mgr.next_request(s, 1)[3]  # each ends at length 2
    again = [mgr.next_request(s, 1)[1] for s in range(3)]
    assert sorted(again) == [5, 6, 7]  # wrapped before the (excluded) end
    live = {mgr.slot(s).seq_id for s in range(3)}
    assert len(live) == 3
    with pytest.raises(UsageError, match="sequence-id-range 1:3 holds 2 IDs but 3 sequences"):
        SequenceManager(SequenceSpec(id_start=1, id_end=3), slots=3)


def test_sequences_from_data_streams_take_each_streams_steps_in_order():
    spec = SequenceSpec(streams=((0, 1, 2), (3, 4)), length_variation_pct=0)
    mgr = SequenceManager(spec, slots=1)
    got = _run_slot(mgr, 0, 10)
    assert [g[0] for g in got] == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4]
    assert [g[2] for g in got] == [True, False, False, True, False] * 2
    assert [g[3] for g in got] == [False, False, True, False, True] * 2
    fixed = SequenceManager(
        SequenceSpec(streams=((0, 1, 2),), length=5, length_specified=True, length_variation_pct=0), 1
    )
    assert [g[0] for g in _run_slot(fixed, 0, 5)] == [0, 1, 2, 0, 1]  # a given length cycles the stream's steps
    assert SequenceManager(SequenceSpec(string_ids=True), 1).wire_id(12) == "12"


def test_parse_goodput():
    assert parse_goodput("ttft:200ms,itl:20ms") == {"ttft": 200.0, "itl": 20.0}
    assert parse_goodput("latency:1.5s, ttft:500us") == {"latency": 1500.0, "ttft": 0.5}
    assert parse_goodput("itl:7") == {"itl": 7.0}
    for bad in ("tpot:20ms", "ttft=20ms", "ttft:fast", "ttft:0ms"):
        with pytest.raises(UsageError, match="--goodput"):
            parse_goodput(bad)


def _streamed(rows: list[tuple[int, int, int, int, list[int]]]) -> Samples:
    resp = np.empty(len(rows), dtype=object)
    for i, r in enumerate(rows):
        resp[i] = np.array(r[4], dtype=np.int64)
    arr = np.array([r[:4] for r in rows], dtype=np.int64)
    return Samples(arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3].astype(np.int32), {}, resp)


MS = 1_000_000


def test_streaming_summary_from_known_response_times():
    # request A: sent 0, tokens at 20, 25, 30 ms; B: sent 100, tokens at 150, 170 ms; C: dropped
    s = _streamed(
        [
            (-1, 0, 31 * MS, STATUS_OK, [20 * MS, 25 * MS, 30 * MS]),
            (-1, 100 * MS, 171 * MS, STATUS_OK, [150 * MS, 170 * MS]),
            (-1, -1, 100 * MS, STATUS_DROPPED, []),
        ]
    )
    mask = np.array([True, True, True])
    st = streaming_summary(
        s, mask, start_ns=0, end_ns=1000 * MS, closed_loop=True, goodput_slo_ms={"ttft": 30, "itl": 10}
    )
    assert st is not None
    assert st.request_count == 2
    assert st.ttft.count == 2 and st.ttft.min_us == 20_000 and st.ttft.max_us == 50_000
    assert sorted([st.itl.min_us, st.itl.max_us]) == [5_000, 20_000] and st.itl.count == 3
    assert st.second_token.count == 2 and st.second_token.mean_us == pytest.approx(12_500)
    assert st.output_len_mean == 2.5 and st.output_len_max == 3
    assert st.output_tokens_per_s == pytest.approx(5.0)  # 5 tokens in 1 s
    # only A meets ttft<=30ms and mean ITL<=10ms; the dropped request counts against the fraction
    assert st.goodput_rps == pytest.approx(1.0) and st.goodput_fraction == pytest.approx(1 / 3)
    assert st.ttft_corrected is None
    unary = Samples(s.due_ns, s.sent_ns, s.done_ns, s.status)
    assert streaming_summary(unary, mask, start_ns=0, end_ns=MS, closed_loop=True) is None


def test_tokens_from_a_declared_output_tensor_replace_response_counts():
    s = _streamed([(-1, 0, 31 * MS, STATUS_OK, [20 * MS, 25 * MS, 30 * MS]), (-1, 0, 40 * MS, STATUS_OK, [35 * MS])])
    s = Samples(s.due_ns, s.sent_ns, s.done_ns, s.status, {}, s.response_ns, np.array([12, 5], dtype=np.int64))
    st = streaming_summary(
        s, np.array([True, True]), start_ns=0, end_ns=1000 * MS, closed_loop=True, window_ns=500 * MS
    )
    assert st is not None
    assert st.output_len_max == 12 and st.output_len_mean == 8.5
    assert st.output_tokens_per_s == pytest.approx(17.0) and st.responses_per_s == pytest.approx(4.0)
    assert [w.output_tokens_per_s for w in st.windows] == [34.0, 0.0]  # both ended in the first 0.5 s window


def test_open_loop_ttft_is_also_corrected_from_the_due_time():
    s = _streamed([(0, 40 * MS, 80 * MS, STATUS_OK, [60 * MS, 70 * MS])])  # sent 40 ms late
    st = streaming_summary(s, np.array([True]), start_ns=0, end_ns=1000 * MS, closed_loop=False)
    assert st is not None and st.ttft.p50_us == pytest.approx(20_000, rel=1e-3)
    assert st.ttft_corrected is not None and st.ttft_corrected.p50_us == pytest.approx(60_000, rel=1e-3)


def test_concat_keeps_response_times_aligned_with_unary_batches():
    streamed = _streamed([(-1, 0, 5, STATUS_OK, [1, 2, 3])])
    e = np.array([-1], dtype=np.int64)
    plain = Samples(e, e, np.array([9], dtype=np.int64), np.array([STATUS_DROPPED], dtype=np.int32))
    both = concat([plain, streamed])
    assert len(both) == 2 and len(both.response_ns) == 2
    assert list(both.response_ns[0]) == [] and list(both.response_ns[1]) == [1, 2, 3]
    assert concat([plain, plain]).response_ns is None


def test_streaming_summary_round_trips_in_a_run_record():
    lat = summarize("service", np.array([1000.0, 2000.0]))
    st = StreamingSummary(
        lat, lat, lat, 2.0, 2.0, 3.0, 3, 10.0, 10.0, 5, ttft_corrected=lat, goodput_slo_ms={"ttft": 1}
    )
    level = LevelResult(
        LoadLevel("concurrency", 1), 1, True, Precision(0.01, 0.01), 1.0, 5, 5, 5.0, 5.0, 5.0, 0, {}, 0, 0, None,
        lat, None, (), streaming=st,
    )  # fmt: skip
    spec = ProfileSpec(model="m", levels=(level.load,), streaming=True)
    rec = RunRecord("0", "t", (), Machine(), ServerInfo(), ModelInfo(name="m"), spec, (level,))
    again = RunRecord.from_dict(json.loads(rec.to_json()))
    assert again == rec and again.levels[0].streaming == st
    older = to_dict(level)
    del older["streaming"]  # records written before streaming existed still load
    assert from_dict(LevelResult, older).streaming is None


def test_jsonl_trace_errors_name_the_line_and_field(tmp_path):
    from perfkit.errors import InputError
    from perfkit.loadgen import ModelIO
    from perfkit.measure._replay import read_jsonl_trace

    io = ModelIO("m", "", 0, (("text_input", "BYTES", (1,)), ("max_tokens", "INT32", (1,))), ("text_output",))
    path = tmp_path / "t.jsonl"
    cases = {
        '{"timestamp": 0, "inputs": {}}\n{"timestamp": -1, "input_length": 3}': "line 2: 'timestamp'",
        '{"timestamp": 0, "prompt": "x"}': "line 1: unknown field(s) ['prompt']",
        '{"timestamp": 0}': "line 1: give 'inputs' or 'input_length'",
        "not json": "line 1: not valid JSON",
        "": "no requests",
    }
    for text, message in cases.items():
        path.write_text(text)
        with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
            read_jsonl_trace(path, io)
    path.write_text('{"timestamp": 5, "input_length": 3, "output_length": 7, "session_id": 9}')
    (entry,) = read_jsonl_trace(path, io)
    assert entry.inputs == {"text_input": ["tok tok tok"], "max_tokens": [7]} and entry.session == "9"
    no_text = ModelIO("m", "", 0, (("INPUT", "INT32", (1,)),), ())
    path.write_text('{"timestamp": 5, "input_length": 3}')
    with pytest.raises(InputError, match="needs a model input named 'text_input'"):
        read_jsonl_trace(path, no_text)


def _stream_response(rid: str, *, final: bool | None, outputs: int = 1, content: bytes = b"tok", error: str = ""):
    r = service_pb2.ModelStreamInferResponse()
    if error:
        r.error_message = error
    ir = r.infer_response
    ir.model_name, ir.model_version, ir.id = "streamer", "1", rid
    if final is not None:
        ir.parameters["triton_final_response"].bool_param = final
    ir.parameters["other"].int64_param = 7
    for k in range(outputs):
        out = ir.outputs.add()
        out.name, out.datatype = f"text_output_{k}", "BYTES"
        out.shape.extend([1])
        ir.raw_output_contents.append(len(content).to_bytes(4, "little") + content)
    return r.SerializeToString()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"rid": "17", "final": False},
        {"rid": "17", "final": True},
        {"rid": "3", "final": True, "outputs": 0},  # the empty final response
        {"rid": "99999", "final": None},  # no final flag at all: not final
        {"rid": "5", "final": False, "outputs": 3, "content": b"x" * 5000},  # multi-byte lengths
        {"rid": "", "final": True, "outputs": 0},
    ],
)
def test_the_stream_fast_path_reads_what_the_protobuf_parse_reads(kwargs):
    from perfkit.loadgen._stream_grpc import scan_response

    raw = _stream_response(**kwargs)
    full = service_pb2.ModelStreamInferResponse.FromString(raw).infer_response
    param = full.parameters.get("triton_final_response")
    assert scan_response(raw) == (full.id, bool(full.outputs), bool(param is not None and param.bool_param))


def test_the_stream_fast_path_leaves_errors_and_odd_encodings_to_the_full_parse():
    from perfkit.loadgen._stream_grpc import scan_response

    assert scan_response(_stream_response("1", final=True, error="model failed")) is None
    raw = _stream_response("1", final=True)
    assert scan_response(raw[:-3]) is None  # truncated: lengths do not add up
    odd = raw.replace(b"triton_final_response\x12\x02\x08\x01", b"triton_final_response\x12\x02\x08\x02")
    assert scan_response(odd) is None  # a bool encoded unusually: let protobuf decide
    assert scan_response(b"") is None


def test_the_receive_window_is_refilled_on_the_fast_path_too():
    # A token stream that only ever takes the one-frame fast path must still give the
    # server back its window, or the stream stalls after 2 GiB.
    from perfkit.loadgen._stream_h2 import H2Stream

    class Loop:
        handed: list = []

        def call_soon_threadsafe(self, fn, *args):
            self.handed.append((fn.__name__, args))

    got: list[bytes] = []
    h2 = H2Stream("x:1", Loop(), lambda raw, now: got.append(raw), lambda status, message: None)  # type: ignore[arg-type]  # a stand-in loop that records what is handed to it
    raw = _stream_response("1", final=False)
    msg = b"\x00" + len(raw).to_bytes(4, "big") + raw
    frame = len(msg).to_bytes(3, "big") + b"\x00\x00" + (1).to_bytes(4, "big") + msg
    h2._received = (1 << 30) - 1
    h2._frames(frame, 0)
    assert got == [raw]
    assert Loop.handed == [("_refill", ((1 << 30) - 1 + len(msg),))] and h2._received == 0
    h2._frames(frame[:20], 0)  # a partial frame takes the general path and waits for the rest
    h2._frames(frame[20:], 0)
    assert got == [raw, raw] and len(Loop.handed) == 1
