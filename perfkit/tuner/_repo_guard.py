"""The model repository as a whole: what a change to some configs does to the other models
(an ensemble that would no longer load), one guard that holds every config a search touches,
and installing a set of configs all or nothing.

Triton checks an ensemble against its steps when it loads it
(triton-inference-server/core src/ensemble_scheduler/ensemble_utils.cc, ValidateEnsembleConfig):
a step that batches must allow at least the ensemble's max_batch_size, and every tensor an
ensemble maps must keep its datatype and shape, batch dimension included (ValidateTensorMapping,
ValidateTensorConsistency). A config that breaks either loads on its own and stops the ensemble
loading on the next restart, so the tuner checks the whole repository before it recommends.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from types import TracebackType

from perfkit.errors import ConfigError, PerfkitError
from perfkit.server.base import Server
from perfkit.server.modelconfig import ConfigGuard, ModelConfig, holds_signals, parse_config, write_bytes_atomic

log = logging.getLogger(__name__)
ENSEMBLE_UTILS = "triton-inference-server/core src/ensemble_scheduler/ensemble_utils.cc"


def is_ensemble(cfg: ModelConfig) -> bool:
    """Whether a config is an ensemble's."""
    return cfg.platform == "ensemble" or cfg.HasField("ensemble_scheduling")


def repository_configs(repository: Path) -> dict[str, ModelConfig]:
    """Every parsable model config of the repository, by model name (folder name)."""
    out: dict[str, ModelConfig] = {}
    for path in sorted(Path(repository).glob("*/config.pbtxt")):
        try:
            out[path.parent.name] = parse_config(path.read_text(encoding="utf-8"), source=str(path))
        except (OSError, UnicodeDecodeError, PerfkitError):
            log.debug("skipping unreadable config %s", path)
    return out


@dataclass(frozen=True)
class Breakage:
    """One model of the repository a set of changes would stop loading, and why."""

    model: str
    reason: str
    cite: str

    def one_line(self) -> str:
        return f"{self.reason} [{self.cite}]"


def _dims_match(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    # triton-inference-server/common CompareDimsWithWildcard: -1 matches any size.
    return len(a) == len(b) and all(x in (y, -1) or y == -1 for x, y in zip(a, b, strict=True))


def ensemble_problems(name: str, ens: ModelConfig, configs: Mapping[str, ModelConfig]) -> list[Breakage]:
    """What Triton checks when it loads ensemble `name` against its steps' configs
    (ValidateEnsembleConfig, ValidateTensorMapping, ValidateTensorConsistency): each step's
    max_batch_size against the ensemble's, the step inputs/outputs the maps name, and one
    datatype and shape (batch dimension included) per ensemble tensor. A step whose config
    declares no inputs and outputs (Triton fills them from the model file) is checked for its
    batch size only; a step missing from `configs` is skipped."""
    out: list[Breakage] = []
    cite = f"{ENSEMBLE_UTILS} ValidateEnsembleConfig"
    tensors: dict[str, tuple[str, int, tuple[int, ...], bool]] = {}
    ens_batching = ens.max_batch_size > 0
    for t in (*ens.input, *ens.output):
        dims = tuple(t.reshape.shape) if t.HasField("reshape") else tuple(t.dims)
        tensors[t.name] = (name, int(t.data_type), dims, ens_batching)
    for step in ens.ensemble_scheduling.step:
        model = step.model_name
        cfg = configs.get(model)
        if cfg is None:
            continue
        if cfg.max_batch_size != 0 and cfg.max_batch_size < ens.max_batch_size:
            out.append(Breakage(name, f"ensemble {name} allows maximum batch size {ens.max_batch_size}, but it"
                                f" contains model {model} which only allows maximum batch size to be"
                                f" {cfg.max_batch_size}", cite))  # fmt: skip
        if not cfg.input and not cfg.output:
            continue
        batching = cfg.max_batch_size > 0
        ins, outs = {t.name: t for t in cfg.input}, {t.name: t for t in cfg.output}
        mapped = [(k, v, ins.get(k), "input") for k, v in step.input_map.items()]
        mapped += [(k, v, outs.get(k), "output") for k, v in step.output_map.items()]
        for key, tensor, io, what in mapped:
            if io is None:
                verb = "is mapping to non-existing input" if what == "input" else "is mapped from non-existing output"
                out.append(Breakage(name, f"in ensemble {name}, ensemble tensor {tensor} {verb} {key} in model"
                                    f" {model}", f"{ENSEMBLE_UTILS} ValidateTensorMapping"))  # fmt: skip
                continue
            node = (model, int(io.data_type), tuple(io.dims), batching)
            seen = tensors.setdefault(tensor, node)
            if seen is node:
                continue
            problem = _inconsistent(seen, node)
            if problem:
                out.append(Breakage(name, f"in ensemble {name}, ensemble tensor {tensor}: {problem}",
                                    f"{ENSEMBLE_UTILS} ValidateTensorConsistency"))  # fmt: skip
    return out


def _inconsistent(a: tuple[str, int, tuple[int, ...], bool], b: tuple[str, int, tuple[int, ...], bool]) -> str | None:
    (ma, ta, da, ba), (mb, tb, db, bb) = a, b
    if ta and tb and ta != tb:
        return f"inconsistent data type between {ma} and {mb}"
    full_a, full_b = ((-1, *da) if ba else da), ((-1, *db) if bb else db)
    if not _dims_match(da, db) and not _dims_match(full_a, full_b):
        return f"inconsistent shape: {list(full_a)} is inferred from model {ma} while {list(full_b)} from model {mb}"
    return None


def broken_by(
    changed: Mapping[str, ModelConfig],
    repository: Path | None = None,
    *,
    configs: Mapping[str, ModelConfig] | None = None,
) -> list[Breakage]:
    """The ensembles of the repository (or of `configs`) that the `changed` configs would stop
    loading: problems Triton would find with the changes in place that it does not find now."""
    current = dict(configs if configs is not None else repository_configs(Path(repository or ".")))
    after = {**current, **changed}
    out: list[Breakage] = []
    for name, ens in after.items():
        if not is_ensemble(ens) or not any(st.model_name in changed for st in ens.ensemble_scheduling.step):
            continue
        before = {b.reason for b in ensemble_problems(name, current.get(name, ens), current)}
        out += [b for b in ensemble_problems(name, ens, after) if b.reason not in before]
    return out


class RepoGuard:
    """Snapshots every config a search touches and puts each back byte for byte on leaving the
    block, whatever ends it (normal end, exception, Ctrl-C, SIGTERM, a failed load, a dead
    server); then reloads the models whose files were written, `reload_last` (the ensemble or
    BLS model) after its steps, when the server still runs."""

    def __init__(
        self, paths: Mapping[str, Path], server: Server | None = None, *, reload_last: Sequence[str] = ()
    ) -> None:
        self.paths = {m: Path(p) for m, p in paths.items()}
        self.server = server
        self.reload_last = tuple(reload_last)
        self.guards: dict[str, ConfigGuard] = {}
        self.restore_errors: dict[str, str] = {}
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> RepoGuard:
        with self._stack as stack:
            for model, path in self.paths.items():
                # The first guard turns SIGTERM into KeyboardInterrupt for the whole block.
                self.guards[model] = stack.enter_context(ConfigGuard(path))
            self._stack = stack.pop_all()
        return self

    def original(self, model: str) -> bytes:
        return self.guards[model].original

    def restore_all(self, *, reload: bool = True) -> list[str]:
        """Put every file back; reload the models that were written (steps first). Returns them."""
        written = [m for m, g in self.guards.items() if g.restore_file()]
        if reload and self.server is not None:
            self._reload(written)
        return written

    def _reload(self, models: Sequence[str]) -> None:
        assert self.server is not None
        try:
            alive = self.server.alive()
        except PerfkitError:
            alive = False
        if not alive:
            return
        order = [m for m in models if m not in self.reload_last] + [m for m in self.reload_last]
        for model in order:
            try:
                self.server.load_model(model)
            except PerfkitError as err:
                self.restore_errors[model] = err.one_line()
            except KeyboardInterrupt:
                self.restore_errors[model] = "interrupted while reloading the original config"

    @holds_signals
    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            written = [m for m, g in self.guards.items() if g.restore_file()]
            if self.server is not None and (written or exc_type is not None):
                self._reload(written or list(self.paths))
            for model, why in self.restore_errors.items():
                log.warning("%s restored, reload failed: %s", self.paths[model], why)
        finally:
            self._stack.close()  # each ConfigGuard checks its file once more and gives SIGTERM back


def refuse_if_breaks(model: str, text: str, repository: Path) -> None:
    """Raise ConfigError when putting `text` as model's config would stop another model of the
    repository loading (the --apply check of a one-model search)."""
    broken = broken_by({model: parse_config(text, source=f"{model} recommendation")}, repository)
    if broken:
        raise ConfigError(
            f"--apply refused: {broken[0].one_line()}", hint="nothing was written; the recommendation is in -o DIR"
        )


def apply_all(changes: Mapping[str, tuple[Path, str]], repository: Path) -> dict[str, Path]:
    """Install a set of configs (model -> (config path, text)) all or nothing: refused when it
    would stop another model loading; each file changed gets a backup
    (config.pbtxt.bak-<timestamp>); if any write fails every file is put back. Returns the backups.
    Raises ConfigError."""
    parsed = {m: parse_config(text, source=f"{m} recommendation") for m, (_, text) in changes.items()}
    broken = broken_by(parsed, repository)
    if broken:
        raise ConfigError(
            f"--apply refused: {broken[0].one_line()}", hint="nothing was written; the recommendation is in -o DIR"
        )
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    todo = {m: (p, t.encode()) for m, (p, t) in changes.items() if Path(p).read_bytes() != t.encode()}
    originals = {m: Path(p).read_bytes() for m, (p, _) in todo.items()}
    backups: dict[str, Path] = {}
    done: list[str] = []
    try:
        with _all_or_nothing(todo, originals, done):
            for model, (path, data) in todo.items():
                backup = Path(path).with_name(f"{Path(path).name}.bak-{stamp}")
                shutil.copy2(path, backup)
                backups[model] = backup
                write_bytes_atomic(Path(path), data)
                done.append(model)
    except OSError as err:
        raise ConfigError(f"--apply: cannot write: {err}", hint="every config was put back") from None
    return backups


@contextlib.contextmanager
def _all_or_nothing(
    todo: Mapping[str, tuple[Path, bytes]], originals: Mapping[str, bytes], done: list[str]
) -> Iterator[None]:
    try:
        yield
    except BaseException:
        for model in done:
            write_bytes_atomic(Path(todo[model][0]), originals[model])
        raise
