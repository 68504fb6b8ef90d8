"""`perfkit tune` as one library call: the server reached (or launched) and the subject tuned on
it, or the search spread over a Ray cluster. The CLI parses its flags and calls run_tune; what
to print arrives through two callbacks (progress lines, and notes for stderr)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from perfkit.errors import MeasurementError, UsageError
from perfkit.server.launch import ServerOptions, open_server
from perfkit.server.rate_limit import rate_limiter_on, require_rate_limiter
from perfkit.tuner._events import OnEvent
from perfkit.tuner._pipeline import is_pipeline
from perfkit.tuner._route_api import ApiRoute
from perfkit.tuner._run import tune
from perfkit.tuner._search import shared_choice
from perfkit.tuner._settings import TuneSettings
from perfkit.tuner._space import TuneSpace


@dataclass(frozen=True)
class RayPlacement:
    """--ray: the cluster, how many tuning workers (default one per node), GPUs Ray gives each."""

    address: str | None = None
    workers: int | None = None
    gpus_per_worker: float = 0.0


def run_tune(
    opts: ServerOptions,
    settings: TuneSettings,
    space: TuneSpace,
    *,
    composing: Sequence[str] = (),
    ray: RayPlacement = RayPlacement(),
    apply_via: str | None = None,
    on_event: OnEvent,
    say: Callable[[str], None],
    note: Callable[[str, bool], None],
) -> Path:
    """Tune what settings name (one model, a pipeline, a traffic mix) on the server `opts`
    describes, or with --ray on one server per Ray worker sharing one study; returns the folder
    whose tune.json holds every trial. `say` prints a line of the outcome, `note(text, newline)`
    a line for stderr. `apply_via`: "file" (rewrite config.pbtxt in --model-repository) or "api"
    (config overrides through the server's API, nothing written; the default for -u without a repository).
    Raises UsageError for options that do not go together, MeasurementError
    when every Ray worker failed, and as tune() does."""
    # a running server (-u) and no repository: through its API; anything else: the file route
    via = apply_via or (
        "api" if opts.model_repository is None and opts.mode == "remote" and not ray.address else "file"
    )
    if via == "file" and opts.model_repository is None:
        raise UsageError(
            "perfkit tune needs --model-repository DIR: the folder holding the model's config.pbtxt",
            hint="for -u URL, the folder that server reads (started with --model-control-mode=explicit);"
            " -u URL alone tunes through the server's API",
        )
    if via == "api" and opts.mode != "remote":
        raise UsageError("--apply-via api tunes a running server: give -u HOST:PORT", hint="or --apply-via file")
    if via == "api" and ray.address:
        raise UsageError("--ray tunes through the model repository each worker reads: drop --apply-via api (or --ray)")
    if via == "api" and settings.apply:
        raise UsageError(
            "--apply writes the best config into the model repository: nothing to write with --apply-via api",
            hint="drop --apply and install -o DIR's best/config.pbtxt in the server's repository yourself",
        )
    route = ApiRoute() if via == "api" else None
    repository = opts.model_repository
    pipeline = (
        repository is not None and not settings.mix and (bool(composing) or is_pipeline(repository, settings.model))
    )
    if settings.mix:
        mix = ",".join(f"{m}:{w}" for m, w in settings.mix)
        budgets = ", ".join(f"{m} {b:g} ms" for m, b in settings.budget.per_model_ms)
        note(
            f"perfkit: tuning the traffic mix {mix} jointly (p{settings.budget.percentile:g} budgets: {budgets})", True
        )
    elif pipeline:
        if ray.address:
            raise UsageError("--ray tunes one model; tune a pipeline on one server (drop --ray)")
        what = f"{settings.model} with {', '.join(composing)}" if composing else settings.model
        note(f"perfkit: tuning the pipeline {what} end to end", True)
    elif ray.address:
        return _on_ray(opts, settings, space, ray, say, note)
    elif ray.workers is not None:
        raise UsageError("--tune-workers places workers on a Ray cluster: give --ray ADDRESS|auto too")
    if settings.mix and opts.mode != "remote" and opts.rate_limit == "off":
        # the mix's candidates may claim the device through the rate limiter (its knob): on from
        # the start, as a server's --rate-limit is fixed at launch; a config without a
        # rate_limiter block claims nothing and runs as with the limiter off
        opts = dataclasses.replace(opts, rate_limit="execution_count")
    note(f"perfkit: starting {opts.mode} Triton server ..." if opts.mode != "remote" else "", False)
    if opts.mode != "remote" and settings.repeat_fraction > 0:
        # stated repeats search the response cache (tuner/_space/_knob_cache.py): Triton uses it
        # only on a server started with one
        opts = dataclasses.replace(opts, response_cache=True)
    with open_server(opts) as server:
        if opts.mode != "remote":
            note(f" ready at {server.endpoints.http_url}", True)
        elif settings.mix and space.rate_limit_priorities != (0,):
            if space.rate_limit_priorities is not None:  # asked for: a server that would ignore it is refused
                require_rate_limiter(server, settings.mix[0][0])
            elif not rate_limiter_on(server, settings.mix[0][0]):
                # searched by default only: the mix is tuned without it, as the server would run it
                note("perfkit: the server runs with --rate-limit off: the rate limiter's priorities are not"
                     " searched (restart it with --rate-limit execution_count to search them)", True)  # fmt: skip
                space = dataclasses.replace(space, rate_limit_priorities=(0,))
        if via == "api":
            note("perfkit: candidates applied through the server's API (config overrides); no file is written", True)
        result = tune(server, settings, space, model_repository=repository, composing=composing,
                      on_event=on_event, route=route)  # fmt: skip
    if result.record.original_from == "served" and result.record.best_config is not None:
        note(f"perfkit: {result.output_dir}/best/config.pbtxt and best.diff are rendered from the config the server"
             " served (no model repository readable here): protobuf order, defaults filled in", True)  # fmt: skip
    return result.output_dir


def _on_ray(
    opts: ServerOptions,
    settings: TuneSettings,
    space: TuneSpace,
    ray: RayPlacement,
    say: Callable[[str], None],
    note: Callable[[str, bool], None],
) -> Path:
    """Each worker's outcome told; the output folder of the last worker to finish well (its
    tune.json holds every trial of the shared study). Raises MeasurementError when every worker failed."""
    from perfkit.tuner._ray import tune_on_ray

    assert ray.address is not None
    told = shared_choice(settings)  # each worker's tune chooses the same (tune(shared_study=True))
    if told is not None:
        note(f"perfkit: {told.line().strip()}", True)
    note(f"perfkit: tuning {settings.model} on Ray ({ray.address}): one server per worker, one shared study", True)
    out_dir, outcomes = tune_on_ray(
        opts, settings, space, address=ray.address, workers=ray.workers, gpus_per_worker=ray.gpus_per_worker
    )
    for o in outcomes:
        say(
            f"  worker {o.worker} on {o.host}: {o.status}, {o.trials_here} trial(s) measured here, {o.output_dir}"
            + (f" ({o.error})" if o.error else "")
        )
    ok = [o for o in outcomes if o.status == "ok"]
    if ok:
        for line in ok[-1].log_tail[-4:]:
            say(line)
    say(f"results in {out_dir} (one folder per worker)")
    if not ok:
        raise MeasurementError("every tuning worker failed", hint="see each worker's error above")
    return Path(ok[-1].output_dir)
