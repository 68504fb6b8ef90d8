"""perf_analyzer input-data parity: real files from Triton's repositories give perf_analyzer's outcome.

tests/inputdata/manifest.json lists each file, where it comes from, the model it was run against
(tests/inputdata/models) and what the real perf_analyzer did with it (recorded by
tests/inputdata/record_perf_analyzer.py). The unit tests below pin the individual rules.
"""

from __future__ import annotations

import base64
import json
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from perfkit.errors import ExitCode, InputError
from perfkit.loadgen import ModelIO, build_requests, file_tensors, read_input_data, to_wire
from perfkit.measure import OutputMismatchError, validate_outputs
from perfkit.server import LocalLaunch, launch_local
from perfkit.server.local import LocalServer

HERE = Path(__file__).resolve().parents[2] / "inputdata"
MANIFEST = json.loads((HERE / "manifest.json").read_text())
CASES = MANIFEST["cases"]


@pytest.fixture(scope="module")
def pa_server(tritonserver: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    """A server with the stand-in models the perf_analyzer outcomes were recorded against."""
    import shutil

    repo = tmp_path_factory.mktemp("inputdata") / "models"
    shutil.copytree(HERE / "models", repo, ignore=shutil.ignore_patterns("__pycache__"))
    with launch_local(LocalLaunch(repo)) as server:
        yield server


def _io_from_manifest(spec: dict[str, Any]) -> ModelIO:
    inputs = tuple((n, dt, tuple(d)) for n, dt, d, _ in spec["inputs"])
    shape_tensors = frozenset(n for n, _, _, flag in spec["inputs"] if flag == "shape_tensor")
    return ModelIO("m", "", spec["max_batch_size"], inputs, (), (), frozenset(), shape_tensors)


def _perfkit_outcome(case: dict[str, Any], server: LocalServer | None) -> tuple[str, str]:
    shapes = {s.split(":")[0]: tuple(int(d) for d in s.split(":")[1].split(",")) for s in case["shapes"]}
    if server is None:
        io = _io_from_manifest(case["io"])
    else:
        io = ModelIO.from_server(server.model_metadata(case["model"]), server.model_config(case["model"]))
    path = HERE / "files" / case["file"]
    try:
        data = read_input_data(io, path, shapes=shapes)
        requests = build_requests(io, data, batch_size=case["batch_size"])
        if server is not None and data.validated:
            validate_outputs(server, io, requests, source=str(path))
    except InputError as err:
        return "error", err.one_line()
    return "ok", ""


@pytest.mark.parametrize("case", [c for c in CASES if c["model"]], ids=lambda c: c["id"])
def test_real_files_give_perf_analyzers_outcome(case: dict[str, Any], pa_server: LocalServer) -> None:
    outcome, message = _perfkit_outcome(case, pa_server)
    want = case.get("perfkit_differs", case["perf_analyzer"])["outcome"]
    assert outcome == want, message
    if outcome == "error":
        assert case["file"] in message and "\n" not in message


@pytest.mark.parametrize("case", [c for c in CASES if not c["model"]], ids=lambda c: c["id"])
def test_shape_tensor_files_parse_as_perf_analyzer_reads_them(case: dict[str, Any]) -> None:
    # No server here can load a shape-tensor model (TensorRT only): the rule comes from
    # perf_analyzer's source, infer_data_manager.cc CreateAndPopulateInput.
    outcome, message = _perfkit_outcome(case, None)
    assert outcome == "ok", message
    io = _io_from_manifest(case["io"])
    data = read_input_data(io, HERE / "files" / case["file"], shapes={})
    (req,) = build_requests(io, data, batch_size=case["batch_size"])
    by_name = {t.name: t for t in req.tensors}
    assert by_name["INPUT0"].shape == (2,) and by_name["INPUT0"].data == struct.pack("<2i", 2, 2)
    assert by_name["DUMMY_INPUT0"].shape == (case["batch_size"], 16)


IO2 = ModelIO(
    "m", "", 8, (("INPUT0", "INT32", (16,)), ("INPUT1", "INT32", (16,))), ("OUTPUT0",), (("OUTPUT0", "INT32", (16,)),)
)


def _write(tmp_path: Path, doc: Any) -> Path:
    p = tmp_path / "d.json"
    p.write_text(json.dumps(doc))
    return p


def test_b64_without_padding_and_content_b64_give_the_same_bytes_as_values(tmp_path: Path) -> None:
    values = list(range(16))
    raw = struct.pack("<16i", *values)
    b64 = base64.b64encode(raw).decode()
    assert b64.endswith("==")
    plain = file_tensors(
        IO2, _write(tmp_path, {"data": [{"INPUT0": values, "INPUT1": values}]}), batch_size=1, shapes={}
    )
    for form in ({"b64": b64.rstrip("=")}, {"content": {"b64": b64}}, {"b64": b64[:20] + "\n" + b64[20:]}):
        got = file_tensors(
            IO2, _write(tmp_path, {"data": [{"INPUT0": form, "INPUT1": values}]}), batch_size=1, shapes={}
        )
        assert got == plain


def test_batch_takes_consecutive_steps_and_wraps(tmp_path: Path) -> None:
    steps = [{"INPUT0": [i] * 16, "INPUT1": [0] * 16} for i in range(3)]
    reqs = file_tensors(IO2, _write(tmp_path, {"data": steps}), batch_size=2, shapes={})
    # requests start at steps 0, 2, 1 (d * 2 mod 3), each with the next step appended
    firsts = [np.frombuffer(r[0].data, "<i4").reshape(2, 16)[:, 0].tolist() for r in reqs]
    assert firsts == [[0, 1], [2, 0], [1, 2]]
    assert all(r[0].shape == (2, 16) for r in reqs)


def test_batching_steps_of_different_shapes_is_an_error(tmp_path: Path) -> None:
    io = ModelIO("m", "", 8, (("X", "INT32", (-1,)),), ())
    p = _write(tmp_path, {"data": [{"X": {"content": [1, 2], "shape": [2]}}, {"X": {"content": [1], "shape": [1]}}]})
    assert len(file_tensors(io, p, batch_size=1, shapes={})) == 2
    with pytest.raises(InputError, match=r"data\[0\]: cannot batch steps of different shapes: input 'X'"):
        file_tensors(io, p, batch_size=2, shapes={})


def test_optional_inputs_may_be_left_out_but_required_ones_may_not(tmp_path: Path) -> None:
    io = ModelIO("m", "", 8, (("A", "INT32", (1,)), ("B", "INT32", (1,))), (), (), frozenset({"B"}))
    p = _write(tmp_path, {"data": [{"A": [1]}, {"A": [2], "B": [3]}]})
    assert [[t.name for t in r] for r in file_tensors(io, p, batch_size=1, shapes={})] == [["A"], ["A", "B"]]
    with pytest.raises(InputError, match="given in some steps of a -b 2 batch but not in others"):
        file_tensors(io, p, batch_size=2, shapes={})
    with pytest.raises(InputError, match=r"data\[0\] lacks input 'A'"):
        file_tensors(io, _write(tmp_path, {"data": [{"B": [1]}]}), batch_size=1, shapes={})


def test_a_number_for_a_bytes_input_is_an_error(tmp_path: Path) -> None:
    io = ModelIO("m", "", 0, (("S", "BYTES", (2,)),), ())
    with pytest.raises(InputError, match=r"data\[0\].S: BYTES values must be strings, got 3"):
        file_tensors(io, _write(tmp_path, {"data": [{"S": ["a", 3]}]}), batch_size=1, shapes={})
    (req,) = file_tensors(io, _write(tmp_path, {"data": [{"S": ["a", "bc"]}]}), batch_size=1, shapes={})
    assert req[0].data == to_wire(np.array([b"a", b"bc"], dtype=object), "BYTES")


def test_streams_keep_every_step(tmp_path: Path) -> None:
    io = ModelIO("m", "", 8, (("INPUT", "BYTES", (1,)),), ())
    doc = {"data": [[{"INPUT": [str(i)]} for i in range(n)] for n in (4, 3, 2)]}
    data = read_input_data(io, _write(tmp_path, doc), shapes={})
    assert [len(s.steps) for s in data.streams] == [4, 3, 2]
    assert data.streams[0].steps[3].inputs[0].data == b"\x01\x00\x00\x003"
    # a model without sequences gets stream 0's steps, as perf_analyzer sends them
    assert len(build_requests(io, data, batch_size=1)) == 4


def test_validation_data_must_align_and_list_every_output(tmp_path: Path) -> None:
    step = {"INPUT0": [1] * 16, "INPUT1": [1] * 16}
    with pytest.raises(InputError, match="'validation_data' does not align with 'data' \\(1 entries for 2\\)"):
        read_input_data(IO2, _write(tmp_path, {"data": [step, step], "validation_data": [{}]}), shapes={})
    with pytest.raises(InputError, match=r"validation_data\[0\] lacks output 'OUTPUT0'"):
        read_input_data(IO2, _write(tmp_path, {"data": [step], "validation_data": [{}]}), shapes={})
    data = read_input_data(
        IO2, _write(tmp_path, {"data": [step], "validation_data": [{"OUTPUT0": [0] * 16}]}), shapes={}
    )
    (req,) = build_requests(IO2, data, batch_size=2)
    assert req.expected[0].name == "OUTPUT0" and req.expected[0].data == bytes(128)  # both batch elements


def test_wrong_validation_data_fails_naming_step_and_tensor(pa_server: LocalServer) -> None:
    path = HERE / "files" / "wrong_output_2.json"
    io = ModelIO.from_server(pa_server.model_metadata("pa_subadd_int32"), pa_server.model_config("pa_subadd_int32"))
    requests = build_requests(io, read_input_data(io, path, shapes={}), batch_size=1)
    with pytest.raises(OutputMismatchError, match=r"validation_data for data\[2\], output 'OUTPUT0'.*differs"):
        validate_outputs(pa_server, io, requests, source=str(path))


def _profile(server: LocalServer, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "perfkit", "profile", "-u", server.endpoints.http_url, *args]
    cmd += ["--concurrency-range", "1", "--measurement-interval", "300", "--warmup", "0"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_cli_validation_failure_and_bad_files_exit_3_with_one_line(pa_server: LocalServer, tmp_path: Path) -> None:
    out = _profile(pa_server, "-m", "pa_subadd_int32", "--input-data", str(HERE / "files" / "wrong_output_2.json"))
    assert out.returncode == ExitCode.INPUT, out.stderr
    assert "Traceback" not in out.stderr and "data[2], output 'OUTPUT0'" in out.stderr
    bad = tmp_path / "bad.json"
    for text in ('{"data": [{"INPUT0": {"b64": 5}}]}', "\x00\xff", '{"data": [{"INPUT0": {"b64": "@@@"}}]}'):
        bad.write_text(text, errors="surrogateescape") if "\x00" not in text else bad.write_bytes(b"\x00\xff")
        out = _profile(pa_server, "-m", "pa_subadd_int32", "--input-data", str(bad))
        assert out.returncode == ExitCode.INPUT, out.stderr
        errors = [line for line in out.stderr.splitlines() if line.startswith("perfkit: error:")]
        assert len(errors) == 1 and "bad.json" in errors[0] and "Traceback" not in out.stderr


def test_profile_sends_the_files_requests(pa_server: LocalServer, tmp_path: Path) -> None:
    """Measured end to end: validated, batched steps, and steps that leave out an optional input."""
    from perfkit.records import RunRecord

    cases = [("pa_subadd_int32", "output.json", "2"), ("pa_optional", "int_data_optional.json", "1")]
    for model, name, batch in cases:
        rec_path = tmp_path / f"{model}.json"
        out = _profile(pa_server, "-m", model, "--input-data", str(HERE / "files" / name), "-b", batch,
                       "-o", str(rec_path))  # fmt: skip
        assert out.returncode == 0, out.stderr
        (lv,) = RunRecord.load(rec_path).levels
        assert lv.error_count == 0 and lv.request_count > 0
        assert lv.server is not None and set(lv.server.batch_sizes) == {batch}


def test_damaged_files_give_an_input_error_and_nothing_else(tmp_path: Path) -> None:
    """Seeded mutations of the real files: every failure is an InputError (one line, exit 3)."""
    import copy
    import random

    ios = [
        IO2,
        ModelIO("m", "", 0, (("INPUT", "FP32", (-1,)),), ("OUTPUT",), (("OUTPUT", "FP32", (-1,)),)),
        ModelIO(
            "m", "", 8, (("INPUT0", "BYTES", (-1, -1)), ("INPUT1", "BYTES", (-1, -1))), (), (), frozenset({"INPUT1"})
        ),
        ModelIO(
            "m",
            "",
            8,
            (("INPUT0", "INT32", (2,)), ("DUMMY_INPUT0", "FP32", (16,))),
            (),
            (),
            frozenset(),
            frozenset({"INPUT0"}),
        ),
    ]
    weird: list[Any] = [None, 1, -1, 1.5, "x", [], {}, [1], ["a"], [None], [2**70], True, [[1, 2], [3]],
                        {"b64": 3}, {"b64": "@@"}, {"content": 3}, {"shape": [-1]}, {"shape": ["a"]},
                        {"content": [1], "shape": [10**12]}, {"content": {"b64": None}}]  # fmt: skip
    rng = random.Random(0)

    def mutate(x: Any) -> Any:
        if isinstance(x, dict) and x and rng.random() < 0.7:
            k = rng.choice(list(x))
            x[k] = mutate(x[k])
            return x
        if isinstance(x, list) and x and rng.random() < 0.7:
            i = rng.randrange(len(x))
            x[i] = mutate(x[i])
            return x
        return copy.deepcopy(rng.choice(weird))

    docs = [json.loads(f.read_text()) for f in sorted((HERE / "files").glob("*.json")) if f.name != "not_json.json"]
    errors = 0
    for _ in range(1500):
        doc = copy.deepcopy(rng.choice(docs))
        for _ in range(rng.randint(1, 3)):
            doc = mutate(doc)
        path = _write(tmp_path, doc)
        io = rng.choice(ios)
        shapes = rng.choice([{}, {"INPUT": (2,)}, {"INPUT0": (2, 8), "INPUT1": (2, 8)}])
        try:
            build_requests(io, read_input_data(io, path, shapes=shapes), batch_size=rng.choice([1, 2, 3]))
        except InputError as err:
            errors += 1
            assert "\n" not in err.one_line()
    assert errors > 500  # the mutations do damage: most files are refused
