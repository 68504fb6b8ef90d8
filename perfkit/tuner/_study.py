"""The Optuna side: storage, study, samplers, trial accounting, heartbeats.

Several `perfkit tune` workers may share one study through an RDB storage (PostgreSQL):
each asks, measures on its own server and tells; Optuna keeps the trials apart.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from perfkit import objectives
from perfkit.errors import InputError, UsageError
from perfkit.tuner import _trial_state as _state

HEARTBEAT_INTERVAL_S = 10
GRACE_PERIOD_S = 40


# Optuna >= 5 keeps constraints on the trial (Trial.set_constraint); older ones ask the sampler
# for a constraints_func. Support both.
NATIVE_CONSTRAINTS = hasattr(optuna.trial.Trial, "set_constraint")


def _quiet_optuna() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    # We record heartbeats ourselves in the ask/tell loop (see heartbeat()).
    warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")


def set_constraints(trial: optuna.Trial, values: dict[str, float]) -> None:
    """Record constraint values (<= 0 satisfied) where the sampler reads them."""
    _state.store(trial, constraints=dict(values))
    if NATIVE_CONSTRAINTS:
        for key, value in values.items():
            trial.set_constraint(key, value)


def make_storage(url: str) -> optuna.storages.RDBStorage:
    """An RDB storage with heartbeats (stale trials of a killed worker become FAIL);
    raises InputError naming the URL when it cannot be opened."""
    _quiet_optuna()
    last: Exception | None = None
    # Workers started together race to create Optuna's tables in a fresh database; the loser
    # sees a unique-constraint error (or PostgreSQL's DuplicateTable, when both issued CREATE
    # TABLE at once) and succeeds once the winner's tables exist.
    for attempt in range(5):
        try:
            return optuna.storages.RDBStorage(
                url,
                engine_kwargs={"pool_pre_ping": True} if not url.startswith("sqlite") else None,
                heartbeat_interval=HEARTBEAT_INTERVAL_S,
                grace_period=GRACE_PERIOD_S,
            )
        except Exception as err:  # SQLAlchemy/driver errors vary by backend
            last = err
            raced = "IntegrityError" in type(err).__name__ or any(
                mark in str(err) for mark in ("UniqueViolation", "DuplicateTable", "already exists")
            )
            if not raced:
                break
            time.sleep(0.2 + random.random() * (attempt + 1))
    what = f"{type(last).__name__}: {last}".splitlines()[0]
    raise InputError(
        f"--storage {_redact(url)}: cannot open the study storage: {what}",
        hint="check the URL, that the database runs, and its driver (psycopg2 for postgresql)",
    )


def _redact(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if sep and "@" in rest:
        creds, _, host = rest.rpartition("@")
        user = creds.split(":", 1)[0]
        return f"{scheme}://{user}:***@{host}"
    return url


def _constraints(trial: FrozenTrial) -> Sequence[float]:
    return list((_state.read(trial).constraints or {"latency": 0.0}).values())


def make_sampler(
    objective: str, seed: int, n_trials: int | None, *, kind: str = "auto", grid: dict[str, list[Any]] | None = None
) -> optuna.samplers.BaseSampler:
    """The objective's default sampler: TPE (seeded, constraint-aware, few random start-up trials) or NSGA-II (pareto);
    kind "grid" walks every point of `grid` (exhaustive, model_analyzer-style), "random" samples."""
    _quiet_optuna()
    if kind == "grid":
        return _AskTellGridSampler(grid or {}, seed=seed)
    if kind == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if objectives.get(objective).sampler == "nsga2":
        population = max(4, min(20, (n_trials or 20) // 3))
        return optuna.samplers.NSGAIISampler(
            seed=seed, population_size=population, constraints_func=None if NATIVE_CONSTRAINTS else _constraints
        )
    startup = max(3, min(8, (n_trials or 20) // 4))
    return optuna.samplers.TPESampler(
        seed=seed,
        n_startup_trials=startup,
        multivariate=True,
        group=True,
        constraints_func=None if NATIVE_CONSTRAINTS else _constraints,
    )


class _AskTellGridSampler(optuna.samplers.GridSampler):
    """GridSampler calls study.stop() once the grid is exhausted, which only works inside
    study.optimize; the ask/tell loop checks is_exhausted() itself instead."""

    def after_trial(self, study: Any, trial: FrozenTrial, state: TrialState, values: Sequence[float] | None) -> None:
        return None


def open_study(
    storage: optuna.storages.BaseStorage,
    name: str,
    *,
    objective: str,
    sampler: optuna.samplers.BaseSampler,
    join: bool,
    storage_label: str,
) -> tuple[optuna.Study, bool]:
    """Create the study, or load it when join (resume or a shared study); also says whether this
    call created it (the creator alone queues trial 0, so workers never both do). Raises
    UsageError when the study exists and join is off, or its directions differ from the objective."""
    directions = [
        optuna.study.StudyDirection.MAXIMIZE if d == "maximize" else optuna.study.StudyDirection.MINIMIZE
        for d in objectives.get(objective).directions
    ]
    created = True
    try:
        study = optuna.create_study(storage=storage, study_name=name, sampler=sampler, directions=directions)
    except optuna.exceptions.DuplicatedStudyError:
        if not join:
            raise UsageError(
                f"study {name!r} already exists in {storage_label}",
                hint="pass --resume to continue it, or another --study-name / -o DIR",
            ) from None
        created = False
        study = optuna.load_study(storage=storage, study_name=name, sampler=sampler)
    if list(study.directions) != directions:
        raise UsageError(
            f"study {name!r} in {storage_label} was made for another objective",
            hint="resume it with the same --objective, or start a new study",
        )
    return study, created


def counted(trial: FrozenTrial) -> bool:
    """Whether a trial uses up the --trials budget: finished ones and others' running ones,
    but not those cut short by an interruption (they are queued again) nor repeats of a
    config already measured (answered from the earlier trial without measuring)."""
    st = _state.read(trial)
    if st.duplicate_of is not None or st.rejected:
        return False
    if trial.state == TrialState.FAIL:
        return not st.interrupted
    return trial.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)


def trials_used(study: optuna.Study) -> int:
    return sum(1 for t in study.get_trials(deepcopy=False) if counted(t))


def fail_stale(study: optuna.Study) -> None:
    """Mark trials of dead workers (no heartbeat for the grace period) as failed."""
    with contextlib.suppress(Exception):
        optuna.storages.fail_stale_trials(study)


@contextlib.contextmanager
def heartbeat(study: optuna.Study, trial: optuna.Trial) -> Iterator[None]:
    """Record the trial's heartbeat every few seconds while it runs (ask/tell has no thread of its own)."""
    storage = study._storage
    record: Callable[[int], None] | None = getattr(storage, "record_heartbeat", None)
    if record is None:
        yield
        return
    stop = threading.Event()
    trial_id = trial._trial_id

    def beat() -> None:
        while True:
            with contextlib.suppress(Exception):
                record(trial_id)
            if stop.wait(HEARTBEAT_INTERVAL_S):
                return

    thread = threading.Thread(target=beat, name="perfkit-tune-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


def measured_before(study: optuna.Study, sha: str, number: int) -> FrozenTrial | None:
    """The earlier trial (complete or pruned, not itself a repeat) of the config whose text hashes
    to `sha`, other than trial `number`; None where there is none."""
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)):
        if t.number != number and (st := _state.read(t)).config_pbtxt_sha256 == sha and not st.duplicate_of:
            return t
    return None


def answer_repeat(study: optuna.Study, trial: optuna.Trial, same: FrozenTrial, objective: str) -> None:
    """Answer a repeated config from its earlier trial (samplers do re-propose points in a small
    space): its measurement, constraints and outcome copied, marked as a repeat of it."""
    _state.copy_measurement(trial, same)
    before = _state.read(same)
    _state.store(trial, duplicate_of=same.number)
    if before.fail_reason:
        _state.store(trial, fail_reason=before.fail_reason)
    set_constraints(trial, before.constraints or {"latency": 0.0})
    if same.state == TrialState.PRUNED:
        trial.report(float(same.intermediate_values.get(0, 0.0)), step=0)
        study.tell(trial, state=TrialState.PRUNED)
    elif objectives.get(objective).front:
        study.tell(trial, list(same.values))
    else:
        study.tell(trial, same.value)
