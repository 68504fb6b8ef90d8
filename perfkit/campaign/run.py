"""Run a whole campaign: launch the server, profile every model, tune, store, report, gate."""

from __future__ import annotations

import dataclasses
import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from perfkit.campaign.sweep import Sweep
from perfkit.errors import PerfkitError
from perfkit.gate import GateOptions, GateResult, compare_records, parse_job_noise, parse_thresholds, resolve_run
from perfkit.records import RunRecord
from perfkit.server.launch import ServerOptions, open_server
from perfkit.store import open_store

if TYPE_CHECKING:  # the tuner is imported lazily: a campaign without [tune] never loads optuna
    from perfkit.tuner import TuneEvent

_log = logging.getLogger(__name__)
CampaignStep = Literal["server", "profile", "profiled", "tune", "store", "report"]


@dataclass(frozen=True)
class CampaignProgress:
    """One step of a campaign, as an event: what happened, in one line, and the record it made if any.

    The library logs the same line to the "perfkit.campaign" logger; a caller (the CLI) decides
    what to show through on_progress.
    """

    step: CampaignStep
    message: str
    model: str | None = None
    record: RunRecord | None = None


OnProgress = Callable[[CampaignProgress], None]


def _emitter(on_progress: OnProgress | None) -> Callable[..., None]:
    def emit(step: CampaignStep, message: str, **kw: Any) -> None:
        _log.info(message)
        if on_progress is not None:
            on_progress(CampaignProgress(step, message, **kw))

    return emit


@dataclass(frozen=True)
class CampaignResult:
    """What a campaign produced: the records (and their files), the gate's results, the report."""

    sweep: Sweep
    output_dir: Path
    records: tuple[RunRecord, ...]
    record_paths: tuple[Path, ...]
    gate_results: tuple[GateResult, ...] = ()
    gate_pairs: tuple[tuple[RunRecord, RunRecord], ...] = ()
    report: Path | None = None
    store: str | None = None
    store_ids: dict[str, str] = field(default_factory=dict)
    tune_dirs: dict[str, Path] = field(default_factory=dict)


def server_options(sweep: Sweep) -> ServerOptions:
    """The ServerOptions a sweep's [server] table describes (only its models loaded)."""
    s = sweep.server
    return ServerOptions(
        mode=s["mode"],
        model_repository=s.get("model_repository"),
        models=tuple(m.name for m in sweep.models),
        startup_timeout_s=float(s.get("startup_timeout_s", 120.0)),
        env=dict(s.get("env", {})),
        log_path=s.get("log"),
        tritonserver=s.get("tritonserver"),
        backend_directory=s.get("backend_directory"),
        client_shm=any(m.spec.shared_memory != "none" for m in sweep.models),
        **{k: s[k] for k in ("image", "gpus", "shm_size", "url", "grpc_url", "metrics_url") if k in s},
    )


def default_output_dir(sweep: Sweep) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path(".perfkit") / "runs" / f"{sweep.name}-{stamp}"


def run_campaign(
    sweep: Sweep,
    *,
    output_dir: Path | None = None,
    gate: bool = True,
    store: str | None = None,
    on_progress: OnProgress | None = None,
) -> CampaignResult:
    """Run every step of a sweep; returns what it produced (the gate's verdict is in gate_results).

    Raises ServerError when the server cannot start, InputError/UsageError for bad models or
    load, MeasurementError when a model's measurement fails part-way (its record is saved).
    """
    from perfkit.measure import profile  # noqa: PLC0415  (heavy: only when a campaign runs)

    echo = _emitter(on_progress)
    out = Path(output_dir or sweep.output_dir or default_output_dir(sweep))
    out.mkdir(parents=True, exist_ok=True)
    command = ("perfkit", "run", str(sweep.path))
    records: list[RunRecord] = []
    paths: list[Path] = []
    tune_dirs: dict[str, Path] = {}
    if sweep.server.get("copy_repository") and sweep.server.get("model_repository"):
        # Serve (and tune) a private copy: the checkout's configs are never rewritten, even briefly.
        copy = out / "models"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(sweep.server["model_repository"], copy, ignore=shutil.ignore_patterns("__pycache__"))
        sweep = dataclasses.replace(sweep, server={**sweep.server, "model_repository": copy})
        echo("server", f"perfkit run: serving a copy of the model repository in {copy}")
    opts = server_options(sweep)
    echo("server", f"perfkit run: {sweep.name}: starting {opts.mode} server ({len(sweep.models)} models) ...")
    with open_server(opts) as server:
        echo("server", f"perfkit run: Triton {server.version()} ready")
        for plan in sweep.models:
            path = out / f"{plan.name}.json"
            levels = ", ".join(lv.label for lv in plan.spec.levels)
            echo("profile", f"perfkit run: profiling {plan.name} at {levels} ...", model=plan.name)
            record = profile(server, plan.spec, command=command, record_path=path)
            record.save(path)
            records.append(record)
            paths.append(path)
            lines = []
            for lv in record.levels:
                lat = lv.latency()
                lines.append(
                    f"  {lv.load.label:20} {lv.throughput_infer_per_s:9.1f} infer/s  p50 {lat.p50_us / 1000:.3g} ms  "
                    f"p99 {lat.p99_us / 1000:.3g} ms  ({len(lv.windows)} windows{'' if lv.stable else ', unstable'})"
                )
            echo("profiled", "\n".join(lines), model=plan.name, record=record)
        if sweep.tune is not None:
            tune_dirs = _tune(server, sweep, out, echo)
    store_ids: dict[str, str] = {}
    store_text: str | None = None
    if sweep.save_to_store:
        store_text = store or sweep.store
        from perfkit.gate import default_store_path  # noqa: PLC0415

        store_text = store_text or str(default_store_path())
        with open_store(store_text) as st:
            for record in records:
                store_ids[str(record.model.name)] = st.save(record)
        echo("store", f"perfkit run: {len(records)} run records saved to store {store_text}")
    results: list[GateResult] = []
    pairs: list[tuple[RunRecord, RunRecord]] = []
    if gate and sweep.gate is not None:
        results, pairs = gate_campaign(sweep, records, paths)
    report = _report(out, records, pairs, results, echo) if sweep.report else None
    return CampaignResult(
        sweep=sweep,
        output_dir=out,
        records=tuple(records),
        record_paths=tuple(paths),
        gate_results=tuple(results),
        gate_pairs=tuple(pairs),
        report=report,
        store=store_text,
        store_ids=store_ids,
        tune_dirs=tune_dirs,
    )


def gate_options(sweep: Sweep) -> GateOptions:
    """The GateOptions of a sweep's [gate] table."""
    g = sweep.gate
    assert g is not None
    return GateOptions(
        thresholds=tuple(parse_thresholds(list(g.thresholds))),
        job_noise_pct=parse_job_noise(g.job_noise),
        confidence=g.confidence,
        allow_different_load=g.allow_different_load,
        allow_different_machine=g.allow_different_machine,
        max_error_fraction=g.max_error_fraction,
    )


def gate_campaign(
    sweep: Sweep, records: list[RunRecord], paths: list[Path]
) -> tuple[list[GateResult], list[tuple[RunRecord, RunRecord]]]:
    """Gate every model's record against its baseline; a model that cannot be compared is an
    invalid result (no findings) whose note says why, so every model is still reported."""
    g = sweep.gate
    assert g is not None
    opts = gate_options(sweep)
    results: list[GateResult] = []
    pairs: list[tuple[RunRecord, RunRecord]] = []
    for record, path in zip(records, paths):
        model = str(record.model.name)
        try:
            baseline, label = resolve_run(g.baseline, role="baseline", model=model, store=g.store)
            result = compare_records(baseline, record, opts, baseline_label=label, current_label=str(path))
        except PerfkitError as err:
            results.append(
                GateResult(model, "stored", g.baseline, str(path), (), notes=(f"not compared: {err.one_line()}",))
            )
            continue
        results.append(result)
        pairs.append((baseline, record))
    return results, pairs


def _tune(server: Any, sweep: Sweep, out: Path, echo: Callable[..., None]) -> dict[str, Path]:
    from perfkit.tuner import SETTINGS_KEYS, TuneSettings, TuneSpace, tune  # noqa: PLC0415

    assert sweep.tune is not None
    repo = sweep.server.get("model_repository")
    if repo is None:
        echo("tune", "perfkit run: [tune] skipped: tuning rewrites config.pbtxt and needs server.model_repository")
        return {}
    dirs = {}
    source = f"{sweep.path}: [tune]"
    only = sweep.tune.get("models")
    for plan in sweep.models:
        if only is not None and plan.name not in only:
            continue
        settings = TuneSettings.from_mapping(
            plan.name,
            sweep.tune,
            source=source,
            output_dir=_fresh_tune_dir(out / f"tune-{plan.name}"),
            command=("perfkit", "run", str(sweep.path)),
        )
        space = TuneSpace.from_mapping(sweep.tune, source=source, ignore=(*SETTINGS_KEYS, "models"))
        result = tune(server, settings, space, model_repository=Path(repo), on_event=_tune_lines(echo, plan.name))
        dirs[plan.name] = result.output_dir
    return dirs


def _fresh_tune_dir(base: Path) -> Path:
    """The tune folder of this run: `base`, or when an earlier run of the sweep left a study
    there, the first free `base-2`, `base-3`, ... (its results are kept, and a new run is a new
    study rather than an error asking for --resume)."""
    folder, n = base, 1
    while (folder / "study.db").exists():
        n += 1
        folder = base.with_name(f"{base.name}-{n}")
    return folder


def _tune_lines(echo: Callable[..., None], model: str) -> Callable[[TuneEvent], None]:
    def line(event: TuneEvent) -> None:
        echo("tune", event.line(), model=model)

    return line


def _report(
    out: Path,
    records: list[RunRecord],
    pairs: list[tuple[RunRecord, RunRecord]],
    results: list[GateResult],
    echo: Callable[..., None],
) -> Path | None:
    try:
        from perfkit import report  # noqa: PLC0415
    except ImportError:
        return None
    path = report.write_profile_report(records, report.DEFAULT_REPORTS_DIR / f"{out.name}.html")
    echo("report", f"perfkit run: report {path}")
    if pairs:
        compared = [r for r in results if r.findings]
        cpath = report.write_comparison_report(
            [b for b, _ in pairs],
            [c for _, c in pairs],
            report.DEFAULT_REPORTS_DIR / f"{out.name}-gate.html",
            results=compared,
        )
        echo("report", f"perfkit run: gate report {cpath}")
    return Path(path)
