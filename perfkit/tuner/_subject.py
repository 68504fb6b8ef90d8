"""What is tuned: a Subject. One model, a pipeline (an ensemble, or a BLS model and the models it
calls) and a traffic mix (models sharing a server) are each one small module implementing this
protocol; the one trial runner (_trial) and the one search loop (_run) work over any of them.

A subject says which configs it holds (and the guard keeps), the candidate config(s) of a set of
parameters, how they are served and put back (through a ConfigRoute, _route), what a trial's
measurement adds (per-step figures, a steer), and how the best is written out and applied.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from perfkit.errors import InputError, UsageError
from perfkit.records import ProfileSpec, RunRecord, TuneRecord
from perfkit.server.base import Server
from perfkit.server.modelconfig import ModelConfig
from perfkit.tuner._events import TuneEvent
from perfkit.tuner._route import ConfigRoute, FileRoute
from perfkit.tuner._space import Dimension, ResolvedSpace, TuneSpace

if TYPE_CHECKING:
    import optuna

    from perfkit.tuner._pipeline import Pipeline
    from perfkit.tuner._settings import TuneSettings
    from perfkit.tuner._trial import TrialRunner
    from perfkit.tuner._verdict import TrialVerdict


# What a subject is, for what varies by kind (which search can predict it, how it is calibrated).
SubjectKind = Literal["model", "ensemble", "bls", "mix"]


@dataclass(frozen=True)
class Candidate:
    """One trial's config(s): the text stored in the study and record (several configs bundled),
    the searched parameters as the config(s) hold them, and the content hash that names it."""

    text: str
    params: dict[str, Any]
    sha256: str


class Subject(Protocol):
    """What a tune searches. Attributes are fixed once the subject is built."""

    model: str  # the model the load is sent to (a pipeline's entry model, a mix's first model)
    title: str  # what the search's first line names
    default_study_name: str  # the study's name when --study-name is not given
    config_path: Path  # the entry model's config file (named in messages)
    original_cfg: ModelConfig  # the entry model's config as the repository holds it
    original_text: str  # the record's original_config (several configs bundled)
    space: ResolvedSpace  # the space searched (a joint one names parameters "<step>.<knob>")
    repository: Path  # the model repository holding its configs
    route: ConfigRoute  # how candidates reach the server and the originals are put back

    @property
    def kind(self) -> SubjectKind:
        """One model, an ensemble, a BLS model with the models it calls, or a traffic mix."""
        ...

    @property
    def pipeline(self) -> Pipeline | None:
        """The models searched jointly (a pipeline's steps, a mix's models); None for one model."""
        ...

    @property
    def paths(self) -> Mapping[str, Path]:
        """Every config file the search may change, by model (what the guard holds)."""
        ...

    @property
    def reload_last(self) -> Sequence[str]:
        """Models reloaded after the others when configs are put back (an ensemble)."""
        ...

    def applies(self, d: Dimension, params: Mapping[str, Any]) -> bool:
        """Whether dimension d is sampled given the values chosen before it."""
        ...

    def candidate(self, params: Mapping[str, Any], *, is_original: bool, number: int) -> Candidate:
        """The config(s) of a point (the original's as the repository holds them). Raises
        CandidateRejectedError when Triton would reject it, ConfigError when it does not round-trip."""
        ...

    def serve(self, server: Server, text: str) -> None:
        """Put a candidate's text on the server through the route. Raises ModelLoadError /
        CandidateNotAppliedError."""
        ...

    def restore(self, server: Server) -> None:
        """Serve the originals again after a failed trial. Raises ServerError when they no longer load."""
        ...

    def profile_spec(self, spec: ProfileSpec) -> ProfileSpec:
        """The spec a trial is measured with (a BLS pipeline snapshots its steps' statistics)."""
        ...

    def extra_seeds(self, original: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Points queued after the original and the batching seed of a new study."""
        ...

    def observe(
        self, t: TrialRunner, study: optuna.Study, trial: optuna.Trial, record: RunRecord, verdict: TrialVerdict
    ) -> None:
        """Read what a measured trial tells beyond the verdict (per-step figures into
        verdict.metrics, events, a steered point queued)."""
        ...

    def write_best(self, out_dir: Path, rec: TuneRecord) -> tuple[dict[str, Path], tuple[TuneEvent, ...]]:
        """Files written beside the common outputs, and events told after the summary."""
        ...

    def best_changes(self, best_text: str) -> dict[str, tuple[Path, str]]:
        """What --apply writes: model -> (config path, text)."""
        ...

    def applied(self, trial: int | None, backups: Mapping[str, Path]) -> TuneEvent:
        """The event telling what --apply did."""
        ...


def gpu_available() -> bool:
    """Whether NVML sees a GPU on this machine."""
    try:
        import pynvml  # nvidia-ml-py

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount()) > 0
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, no library, no device: all mean "no GPU here"
        return False


def model_folder(repository: Path, model: str) -> Path:
    """repository/model; raises InputError when the repository has no such model."""
    folder = Path(repository) / model
    if not folder.is_dir():
        raise InputError(f"model {model!r} is not in the model repository {repository}", hint="check -m")
    return folder


def open_subject(
    settings: TuneSettings,
    space: TuneSpace,
    repository: Path | None,
    *,
    composing: Sequence[str] = (),
    route: ConfigRoute | None = None,
    served_text: str | None = None,
) -> Subject:
    """The subject settings describe: a traffic mix (settings.mix), a pipeline (`composing` given,
    or settings.model an ensemble), else one model. repository None (the API route on a server whose
    repository is not readable here): one model whose original is `served_text`. Raises
    InputError/ConfigError/UsageError as the subject's module does (a model missing, a config that cannot be tuned)."""
    from perfkit.tuner._pipeline import is_pipeline
    from perfkit.tuner._subject_mix import mix_subject
    from perfkit.tuner._subject_model import ModelSubject
    from perfkit.tuner._subject_pipeline import pipeline_subject

    route = route or FileRoute()
    if repository is None:
        if settings.mix or composing:
            raise UsageError(
                "tuning a traffic mix or a pipeline needs --model-repository DIR (readable here)",
                hint="give the folder the server reads, or tune each model on its own",
            )
        return ModelSubject(settings.model, space, None, budget=settings.budget, route=route,
                            served_text=served_text, repeat_fraction=settings.repeat_fraction)  # fmt: skip
    model_folder(repository, settings.model)
    if settings.mix:
        return mix_subject(settings, space, repository, route=route)
    if composing or is_pipeline(repository, settings.model):
        return pipeline_subject(settings, space, repository, composing=composing, route=route)
    return ModelSubject(
        settings.model, space, repository, budget=settings.budget, route=route, repeat_fraction=settings.repeat_fraction
    )
