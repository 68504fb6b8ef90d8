"""Calibration of one model for the predicted search (`perfkit tune --search predict`): batches
of every size formed on purpose and read from the server's per-batch-size statistics, the
overhead outside the instance, whether the instance or the request path holds an overloaded
rate, and the saturated rates at two instance counts (perfkit.predict fits them). An ensemble's
steps are calibrated by tuner/_search/_pipeline_calibrate.py with the same levels."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from perfkit import predict
from perfkit.errors import UsageError
from perfkit.records import Calibration, CalibrationPoint, LevelResult, LoadLevel, ProfileSpec
from perfkit.tuner._events import TuneEvent
from perfkit.tuner._find_load import TrialLoadSettings
from perfkit.tuner._search._predict_load import check_model_load
from perfkit.tuner._search._predict_points import batcher_from, dimension_values
from perfkit.tuner._search._request_path import instances_ceiling_rps
from perfkit.tuner._search._value_calibrate import ValueLevels, calibrate_values, value_phrase
from perfkit.tuner._space import P_COUNT, P_DB, P_DELAY, P_MBS, P_PREF, pow2_sizes
from perfkit.tuner._trial import TrialRunner

CALIBRATION_DELAY_US = 5_000  # wide enough that N clients answered together arrive as one batch
CALIBRATION_LEVEL_S = 1.5  # each calibration level: one window this long
CONTENTION_CLIENTS_PER_INSTANCE = 4
HOST_OVERLOAD = 2.0  # the overloaded level offers this times the fastest batch's rate (at most --max-rate)
# Where the request path holds the overloaded rate, the same config is offered this factor of the
# saturated rate, then this factor again, ... (at most HELD_LEVELS levels) until a level holds the
# budget: where the server shares its cores with the load generator, the rate held within the
# budget sits well under the saturated one.
HELD_STEP = 0.85
HELD_LEVELS = 5


@dataclass(frozen=True)
class Calibrated(TuneEvent):
    """The calibration's fitted models, with their errors."""

    cal: Calibration

    def line(self) -> str:
        c = self.cal
        sizes = ", ".join(f"{p.batch_size}:{p.service_us / 1e3:.2f}ms" for p in c.points)
        shared = ""
        if c.instance_counts:
            rates = " and ".join(f"{r:.0f}" for r in c.saturated_rps)
            counts = " and ".join(str(n) for n in c.instance_counts)
            shared = f"; {rates} req/s saturated at {counts} instances: shared fraction {c.shared_fraction:.2f}"
        at = f" at {c.value}" if c.values else ""
        per_value = "".join(f"\n    {v.value}: {value_phrase(v)}" for v in c.values)
        return (
            f"calibrated in {c.duration_s:.0f} s{at}: execution {c.fixed_us / 1e3:.2f} ms"
            f" + {c.per_item_us / 1e3:.3f} ms per item (fit error {c.fit_rms_rel:.1%} rms, {c.fit_max_rel:.1%} worst;"
            f" batch:ms {sizes}), overhead"
            f" {c.overhead_us / 1e3:.2f} ms{shared}{host_phrase(c)}{per_value}"
        )


def host_phrase(c: Calibration) -> str:
    """What the saturated level said of the request path, for the calibration's line."""
    if c.host_saturated_rps <= 0:
        return ""
    stretch = f", its executions x{c.loaded_stretch:.2f} as long as unloaded" if c.stretch_worth_telling else ""
    seen = f"; saturated at {c.host_saturated_rps:.0f} req/s with the instance {c.host_busy:.0%} busy{stretch}"
    told = predict.scaling(c.instance_counts, c.shared_fraction, c.host_saturated_rps, c.host_scaled_rps)
    if told is not None:
        seen += f", x{told[0]:.2f} at {max(c.instance_counts)} instances (their contention gives x{told[1]:.2f})"
    if c.host_us > 0:
        held = f", within the budget up to {c.host_held_rps:.0f} req/s" if c.host_held_rps > 0 else ""
        return f"{seen}: the request path holds the rate{held} (one request per {c.host_us:.0f} us)"
    return f"{seen}: the instance holds it"


def _level(t: TrialRunner, spec: ProfileSpec) -> LevelResult:
    run = t.measure(t.server, spec)
    return run.levels[-1]


def _spec(t: TrialRunner, clients: int) -> ProfileSpec:
    """One closed-loop calibration level, one window, over the protocol the trials use (the
    overhead outside the instance is the protocol's)."""
    return ProfileSpec(
        model=t.model,
        levels=(LoadLevel("concurrency", float(clients)),),
        protocol="grpc" if t.trial_load.protocol == "grpc" else "http",
        measurement_interval_ms=CALIBRATION_LEVEL_S * 1e3,
        max_trials=1,
        min_windows=1,
        warmup_s=0.3,
    )


def _rate_spec(t: TrialRunner, rate_rps: float) -> ProfileSpec:
    """One open-loop level at rate_rps, the tune's arrival process, one window."""
    dist: Any = t.trial_load.distribution  # "poisson" or "constant", as TrialLoadSettings.level passes it
    return dataclasses.replace(_spec(t, 1), levels=(LoadLevel("request_rate", float(rate_rps), dist),))


def calibrate(t: TrialRunner) -> Calibration:
    """Measure the model on the server: batches of 1, 2, 4, ... up to the space's largest
    max_batch_size formed on purpose (N closed-loop clients, answered together, arrive as one
    batch behind a queue delay), their execution times read from the server's per-batch-size
    statistics; the overhead outside the instance at one client; the largest batches overloaded
    in open loop, as trials offer load (HOST_OVERLOAD times the fastest batch's rate, at most
    --max-rate), whose instance's busy time tells whether the request path holds the rate
    (predict.host_bound; without batching, one instance saturated tells); saturated rates at the
    two smallest instance counts, without batching, and, where the busy time did not tell, the
    overloaded batches again at the larger (do they scale as the instances' contention says?);
    where the path holds, the highest rate it holds within the budget (_held_rate, on
    held_config); then each other precision and instance kind the space holds
    (tuner/_search/_value_calibrate.py). The user's config is put back after. Raises UsageError for a
    load the prediction does not model (tuner/_search/_predict_load.py check_model_load), and what
    measuring raises."""
    if t.subject.kind != "model":
        raise UsageError(
            "--search predict tunes one model or an ensemble; traffic mixes are searched by measurement",
            hint="use --search measure",
        )
    check_model_load(t.trial_load)
    started = time.monotonic()
    orig = t.space.original_params
    mbs_dim = next((d for d in t.space.dimensions if d.name == P_MBS), None)
    top = 0
    if mbs_dim is not None:
        top = int(mbs_dim.high or 0) if mbs_dim.is_range else int(max(mbs_dim.choices))
    top = max(top, int(orig.get(P_MBS) or 0))
    count_dim = next((d for d in t.space.dimensions if d.name == P_COUNT), None)
    counts = sorted(int(c) for c in count_dim.choices)[:2] if count_dim and not count_dim.is_range else []
    base = t.original_fixed_params()
    subject = t.subject
    with subject.route.guard(t.server, subject.paths, reload_last=subject.reload_last):
        batch = {**base, P_COUNT: 1} if count_dim else dict(base)
        if top > 0:
            batch.update({P_MBS: top, P_DB: True, P_DELAY: CALIBRATION_DELAY_US, P_PREF: "none"})
        t.put_candidate(subject.candidate(batch, is_original=False, number=-1).text)
        loaded_last = batch  # the config on the server: the held rate is read on held_config
        before = t.server.model_stats(t.model)
        sizes = pow2_sizes(top) if top > 1 else []
        light = _level(t, _spec(t, 1))
        for n in sizes:
            _level(t, _spec(t, n))
        after = t.server.model_stats(t.model)
        points = predict.batch_points(before, after, t.model)
        host_rps = held_rps = scaled_rps = offered = 0.0
        host_points: tuple[CalibrationPoint, ...] = ()
        if top > 1:  # the largest batches, overloaded: is it the instance or the request path that holds?
            fastest = max((p.batch_size / p.service_us * 1e6 for p in points), default=0.0)
            offered = (
                min(t.trial_load.max_rate_rps, HOST_OVERLOAD * fastest) if fastest > 0 else t.trial_load.max_rate_rps
            )
            host_rps = _level(t, _rate_spec(t, offered)).throughput_infer_per_s
            host_points = predict.batch_points(after, t.server.model_stats(t.model), t.model)
        rates: list[float] = []
        loaded: tuple[CalibrationPoint, ...] = ()
        for c in counts if len(counts) == 2 else []:
            solo = {**base, P_COUNT: c}
            if top > 0:
                solo[P_DB] = False
            t.put_candidate(subject.candidate(solo, is_original=False, number=-1).text)
            loaded_last = solo
            first = t.server.model_stats(t.model)
            rates.append(_level(t, _spec(t, CONTENTION_CLIENTS_PER_INSTANCE * c)).throughput_infer_per_s)
            if c == 1:  # one instance saturated: batch-1 executions under load, nothing shared with another
                loaded = predict.batch_points(first, t.server.model_stats(t.model), t.model)
                if not host_points:  # no batching to saturate: one instance without it tells instead
                    host_rps, host_points = rates[-1], loaded

        def fitted(held: float) -> Calibration:
            return predict.calibration(
                t.model,
                predict.merge_points(points, loaded),
                overhead_us=_overhead_us(light),
                instance_counts=tuple(counts) if rates else (),
                saturated_rps=tuple(rates),
                duration_s=time.monotonic() - started,
                host_saturated_rps=host_rps,
                host_points=host_points,
                host_held_rps=held,
                host_scaled_rps=scaled_rps,
                host_unbatched=top <= 1,
            )

        # The same overloaded batches at the larger count (do they scale?), where the instance's
        # busy time alone does not already say the path held (predict.host_bound): the level and
        # its reload are a large part of a calibration, spent only where they tell something.
        if top > 1 and len(rates) == 2 and not predict.host_bound(fitted(0.0).host_busy):
            loaded_last = {**batch, P_COUNT: counts[1]}
            t.put_candidate(subject.candidate(loaded_last, is_original=False, number=-1).text)
            scaled_rps = _level(
                t, _rate_spec(t, min(t.trial_load.max_rate_rps, offered * counts[1]))
            ).throughput_infer_per_s
        if top > 1 and (cal := fitted(0.0)).host_us > 0:  # the path holds: what does it hold within the budget?
            delay_dim = next((d for d in t.space.dimensions if d.name == P_DELAY), None)
            delays = dimension_values(delay_dim) if delay_dim is not None else []

            def room(c: int) -> float:
                return instances_ceiling_rps(cal, batcher_from(orig, {**batch, P_COUNT: c}))

            held_cfg = held_config(batch, delays, counts if len(rates) == 2 else [], room)
            if held_cfg != loaded_last:
                t.put_candidate(subject.candidate(held_cfg, is_original=False, number=-1).text)
            held_rps = _held_rate(t, host_rps)
        # each other precision / instance kind of the space on the same batching config (the original put back after)
        closed = ValueLevels(lambda n: _level(t, _spec(t, n)), lambda n: _level(t, _spec(t, n)), t.model)
        return calibrate_values(t, fitted(held_rps), batch=batch, sizes=[1, *sizes], counts=counts if rates else [],
                                levels=closed, clients_per_instance=CONTENTION_CLIENTS_PER_INSTANCE)  # fmt: skip


def held_config(
    batch: dict[str, Any], delays_us: list[Any], counts: list[int], room: Callable[[int], float]
) -> dict[str, Any]:
    """The config the request path's ceiling is read on (_held_rate): the calibration's batching
    config (the space's largest max_batch_size) as the configs the path bounds are measured, at
    the space's shortest queue delay (`delays_us`: the values the prediction scores; none: the
    calibration's own) and the instance count whose instances alone could complete the most
    (`room`, under the fitted contention; within 1% the fewer instances). Every config the path
    bounds is predicted at this ceiling, and the first measured is the one with the most room
    (tuner/_search/_request_path.py headroom_first); read on another instance count or the
    calibration's own long delay, the ceiling understates what the best config holds."""
    cfg = dict(batch)
    if delays_us:
        cfg[P_DELAY] = min(delays_us)
    if counts:
        best = max(room(c) for c in counts)
        cfg[P_COUNT] = min(c for c in counts if room(c) >= 0.99 * best)
    return cfg


def _held_rate(t: TrialRunner, saturated_rps: float) -> float:
    """The highest of saturated_rps x HELD_STEP^k (k = 1..HELD_LEVELS) at which the loaded config
    holds the tune's budget (one window each, from the top down), then half a step above it where
    that holds too (a step is 15%: the path's ceiling, and with it every claim of a config it
    bounds, sat up to 15% under what the path held); 0 where none does."""

    def holds(rate: float) -> bool:
        return t.trial_load.budget.within(_level(t, _rate_spec(t, rate)))

    for k in range(1, HELD_LEVELS + 1):
        rate = saturated_rps * HELD_STEP**k
        if holds(rate):
            between = rate / HELD_STEP**0.5
            return between if holds(between) else rate
    return 0.0


def check_predictable(trial_load: TrialLoadSettings) -> None:
    """Raises UsageError for a load the prediction does not model (closed loop, a trace)."""
    if not trial_load.open_loop or trial_load.load_mode == "trace":
        raise UsageError(
            "--search predict predicts open-loop arrival rates only",
            hint="drop --load concurrency/trace, or use --search measure",
        )


def _overhead_us(level: LevelResult) -> float:
    """Client latency minus the server's queue and compute time, at one client."""
    s = level.server
    if s is None:
        return 0.0
    inside = s.queue_avg_us + s.compute_input_avg_us + s.compute_infer_avg_us + s.compute_output_avg_us
    return max(0.0, level.service.mean_us - inside)
