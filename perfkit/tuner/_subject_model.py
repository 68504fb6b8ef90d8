"""One model as the subject of a tune: its config.pbtxt, edited in place (comments and layout
kept) for each candidate, served through the route, put back by the route's guard. Where no
repository is readable (the API route), the original is the config the server serves."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from perfkit.errors import CandidateNotAppliedError, ConfigError, ModelLoadError, ServerError
from perfkit.records import Budget, ProfileSpec, RunRecord, TuneRecord
from perfkit.server.base import Server
from perfkit.server.modelconfig import config_pbtxt_sha256, parse_config, read_config, render_config
from perfkit.tuner._events import Applied, TuneEvent
from perfkit.tuner._route import ConfigRoute
from perfkit.tuner._space import Dimension, TuneSpace, apply_params, extract_params, normalize_params, resolve
from perfkit.tuner._subject import Candidate, gpu_available, model_folder

if TYPE_CHECKING:
    import optuna

    from perfkit.tuner._trial import TrialRunner
    from perfkit.tuner._verdict import TrialVerdict


class ModelSubject:
    """A single model of the repository."""

    def __init__(
        self,
        model: str,
        space: TuneSpace,
        repository: Path | None,
        *,
        budget: Budget,
        route: ConfigRoute,
        served_text: str | None = None,
        repeat_fraction: float = 0.0,
    ) -> None:
        """repository None: the original is `served_text` (the served config as config.pbtxt text;
        config_path then names no file). Raises InputError when the model is not in the repository,
        ConfigError for a config perfkit cannot read or tune."""
        self.model = self.title = model
        self.default_study_name = f"tune-{model}"
        self.route = route
        if repository is None:
            if served_text is None:
                raise ValueError("ModelSubject needs a repository or the served config's text")
            folder = Path(f"served:{model}")  # named in messages only: nothing is read or written there
            self.repository = folder
            self.original_from = "served"
            self.config_path = folder / "config.pbtxt"
            self.original_cfg = parse_config(served_text, source=f"the config served for {model!r}")
            self.original_text = served_text
        else:
            folder = model_folder(repository, model)
            self.repository = Path(repository)
            self.original_from = "repository"
            self.config_path = folder / "config.pbtxt"
            self.original_cfg = read_config(self.config_path)
            self.original_text = self.config_path.read_bytes().decode("utf-8")
        self.space = resolve(
            space,
            self.original_cfg,
            folder,
            latency_budget_us=budget.latency_budget_us,
            gpu_available=gpu_available(),
            max_error_rate=budget.max_error_rate,
            repeat_fraction=repeat_fraction,
        )

    @property
    def kind(self) -> Literal["model"]:
        return "model"

    @property
    def pipeline(self) -> None:
        """One model: no pipeline."""
        return None

    @property
    def paths(self) -> Mapping[str, Path]:
        return {self.model: self.config_path}

    @property
    def reload_last(self) -> Sequence[str]:
        return ()

    def applies(self, d: Dimension, params: Mapping[str, Any]) -> bool:
        return self.space.applies(d, params)

    def candidate(self, params: Mapping[str, Any], *, is_original: bool, number: int) -> Candidate:
        if is_original:
            cfg, text = self.original_cfg, self.original_text
        else:
            cfg = apply_params(self.original_cfg, dict(params), self.space)
            text = render_config(self.original_text, cfg)
            # What we write must parse back to the same config (no field lost on the way).
            if config_pbtxt_sha256(parse_config(text, source=f"trial {number} config")) != config_pbtxt_sha256(cfg):
                raise ConfigError(f"trial {number}: the candidate config does not round-trip through text format")
        return Candidate(text, self._searched(cfg), config_pbtxt_sha256(cfg))

    def _searched(self, cfg: Any) -> dict[str, Any]:
        """The searched parameters as a config holds them (for records)."""
        rs = self.space
        full = extract_params(
            cfg,
            backend=rs.backend,
            precision_parameter=rs.precision_parameter,
            engine_files=rs.engine_files,
            parameter_keys=rs.parameter_keys,
        )
        names = {d.name for d in rs.dimensions}
        return normalize_params({k: v for k, v in full.items() if k in names})

    def serve(self, server: Server, text: str) -> None:
        self.route.serve(server, self.model, self.config_path, text)

    def restore(self, server: Server) -> None:
        try:
            self.serve(server, self.original_text)
        except CandidateNotAppliedError as err:
            what = self.config_path if self.original_from == "repository" else f"the original config of {self.model!r}"
            raise ServerError(
                f"the server does not serve {what} even after restoring it: {err.message}",
                hint=self.route.restore_hint(server, [self.model]),
            ) from err
        except ModelLoadError as err:
            raise ServerError(
                f"the original config of {self.model!r} no longer loads after a failed trial: {err.message}",
                hint=self.route.restore_hint(server, [self.model])
                if self.route.name == "api"
                else "check the server log",
            ) from err

    def profile_spec(self, spec: ProfileSpec) -> ProfileSpec:
        return spec

    def extra_seeds(self, original: Mapping[str, Any]) -> list[dict[str, Any]]:
        return []

    def observe(
        self, t: TrialRunner, study: optuna.Study, trial: optuna.Trial, record: RunRecord, verdict: TrialVerdict
    ) -> None:
        return None

    def write_best(self, out_dir: Path, rec: TuneRecord) -> tuple[dict[str, Path], tuple[TuneEvent, ...]]:
        return {}, ()  # best/config.pbtxt and best.diff are the common outputs

    def best_changes(self, best_text: str) -> dict[str, tuple[Path, str]]:
        return {self.model: (self.config_path, best_text)}

    def applied(self, trial: int | None, backups: Mapping[str, Path]) -> TuneEvent:
        return Applied(trial, self.config_path, backups.get(self.model))
