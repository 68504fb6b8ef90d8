"""Facts about one model (backend, version folder, engines, warmup, ensembles that use it) and
about the machine it will be served on, gathered once so the knobs read rather than re-derive them.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import text_format

from perfkit.server.modelconfig import ModelConfig

log = logging.getLogger(__name__)

# ModelInstanceGroup.Kind numbers (model_config.proto).
KIND_AUTO, KIND_GPU, KIND_CPU, KIND_MODEL = 0, 1, 2, 3
KIND_LABELS = {KIND_AUTO: "auto", KIND_GPU: "gpu", KIND_CPU: "cpu", KIND_MODEL: "model"}

_PLATFORM_BACKENDS = (
    ("onnxruntime", "onnxruntime"),
    ("tensorrt", "tensorrt"),
    ("tensorflow", "tensorflow"),
    ("pytorch", "pytorch"),
    ("ensemble", "ensemble"),
)


def backend_of(cfg: ModelConfig, model_dir: Path) -> str:
    """The backend serving a model, from backend/platform or, failing those, the files."""
    if cfg.backend:
        return cfg.backend
    for prefix, backend in _PLATFORM_BACKENDS:
        if cfg.platform.startswith(prefix):
            return backend
    version_dir = version_dir_of(cfg, model_dir)
    names = [p.name for p in version_dir.iterdir()] if version_dir and version_dir.is_dir() else []
    for suffix, backend in ((".onnx", "onnxruntime"), (".plan", "tensorrt"), (".py", "python"), (".pt", "pytorch")):
        if any(n.endswith(suffix) for n in names):
            return backend
    if any(n.endswith(".savedmodel") or n.endswith(".graphdef") for n in names):
        return "tensorflow"
    return "unknown"


def version_dir_of(cfg: ModelConfig, model_dir: Path) -> Path | None:
    """The version folder Triton would serve (the highest, or the highest listed), if any."""
    if not model_dir.is_dir():
        return None
    versions = sorted((int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()), reverse=True)
    if cfg.version_policy.HasField("specific") and cfg.version_policy.specific.versions:
        return model_dir / str(max(cfg.version_policy.specific.versions))
    return model_dir / str(versions[0]) if versions else None


@dataclass(frozen=True)
class Machine:
    """What the server's machine holds: CPU cores and GPUs (planned or found)."""

    cpu_cores: int
    gpus: int

    @classmethod
    def here(cls, *, gpus: int | None = None, gpu_available: bool = False) -> Machine:
        try:
            cores = len(os.sched_getaffinity(0))
        except AttributeError:  # not Linux
            cores = os.cpu_count() or 1
        return cls(cpu_cores=max(1, cores), gpus=gpus if gpus is not None else (1 if gpu_available else 0))


@dataclass(frozen=True)
class ModelFacts:
    """What the knobs need to know about the model beyond its config."""

    name: str
    backend: str
    model_dir: Path
    version_dir: Path | None
    warmup_max_batch: int = 0
    ensemble_max_batch: int = 0  # the largest max_batch_size of an ensemble that calls this model
    ensembles: tuple[str, ...] = ()
    files: tuple[str, ...] = field(default_factory=tuple)  # names in the served version folder


def model_facts(cfg: ModelConfig, model_dir: Path) -> ModelFacts:
    """Gather the facts of one model (reads the model folder and its siblings' configs)."""
    backend = backend_of(cfg, model_dir)
    vdir = version_dir_of(cfg, model_dir)
    files = tuple(sorted(p.name for p in vdir.iterdir())) if vdir is not None and vdir.is_dir() else ()
    warmup = max((int(w.batch_size) for w in cfg.model_warmup), default=0)
    name = cfg.name or model_dir.name
    ens_mbs, ens_names = _ensembles_using(name, model_dir.parent) if model_dir.parent.is_dir() else (0, ())
    return ModelFacts(
        name=name,
        backend=backend,
        model_dir=model_dir,
        version_dir=vdir,
        warmup_max_batch=warmup,
        ensemble_max_batch=ens_mbs,
        ensembles=ens_names,
        files=files,
    )


def _ensembles_using(name: str, repository: Path) -> tuple[int, tuple[str, ...]]:
    """The largest max_batch_size among the repository's ensembles that have a step on `name`."""
    best, names = 0, []
    for path in sorted(repository.glob("*/config.pbtxt")):
        if path.parent.name == name:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if "ensemble_scheduling" not in text:
            continue
        other = ModelConfig()
        try:
            text_format.Parse(text, other)
        except text_format.ParseError:
            log.debug("skipping unparsable sibling config %s", path)
            continue
        if any(step.model_name == name for step in other.ensemble_scheduling.step):
            best = max(best, int(other.max_batch_size))
            names.append(other.name or path.parent.name)
    return best, tuple(names)
