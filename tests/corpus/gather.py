"""Rebuild the corpus of real Triton model configs from local mirrors of Triton's repositories.

Usage: python tests/corpus/gather.py MIRRORS_DIR
MIRRORS_DIR holds bare git copies named <owner>+<repo>/repo (e.g. triton-inference-server+server/repo).
Every *.pbtxt up to 60 kB at HEAD that parses as a ModelConfig is copied to
tests/corpus/configs/<repo>/<path>, with the `expected` files of server's qa/L0_model_config
(the error Triton reports for that config). MANIFEST.tsv records provenance and the outcome
perfkit's tuner is expected to give, decided here from the config's fields alone.
"""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

HERE = Path(__file__).resolve().parent
# Triton's messages (from qa/L0_model_config expected files) for the rules perfkit's validator models.
VALIDATED_MESSAGES = (
    "must be non-negative value",
    "but specifies one or more GPU",
    "specifies invalid or unsupported gpu id",
    "instance group should not be specified for ensemble",
    "preferred size must be <= max batch size",
    "preferred batch size must be <= max batch size",
)
COLUMNS = ("repository", "commit", "path", "file", "backend", "features", "triton_expected", "outcome")


def features(cfg: ModelConfig) -> list[str]:
    out = []
    if cfg.HasField("sequence_batching"):
        sb = cfg.sequence_batching
        out.append("sequence_oldest" if sb.HasField("oldest") else "sequence_direct")
    if cfg.model_transaction_policy.decoupled or cfg.backend == "vllm":  # vLLM's auto-complete sets it
        out.append("decoupled")
    if cfg.HasField("dynamic_batching"):
        out.append("dynamic_batching")
        if cfg.dynamic_batching.priority_levels:
            out.append("priority")
        if cfg.dynamic_batching.HasField("default_queue_policy") or cfg.dynamic_batching.priority_queue_policy:
            out.append("queue_policy")
    if cfg.model_warmup:
        out.append("warmup")
    if cfg.response_cache.enable:
        out.append("response_cache")
    if any(g.HasField("rate_limiter") for g in cfg.instance_group):
        out.append("rate_limiter")
    if any(len(g.gpus) for g in cfg.instance_group):
        out.append("gpus_list")
    kinds = {int(g.kind) for g in cfg.instance_group}
    out += [label for num, label in ((1, "kind_gpu"), (2, "kind_cpu"), (3, "kind_model")) if num in kinds]
    if cfg.optimization.execution_accelerators.gpu_execution_accelerator:
        out.append("gpu_accelerator")
    if cfg.platform == "ensemble" or cfg.HasField("ensemble_scheduling"):
        out.append("ensemble")
    return out


def outcome(cfg: ModelConfig, feats: list[str], expected: str) -> str:
    if "ensemble" in feats:
        return "refused:ensemble"
    if cfg.backend == "vllm":
        return "refused:vllm"  # throughput set by vLLM's engine arguments, not config.pbtxt
    if expected and any(m in expected for m in VALIDATED_MESSAGES):
        return "refused:invalid"
    mbs = cfg.max_batch_size
    oldest = cfg.sequence_batching.oldest.preferred_batch_size if cfg.HasField("sequence_batching") else []
    if mbs < 0 or any(s > mbs for s in list(cfg.dynamic_batching.preferred_batch_size) + list(oldest)):
        return "refused:invalid"  # Triton's ValidateModelConfig refuses these (documentation fragments do this)
    return "searched"


def main(mirrors: Path) -> None:
    dest = HERE / "configs"
    rows = []
    for git_dir in sorted(mirrors.glob("triton-inference-server+*/repo")):
        repo = git_dir.parent.name.replace("+", "/")
        git = ["git", f"--git-dir={git_dir}"]
        commit = subprocess.check_output([*git, "rev-parse", "HEAD"], text=True).strip()
        listing = subprocess.check_output([*git, "ls-tree", "-r", "-l", "HEAD"], text=True).splitlines()
        paths = {}
        for line in listing:
            meta, path = line.split("\t", 1)
            _mode, kind, _sha, size = meta.split()
            if kind == "blob" and size.isdigit() and int(size) <= 60_000:
                paths[path] = int(size)
        for path in sorted(p for p in paths if p.endswith(".pbtxt")):
            data = subprocess.check_output([*git, "show", f"HEAD:{path}"])
            cfg = ModelConfig()
            try:
                text_format.Parse(data.decode("utf-8"), cfg)
            except (text_format.ParseError, UnicodeDecodeError):
                continue
            folder = path.rsplit("/", 1)[0] if "/" in path else ""
            expected = ""
            if f"{folder}/expected" in paths and path.startswith("qa/L0_model_config/"):
                raw = subprocess.check_output([*git, "show", f"HEAD:{folder}/expected"])
                expected = raw.decode("utf-8", "replace").strip().splitlines()[0] if raw.strip() else ""
                (dest / repo.split("/")[1] / folder).mkdir(parents=True, exist_ok=True)
                (dest / repo.split("/")[1] / folder / "expected").write_bytes(raw)
            out = dest / repo.split("/")[1] / path
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(data)
            rows.append(_row(repo, commit, path, out, dest, cfg, expected))
        for path in sorted(p for p in paths if p.endswith(".md")):
            # Config snippets in the documentation: ```-fenced blocks that parse as a ModelConfig.
            text = subprocess.check_output([*git, "show", f"HEAD:{path}"]).decode("utf-8", "replace")
            for n, block in enumerate(_fenced_blocks(text)):
                cfg = ModelConfig()
                try:
                    text_format.Parse(block, cfg)
                except text_format.ParseError:
                    continue
                if not cfg.ListFields():
                    continue
                out = dest / repo.split("/")[1] / f"{path}.{n}.pbtxt"
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(block, encoding="utf-8")
                rows.append(_row(repo, commit, f"{path} (block {n})", out, dest, cfg, ""))
    with open(HERE / "MANIFEST.tsv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, delimiter="\t", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    print(f"{len(rows)} configs")


def _fenced_blocks(text: str) -> list[str]:
    blocks, current, inside = [], [], False
    for line in text.splitlines():
        fence = line.strip()
        if fence.startswith("```") and not (len(fence) > 3 and fence.endswith("```")):  # not an inline ```x```
            if inside:
                blocks.append("\n".join(current) + "\n")
            current, inside = [], not inside
        elif inside:
            current.append(line)
    return blocks


def _row(repo: str, commit: str, path: str, out: Path, dest: Path, cfg: ModelConfig, expected: str) -> dict[str, str]:
    feats = features(cfg)
    backend = cfg.backend or cfg.platform or "-"
    if expected.startswith(("name:", "max_batch_size", "platform")):
        expected = ""  # an autofill result, not an error
    return {
        "repository": repo,
        "commit": commit,
        "path": path,
        "file": str(out.relative_to(dest)),
        "backend": backend,
        "features": ",".join(feats) or "-",
        "triton_expected": expected.replace("\t", " ") or "-",
        "outcome": outcome(cfg, feats, expected),
    }


if __name__ == "__main__":
    main(Path(sys.argv[1]))
