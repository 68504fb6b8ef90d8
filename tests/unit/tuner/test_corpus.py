"""Every real config of the corpus (tests/corpus, gathered from Triton's public repositories) goes
through what the tuner does with a config: parse, round-trip, resolve the space with and without
a GPU, candidates, apply, validation, and `perfkit tune --dry-run --assume-gpu`.
"""

from __future__ import annotations

import collections
import csv
import shutil
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from perfkit.cli import main
from perfkit.server.modelconfig import config_pbtxt_sha256, format_config, parse_config
from perfkit.tuner import TuneSpace, apply_params, resolve
from perfkit.tuner._space import candidate_points, extract_params
from perfkit.tuner._validate import Context, validate

CORPUS = Path(__file__).resolve().parents[2] / "corpus"
CONFIGS = CORPUS / "configs"
BUDGET_US = 50_000
# Points per config in the corpus test (the grid when smaller, else a seeded sample).
POINTS = 60


@dataclass(frozen=True)
class Row:
    repository: str
    commit: str
    path: str
    file: str
    backend: str
    features: tuple[str, ...]
    triton_expected: str
    outcome: str

    @property
    def where(self) -> str:
        return f"{self.repository}@{self.commit[:8]}:{self.path}"


@cache
def rows() -> tuple[Row, ...]:
    with open(CORPUS / "MANIFEST.tsv", encoding="utf-8") as f:
        out = []
        for r in csv.DictReader(f, delimiter="\t"):
            feats = tuple(x for x in r["features"].split(",") if x and x != "-")
            expected = "" if r["triton_expected"] == "-" else r["triton_expected"]
            out.append(
                Row(*(r[k] for k in ("repository", "commit", "path", "file", "backend")), feats, expected, r["outcome"])
            )
    return tuple(out)


def _model_dir(row: Row, tmp: Path) -> tuple[Path, str]:
    """(repository, model name) holding the config as NAME/config.pbtxt; a copy when the corpus
    file has another name (documentation snippets, qa files named *.pbtxt)."""
    src = CONFIGS / row.file
    if src.name == "config.pbtxt":
        return src.parent.parent, src.parent.name
    name = "m_" + "".join(c if c.isalnum() else "_" for c in row.file)[-80:]
    (tmp / name).mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, tmp / name / "config.pbtxt")
    return tmp, name


def test_the_corpus_is_real_sized_and_covers_what_the_tuner_meets():
    rs = rows()
    assert len(rs) >= 400
    backends = collections.Counter(r.backend for r in rs)
    for b in ("python", "onnxruntime", "tensorrt_plan", "pytorch_libtorch", "tensorflow_savedmodel", "openvino"):
        assert backends[b] or backends[b.split("_")[0]], b
    for b in ("dali", "fil", "vllm", "tensorrtllm", "ensemble"):
        assert backends[b], b
    feats = collections.Counter(f for r in rs for f in r.features)
    for f in (
        "sequence_direct",
        "sequence_oldest",
        "decoupled",
        "warmup",
        "priority",
        "queue_policy",
        "response_cache",
        "rate_limiter",
        "gpus_list",
        "kind_model",
        "gpu_accelerator",
    ):
        assert feats[f], f
    for r in rs:
        assert (CONFIGS / r.file).is_file(), r.file
        assert len(r.commit) == 40


def test_every_config_parses_and_round_trips():
    bad = []
    for r in rows():
        text = (CONFIGS / r.file).read_text(encoding="utf-8")
        try:
            cfg = parse_config(text, source=r.where)
        except Exception as err:  # any failure is reported with its file
            bad.append(f"{r.where}: {err}")
            continue
        if parse_config(format_config(cfg)) != cfg:
            bad.append(f"{r.where}: does not round-trip")
    assert not bad, "\n".join(bad[:10])


def _refusal_matches(refused: str | None, outcome: str) -> bool:
    if outcome == "searched":
        return refused is None
    if refused is None:
        return False
    kind = outcome.split(":", 1)[1]
    return {"invalid": "would be rejected", "sequence": "sequence batcher"}.get(kind, kind) in refused


def test_spaces_candidates_and_validation_on_every_config(tmp_path: Path):
    problems: list[str] = []
    tried = 0
    for r in rows():
        repo, name = _model_dir(r, tmp_path)
        cfg = parse_config((repo / name / "config.pbtxt").read_text(encoding="utf-8"))
        for gpus in (0, 4):
            rs = resolve(TuneSpace(), cfg, repo / name, latency_budget_us=BUDGET_US, gpus=gpus, refuse=False)
            expected = r.outcome
            if gpus == 0 and expected == "searched" and "kind_gpu" in r.features:
                expected = "refused:invalid"  # KIND_GPU without a GPU: Triton refuses the model itself
            if not _refusal_matches(rs.refused, expected):
                problems.append(f"{r.where} gpus={gpus}: expected {expected}, got refused={rs.refused!r}")
                continue
            if rs.refused:
                continue
            # The original's own values are points of the space (trial 0 fits).
            for d in rs.dimensions:
                if not d.is_range and d.name in rs.original_params and rs.original_params[d.name] not in d.choices:
                    problems.append(f"{r.where}: original {d.name}={rs.original_params[d.name]} not among {d.choices}")
            ctx = rs.validation or Context(rs.backend)
            for point in candidate_points(rs, limit=POINTS):
                tried += 1
                cand = apply_params(cfg, point, rs)  # raises CandidateRejectedError: a bug in the space
                assert not validate(cand, ctx)
                assert config_pbtxt_sha256(parse_config(format_config(cand))) == config_pbtxt_sha256(cand)
                back = extract_params(cand, backend=rs.backend, engine_files=rs.engine_files)
                for d in rs.dimensions:
                    if d.name in back and not d.is_range and back[d.name] not in d.choices:
                        problems.append(f"{r.where}: {d.name} recorded as {back[d.name]!r}, not among {d.choices}")
                # Fields the tuner does not own are untouched.
                for field in ("input", "output", "name", "backend", "platform", "model_warmup"):
                    assert getattr(cand, field) == getattr(cfg, field), (r.where, field)
                # parameters: only the keys the searched knobs write (precision, a backend's threads and mode)
                owned = _owned_parameters(rs, cfg)
                assert {k: v for k, v in cand.parameters.items() if k not in owned} == {
                    k: v for k, v in cfg.parameters.items() if k not in owned
                }, (r.where, "parameters")
    assert tried > 5_000
    assert not problems, "\n".join(problems[:15])


def _owned_parameters(rs, cfg) -> set[str]:
    """The parameters keys the space's knobs write for this model."""
    from perfkit.tuner._space._knob_backend import P_INTER, P_INTRA, P_ORT_MODE, thread_key

    owned = {rs.precision_parameter} if rs.precision_via == "parameter" else set()
    for knob in (P_INTRA, P_INTER):
        if rs.dimension(knob) is not None and (key := thread_key(cfg, rs.backend, knob)):
            owned.add(key)
    if rs.dimension(P_ORT_MODE) is not None:
        owned.add("execution_mode")
    return owned


# Triton's messages (qa/L0_model_config expected files) for configs it refuses, checked here
# against the validator's rules: each rule must reproduce the message Triton gives.
_MODELLED = (
    "must be non-negative value",
    "but specifies one or more GPU",
    "specifies invalid or unsupported gpu id",
    "instance group should not be specified for ensemble",
)


def test_the_validator_reproduces_tritons_own_refusals():
    checked = 0
    for r in rows():
        modelled = [m for m in _MODELLED if m in r.triton_expected]
        if not modelled:
            continue
        cfg = parse_config((CONFIGS / r.file).read_text(encoding="utf-8"))
        backend = cfg.backend or cfg.platform
        found = validate(cfg, Context(backend, gpus=1))
        assert any(modelled[0] in v.reason for v in found), (r.where, r.triton_expected, found)
        checked += 1
    assert checked >= 4


def _one_line_reason(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("perfkit: error:")]
    return lines[0] if lines else ""


def test_dry_run_assume_gpu_on_every_config_exits_0_or_3_with_a_reason(tmp_path: Path, capsys: pytest.CaptureFixture):
    counts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    wrong = []
    for r in rows():
        if r.outcome == "refused:ensemble":
            continue  # planned as pipelines: test_dry_run_plans_every_real_ensemble_as_a_pipeline
        repo, name = _model_dir(r, tmp_path)
        before = (repo / name / "config.pbtxt").read_bytes()
        rc = main(
            [
                "tune",
                "-m",
                name,
                "--model-repository",
                str(repo),
                "--latency-budget",
                "50ms",
                "--dry-run",
                "--assume-gpu",
            ]
        )
        out, err = capsys.readouterr()
        assert (repo / name / "config.pbtxt").read_bytes() == before  # the repository is never touched
        row = counts[r.backend if r.backend != "-" else "(autofill)"]
        row["parsed"] += 1
        if rc == 0:
            row["searched"] += 1
            assert "candidate configs" in out
        elif rc == 3 and _one_line_reason(err):
            reason = _one_line_reason(err)
            why = next(
                (k for k in ("ensemble", "vllm", "decoupled", "sequence batcher", "would be rejected") if k in reason),
                "other",
            )
            row[f"refused: {why}"] += 1
        else:
            wrong.append(f"{r.where}: exit {rc}: {err.strip()[-300:]}")
    columns = sorted({c for row in counts.values() for c in row}, key=lambda c: (c != "parsed", c != "searched", c))
    with capsys.disabled():
        print("\ncorpus: perfkit tune --dry-run --assume-gpu, per backend")
        print(f"{'backend':<24}" + "".join(f"{c:>28}" for c in columns))
        for backend, row in sorted(counts.items(), key=lambda kv: -kv[1]["parsed"]):
            print(f"{backend:<24}" + "".join(f"{row[c]:>28}" for c in columns))
        total = collections.Counter[str]()
        for row in counts.values():
            total.update(row)
        print(f"{'total':<24}" + "".join(f"{total[c]:>28}" for c in columns))
    assert not wrong, "\n".join(wrong[:10])


@pytest.mark.parametrize(
    ("field", "named"),
    [("max_inflight_requests", "2.63.0"), ("a_field_from_the_future", "unknown to the installed tritonclient")],
)
def test_a_field_the_client_does_not_know_is_named_with_the_release_that_knows_it(field: str, named: str):
    from perfkit.errors import ConfigError
    from perfkit.tuner._preview import explain_unknown_field

    err = ConfigError(
        f'cfg:3:1: invalid model config: Message type "inference.ModelConfig" has no field named "{field}".'
    )
    out = explain_unknown_field(err)
    assert field in out.message and named in out.message and out.exit_code == 3


def test_dry_run_on_a_config_with_an_unknown_field_exits_3_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.pbtxt").write_text('name: "m" backend: "python" max_batch_size: 1 warp_drive: 3\n')
    rc = main(["tune", "-m", "m", "--model-repository", str(tmp_path), "--latency-budget", "5ms", "--dry-run"])
    err = capsys.readouterr().err
    assert rc == 3 and "warp_drive" in _one_line_reason(err) and "tritonclient" in err


# How `perfkit tune --dry-run` ends on an ensemble (tuned as a pipeline), by the reason it gives.
PIPELINE_REFUSALS = (
    ("not in the model repository", "refused:missing-step"),
    ("in a cycle", "refused:cycle"),
    ("has no steps", "refused:no-steps"),
    ("would not load the pipeline as it is", "refused:invalid"),
    ("also a step of ensemble", "refused:shared-step"),
)


def pipeline_outcome(rc: int, reason: str) -> str:
    """The MANIFEST's `pipeline` column for an ensemble's dry-run: searched, refused:<why>, or
    what went wrong (never expected: exit 1 or a refusal with no reason)."""
    if rc == 0:
        return "searched"
    if rc != 3 or not reason:
        return f"exit {rc}"
    return next((label for text, label in PIPELINE_REFUSALS if text in reason), "refused:other")


def test_dry_run_plans_every_real_ensemble_as_a_pipeline(tmp_path: Path, capsys: pytest.CaptureFixture):
    """Every ensemble of the corpus is planned (its steps searched jointly) or refused with a reason
    (exit 3), never exit 1; the manifest records which, and why."""
    header = (CORPUS / "MANIFEST.tsv").read_text(encoding="utf-8").splitlines()[0].split("\t")
    assert header[-1] == "pipeline"
    with open(CORPUS / "MANIFEST.tsv", encoding="utf-8") as f:
        expected = {r["file"]: r["pipeline"] for r in csv.DictReader(f, delimiter="\t")}
    ensembles = [r for r in rows() if r.outcome == "refused:ensemble"]
    assert len(ensembles) >= 90
    wrong, seen = [], collections.Counter[str]()
    for r in ensembles:
        repo, name = _model_dir(r, tmp_path)
        before = (repo / name / "config.pbtxt").read_bytes()
        rc = main(["tune", "-m", name, "--model-repository", str(repo), "--latency-budget", "50ms", "--dry-run",
                   "--assume-gpu"])  # fmt: skip
        out, err = capsys.readouterr()
        assert (repo / name / "config.pbtxt").read_bytes() == before
        got = pipeline_outcome(rc, _one_line_reason(err))
        seen[got] += 1
        if got != expected[r.file]:
            wrong.append(f"{r.where}: manifest says {expected[r.file]}, got {got}: {err.strip()[-200:]}")
        if rc == 0:
            assert "joint space" in out and "step " in out
    assert seen["searched"] >= 20 and not [k for k in seen if k.startswith("exit")]
    with capsys.disabled():
        print("\ncorpus ensembles, perfkit tune --dry-run:", dict(sorted(seen.items())))
    assert not wrong, "\n".join(wrong[:10])
