"""How a tune's trials are measured, decided once before the runner: the measure function (perfkit
profile's, unless a caller gives its own) and the subject's TrialLoadSettings."""

from __future__ import annotations

from perfkit.errors import PerfkitError, UsageError
from perfkit.records import check_budget_metric
from perfkit.server.base import Server
from perfkit.tuner._find_load import Measure, TrialLoadSettings
from perfkit.tuner._settings import TuneSettings
from perfkit.tuner._space import is_decoupled
from perfkit.tuner._subject import Subject


def _default_measure() -> Measure:
    try:
        from perfkit.measure import profile
    except ImportError as err:
        raise PerfkitError(f"perfkit.measure is not available in this build: {err}") from None
    return profile  # type: ignore[no-any-return]  # measure's module is typed; the lazy import is not


def trial_load_of(server: Server, settings: TuneSettings, subject: Subject) -> TrialLoadSettings:
    """How the subject's trials are loaded and measured (the runner's trial_load, and what the search
    is chosen under). Raises UsageError for a budget or an objective the model cannot be held to."""
    decoupled = is_decoupled(subject.original_cfg, subject.space.backend)
    check_budget_metric(settings.budget.metric, subject.model, decoupled)
    if settings.objective == "goodput" and not decoupled:
        raise UsageError(
            f"--objective goodput counts streamed requests meeting TTFT/ITL SLOs: {subject.model!r} is not decoupled",
            hint="use --objective throughput",
        )
    return settings.trial_load_settings(server.endpoints.metrics_url, streaming=decoupled)
