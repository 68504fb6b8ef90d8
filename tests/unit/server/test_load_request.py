"""What a load request carries: the config override, override files (base64, Triton's model repository
extension), and a vLLM model's engine arguments as its model.json override (no server: no vLLM backend
runs here)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from perfkit.errors import InputError
from perfkit.server._load_request import load_request_body, vllm_model_json, vllm_override_files
from perfkit.server.base import Server

MODEL_JSON = '{"model": "facebook/opt-125m", "gpu_memory_utilization": 0.5, "max_num_seqs": 64}\n'


def test_a_plain_load_carries_nothing_and_a_config_load_its_json():
    assert load_request_body(None) is None
    body = load_request_body({"name": "m", "backend": "vllm"})
    assert body == {"parameters": {"config": json.dumps({"name": "m", "backend": "vllm"})}}


def test_override_files_are_base64_beside_the_config_they_need():
    body = load_request_body({"backend": "vllm"}, {"file:1/model.json": b'{"a": 1}'})
    assert body is not None
    params = body["parameters"]
    assert base64.b64decode(params["file:1/model.json"]) == b'{"a": 1}'
    assert json.loads(params["config"]) == {"backend": "vllm"}
    with pytest.raises(ValueError, match="needs the config override"):
        load_request_body(None, {"file:1/model.json": b"{}"})
    with pytest.raises(ValueError, match="not file:VERSION/NAME"):
        load_request_body({}, {"model.json": b"{}"})


def test_engine_args_are_set_over_the_model_json_keeping_its_other_keys_in_order():
    out = json.loads(vllm_model_json(MODEL_JSON, {"max_num_seqs": 8, "enable_chunked_prefill": True}))
    assert list(out) == ["model", "gpu_memory_utilization", "max_num_seqs", "enable_chunked_prefill"]
    assert out["max_num_seqs"] == 8 and out["gpu_memory_utilization"] == 0.5 and out["enable_chunked_prefill"]
    with pytest.raises(InputError, match=r"m\.json: not JSON"):
        vllm_model_json("{oops", {}, source="m.json")
    with pytest.raises(InputError, match="not the engine arguments' object"):
        vllm_model_json("[1]", {})


def test_the_override_carries_every_file_of_the_version_folder_and_writes_nothing(tmp_path: Path):
    version = tmp_path / "vllm_model" / "1"
    version.mkdir(parents=True)
    (version / "model.json").write_text(MODEL_JSON)
    (version / "multi_lora.json").write_text('{"doll": "/loras/doll"}')
    files = vllm_override_files(version, {"max_num_seqs": 16})
    assert set(files) == {"file:1/model.json", "file:1/multi_lora.json"}  # the override replaces the folder
    assert json.loads(files["file:1/model.json"])["max_num_seqs"] == 16
    assert files["file:1/multi_lora.json"] == b'{"doll": "/loras/doll"}'
    assert (version / "model.json").read_text() == MODEL_JSON  # the user's file is untouched
    with pytest.raises(InputError, match="no model.json"):
        vllm_override_files(tmp_path, {})


class _Recorder(Server):
    """A Server whose HTTP calls are recorded (the request is the subject, not Triton's answer)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, Any]] = []

    def _request(self, method: str, path: str, body: Any = None, timeout_s: float = 10.0) -> tuple[int, Any]:
        self.sent.append((method, path, body))
        return 200, {}


def test_load_model_posts_the_config_and_files_to_the_load_endpoint(tmp_path: Path):
    version = tmp_path / "gen" / "1"
    version.mkdir(parents=True)
    (version / "model.json").write_text(MODEL_JSON)
    server = _Recorder()
    config = {"name": "gen", "backend": "vllm", "instance_group": [{"kind": "KIND_MODEL"}]}
    server.load_model("gen", config=config, files=vllm_override_files(version, {"max_num_seqs": 4}))
    ((method, path, body),) = server.sent
    assert (method, path) == ("POST", "/v2/repository/models/gen/load")
    assert json.loads(body["parameters"]["config"]) == config
    sent = json.loads(base64.b64decode(body["parameters"]["file:1/model.json"]))
    assert sent == {"model": "facebook/opt-125m", "gpu_memory_utilization": 0.5, "max_num_seqs": 4}
