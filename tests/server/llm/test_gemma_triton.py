"""Gemma 3 270M inside Triton (fixtures/llm/gemma: a decoupled python-backend model over llama-cpp-python,
one response per token, engine settings from config.pbtxt's parameters), measured by `perfkit profile
--streaming` over Triton's gRPC stream and over HTTP generate_stream."""

from __future__ import annotations

import importlib.util
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from perfkit.cli import main
from perfkit.errors import ExitCode
from perfkit.records import RunRecord
from perfkit.server import LocalLaunch, launch_local
from perfkit.server.local import LocalServer
from tests.conftest import require
from tests.server.llm.conftest import HOW

MODEL_DIR = Path(__file__).parents[3] / "fixtures" / "llm" / "gemma"
MAX_TOKENS = 8


@pytest.fixture(scope="module")
def gemma_triton(tritonserver: Path, gemma: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    require("llama-cpp-python (the stub imports llama_cpp)", importlib.util.find_spec("llama_cpp"), HOW)
    repo = tmp_path_factory.mktemp("gemma-repo")
    shutil.copytree(MODEL_DIR, repo / "gemma")
    with (repo / "gemma" / "config.pbtxt").open("a") as f:
        f.write(f'parameters: {{\n  key: "model_path"\n  value: {{ string_value: "{gemma}" }}\n}}\n')
    with launch_local(LocalLaunch(repo, models=("gemma",), startup_timeout_s=300)) as server:
        yield server


def _input(tmp_path: Path) -> Path:
    path = tmp_path / "prompt.json"
    text = "Write one sentence about the sea."
    path.write_text(json.dumps({"data": [{"text_input": [text], "max_tokens": [MAX_TOKENS], "stream": [True]}]}))
    return path


def _profile(server: LocalServer, tmp_path: Path, protocol: str) -> RunRecord:
    out = tmp_path / "run.json"
    url = server.endpoints.grpc_url if protocol == "grpc" else server.endpoints.http_url
    rc = main([
        "profile", "-m", "gemma", "--streaming", "-i", protocol, "-u", url or "", "--admin-url",
        server.endpoints.http_url, "--input-data", str(_input(tmp_path)), "--concurrency-range", "1",
        "-p", "3000", "-r", "2", "-s", "999", "-o", str(out),
    ])  # fmt: skip
    assert rc == ExitCode.OK
    return RunRecord.load(out)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_gemma_in_triton_streams_one_response_per_token(gemma_triton, tmp_path, protocol):
    (level,) = _profile(gemma_triton, tmp_path, protocol).levels
    assert level.error_count == 0 and level.inference_count > 0, level.errors
    st = level.streaming
    assert st is not None and st.request_count > 0
    assert st.output_len_mean == MAX_TOKENS  # every token its own response, exactly max_tokens of them
    # a real engine: the first token waits for the prompt's prefill, later ones for one decode step each
    assert st.ttft.p50_us > 0 and 0 < st.itl.p50_us < 1e6
