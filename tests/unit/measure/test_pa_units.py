"""Units behind perf_analyzer's forms: data directories and repeated --input-data, ensembles of
sequence models, shared-memory output sizes for a batch, the profile export layout."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from perfkit.errors import InputError
from perfkit.loadgen import ModelIO, read_sources, to_wire
from perfkit.measure._shm import output_region_bytes
from perfkit.measure._stream_setup import with_composing_sequence

IO = ModelIO(
    "m", "", 8,
    (("INPUT0", "BYTES", (16,)), ("INPUT1", "INT32", (2, -1))),
    ("OUTPUT0",),
    (("OUTPUT0", "INT32", (16,)),),
)  # fmt: skip
FILES = Path(__file__).parents[2] / "inputdata" / "files"


def _dir(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    d.mkdir()
    (d / "INPUT0").write_text("".join(f"s{i}\n" for i in range(16)))
    (d / "INPUT1").write_bytes(np.arange(6, dtype="<i4").tobytes())
    return d


def test_directory_one_file_per_input(tmp_path: Path) -> None:
    data = read_sources(IO, str(_dir(tmp_path)), shapes={"INPUT1": (2, 3)})
    (stream,) = data.streams
    (step,) = stream.steps
    strings = np.array([f"s{i}".encode() for i in range(16)], dtype=np.object_)
    assert step.input("INPUT0").data == to_wire(strings, "BYTES")  # type: ignore[union-attr]  # the file gives INPUT0, so input() is not None
    assert step.input("INPUT1").shape == (2, 3)  # type: ignore[union-attr]  # the file gives INPUT1, so input() is not None
    assert not step.expected


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda d: (d / "INPUT0").write_text("a\nb\n"), "2 strings (lines), shape [16] needs 16"),
        (lambda d: (d / "INPUT1").write_bytes(b"\0" * 5), "5 bytes"),
        (lambda d: (d / "INPUT1").unlink(), "no file"),
    ],
)
def test_directory_errors_name_file_and_input(tmp_path: Path, change: object, says: str) -> None:
    d = _dir(tmp_path)
    change(d)  # type: ignore[operator]  # each parametrized change is a callable (typed object)
    with pytest.raises(InputError) as err:
        read_sources(IO, str(d), shapes={"INPUT1": (2, 3)})
    assert says in str(err.value)


def test_directory_needs_shape_for_variable_dims(tmp_path: Path) -> None:
    with pytest.raises(InputError) as err:
        read_sources(IO, str(_dir(tmp_path)), shapes={})
    assert "contains dynamic shape" in err.value.one_line() and "--shape INPUT1:" in err.value.one_line()


def test_repeated_sources_append_streams() -> None:
    io = ModelIO("s", "", 8, (("INPUT", "BYTES", (1,)),), ("OUTPUT",), (("OUTPUT", "BYTES", (1,)),))
    one = read_sources(io, str(FILES / "seq_data.json"), shapes={})
    two = read_sources(io, os.pathsep.join([str(FILES / "seq_data.json")] * 2), shapes={})
    assert len(two.streams) == 2 * len(one.streams) == 6
    assert two.streams[3] == one.streams[0]


def test_ensemble_takes_its_composing_models_sequence_batcher() -> None:
    configs = {
        "ens": {"ensemble_scheduling": {"step": [{"model_name": "pre"}, {"model_name": "inner"}]}},
        "inner": {"ensemble_scheduling": {"step": [{"model_name": "seq"}]}},
        "pre": {},
        "seq": {"sequence_batching": {"direct": {}}},
    }
    kind = with_composing_sequence(configs["ens"], configs.__getitem__)
    assert kind["sequence_batching"] == {"direct": {}}
    assert "sequence_batching" not in with_composing_sequence(configs["pre"], configs.__getitem__)
    plain = {"ensemble_scheduling": {"step": [{"model_name": "pre"}]}}
    assert with_composing_sequence(plain, configs.__getitem__) is plain


def test_output_regions_sized_for_the_batch() -> None:
    io = ModelIO(
        "img", "", 128, (("input", "FP32", (224, 224, 3)),), ("probs", "text", "var"),
        (("probs", "FP32", (1001,)), ("text", "BYTES", (1,)), ("var", "INT32", (-1,))),
    )  # fmt: skip
    sizes = output_region_bytes(io, 64, 102400)
    assert sizes == {"probs": 1001 * 4 * 64, "text": 102400, "var": 102400}
    nobatch = ModelIO("n", "", 0, (), ("o",), (("o", "FP16", (3, 5)),))
    assert output_region_bytes(nobatch, 1, 7) == {"o": 30}


def test_many_repeated_sources() -> None:
    """QA's line 764 repeats --input-data 512 times: longer, joined, than any path may be."""
    io = ModelIO("s", "", 8, (("INPUT", "BYTES", (1,)),), ("OUTPUT",), (("OUTPUT", "BYTES", (1,)),))
    data = read_sources(io, os.pathsep.join([str(FILES / "seq_data.json")] * 512), shapes={})
    assert len(data.streams) == 3 * 512


def test_json_tensor_format_payload() -> None:
    import json

    from perfkit.loadgen import Tensor, http_json_payload

    io = ModelIO("m", "", 8, (("S", "BYTES", (2,)), ("I", "INT32", (2,))), ("O",))
    strings = to_wire(np.array([[b"a", b"bc"]], dtype=np.object_), "BYTES")
    ints = to_wire(np.array([[3, 4]]), "INT32")
    tensors = [Tensor("S", "BYTES", (1, 2), strings), Tensor("I", "INT32", (1, 2), ints)]
    raw = http_json_payload(io, tensors, "h:1", input_json=True, output_json=True)
    head, body = raw.split(b"\r\n\r\n", 1)
    assert b"Content-Type: application/json" in head and b"Inference-Header" not in head
    doc = json.loads(body)
    assert [i["data"] for i in doc["inputs"]] == [["a", "bc"], [3, 4]]
    assert doc["outputs"] == [{"name": "O", "parameters": {"binary_data": False}}]
    mixed = http_json_payload(io, tensors, "h:1", input_json=False, output_json=True)
    assert b"Inference-Header-Content-Length" in mixed and mixed.endswith(ints)
