"""`perfkit tune --dry-run`: the resolved space and the validated candidates a search would try,
with no server and without touching the model repository.
"""

from __future__ import annotations

import importlib.metadata
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfkit.errors import CandidateRejectedError, ConfigError, InputError
from perfkit.records import check_budget_metric
from perfkit.server.modelconfig import ModelConfig, config_pbtxt_sha256, parse_config, read_config, render_config
from perfkit.tuner._space import (
    KNOBS,
    ResolvedSpace,
    TuneSpace,
    apply_params,
    candidate_points,
    extract_params,
    is_decoupled,
    normalize_params,
    resolve,
)

DEFAULT_CANDIDATE_LIMIT = 200
# ModelConfig fields added after tritonclient 2.41, and the first tritonclient release whose
# model_config_pb2 knows them (read from the released wheels' descriptors).
FIELD_SINCE = {
    "runtime": "2.42.0",
    "is_non_linear_format_io": "2.49.0",
    "model_metrics": "2.52.0",
    "metric_control": "2.52.0",
    "max_inflight_requests": "2.63.0",
}
_UNKNOWN_FIELD = re.compile(r'has no field named "([A-Za-z0-9_]+)"')


def explain_unknown_field(err: ConfigError) -> ConfigError:
    """A parse error about a field this tritonclient does not know, reworded to name the field and
    the tritonclient release that knows it (other errors are returned unchanged)."""
    m = _UNKNOWN_FIELD.search(err.message)
    if m is None:
        return err
    field, installed = m.group(1), _tritonclient_version()
    since = FIELD_SINCE.get(field)
    if since is not None:
        msg = f"{err.message} (field {field!r} is known from tritonclient {since}; installed: {installed})"
        hint = f"pip install 'tritonclient[all]>={since}'"
    else:
        msg = f"{err.message} (field {field!r} is unknown to the installed tritonclient {installed})"
        hint = "check the spelling, or upgrade tritonclient if the field is newer than it"
    return ConfigError(msg, hint=hint)


def _tritonclient_version() -> str:
    try:
        return importlib.metadata.version("tritonclient")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def render_candidate(original_text: str, cfg: ModelConfig) -> str:
    """The text of a candidate config written for the user's file: an edit of the original that
    changes only the fields whose values differ, comments and formatting kept (render_config)."""
    return render_config(original_text, cfg)


@dataclass(frozen=True)
class PreviewCandidate:
    number: int
    params: dict[str, Any]
    text: str
    original: bool = False


@dataclass(frozen=True)
class Preview:
    """What a tune would search for one model, decided without a server."""

    model: str
    space: ResolvedSpace
    candidates: tuple[PreviewCandidate, ...]
    rejected: tuple[tuple[dict[str, Any], str], ...]  # points the validator refused, and why
    points: int  # points considered (grid, or the random sample)
    duplicates: int  # points that made a config already listed

    @property
    def refused(self) -> str | None:
        return self.space.refused


def preview(
    space: TuneSpace,
    model_repository: Path | None,
    model: str,
    *,
    latency_budget_us: float,
    gpus: int = 0,
    cpu_cores: int | None = None,
    limit: int = DEFAULT_CANDIDATE_LIMIT,
    seed: int = 0,
    budget_metric: str = "latency",
    served_text: str | None = None,
    max_error_rate: float = 0.0,
) -> Preview:
    """Resolve the space of model in model_repository for a server with `gpus` GPUs and list the
    candidates (validated, deduplicated). model_repository None: plan from `served_text`, the config
    a server serves (perfkit.server.api_route.served_config_text). Reads only; raises
    InputError/ConfigError for a missing or unparsable config, UsageError for flags that contradict the model."""
    if model_repository is None:
        if served_text is None:
            raise ValueError("preview needs a model repository or the served config's text")
        model_dir = Path(f"served:{model}")  # no folder: nothing is read there
        try:
            original = parse_config(served_text, source=f"the config served for {model!r}")
        except ConfigError as err:
            raise explain_unknown_field(err) from None
        original_text = served_text
    else:
        model_dir = Path(model_repository) / model
        if not model_dir.is_dir():
            raise InputError(f"model {model!r} is not in the model repository {model_repository}", hint="check -m")
        config_path = model_dir / "config.pbtxt"
        try:
            original = read_config(config_path)
        except ConfigError as err:
            raise explain_unknown_field(err) from None
        original_text = config_path.read_bytes().decode("utf-8")
    rs = resolve(
        space,
        original,
        model_dir,
        latency_budget_us=latency_budget_us,
        gpus=gpus,
        cpu_cores=cpu_cores,
        refuse=False,
        max_error_rate=max_error_rate,
    )
    check_budget_metric(budget_metric, model, is_decoupled(original, rs.backend))
    if rs.refused:
        return Preview(model, rs, (), (), 0, 0)
    names = {d.name for d in rs.dimensions}
    seen = {config_pbtxt_sha256(original)}
    first = {k: v for k, v in rs.original_params.items() if k in names}
    cands = [PreviewCandidate(0, normalize_params(first), original_text, original=True)]
    rejected: list[tuple[dict[str, Any], str]] = []
    points = candidate_points(rs, limit=limit, seed=seed)
    duplicates = 0
    for point in points:
        try:
            cfg = apply_params(original, point, rs)
        except CandidateRejectedError as err:
            rejected.append((normalize_params(point), err.message))
            continue
        sha = config_pbtxt_sha256(cfg)
        if sha in seen:
            duplicates += 1
            continue
        seen.add(sha)
        full = extract_params(
            cfg,
            backend=rs.backend,
            precision_parameter=rs.precision_parameter,
            engine_files=rs.engine_files,
            parameter_keys=rs.parameter_keys,
        )
        params = normalize_params({k: v for k, v in full.items() if k in names})
        cands.append(PreviewCandidate(len(cands), params, render_candidate(original_text, cfg)))
    return Preview(model, rs, tuple(cands), tuple(rejected), len(points), duplicates)


def _fmt_value(value: Any) -> str:
    return ("on" if value else "off") if isinstance(value, bool) else str(value)


def describe(p: Preview, *, show_candidates: int = 50) -> list[str]:
    """The preview as lines of text for the terminal."""
    rs = p.space
    where = f"{rs.gpus} GPU(s), {rs.cpu_cores} CPU cores" if rs.gpus else f"no GPU, {rs.cpu_cores} CPU cores"
    out = [f"model {p.model!r} (backend {rs.backend}), planned for a server with {where}", ""]
    out.append(f"{'knob':<30} {'values':<40} why")
    dims = {d.name: d for d in (*rs.dimensions, *rs.unmeasurable)}
    for knob in KNOBS:
        d = dims.get(knob.name)
        if d is not None:
            values = f"{d.low}..{d.high} (log)" if d.is_range else ",".join(_fmt_value(c) for c in d.choices)
        elif knob.name in rs.original_params:
            values = f"{_fmt_value(rs.original_params[knob.name])} (fixed)"
        else:
            values = "-"
        if len(values) > 40:
            values = values[:37] + "..."
        out.append(f"{knob.name:<30} {values:<40} {rs.reasons.get(knob.name, '')}")
    for note in rs.notes:
        out.append(f"note: {note}")
    out.append("")
    if p.refused:
        out.append(f"not tunable: {p.refused}")
        return out
    out.append(
        f"{len(p.candidates)} candidate configs ({p.points} points considered, {p.duplicates} duplicates,"
        f" {len(p.rejected)} rejected by validation)"
    )
    rows = [(c.number, c.original, c.params) for c in p.candidates]
    return out + candidate_lines(rows, p.rejected, show_candidates=show_candidates, show_rejected=10)


def candidate_lines(
    rows: Sequence[tuple[int, bool, Mapping[str, Any]]],
    rejected: Sequence[tuple[Mapping[str, Any], str]],
    *,
    show_candidates: int,
    show_rejected: int,
) -> list[str]:
    """The dry run's candidate list, for a model and for a pipeline: each (number, is the
    original, params) up to show_candidates, how many more, then the first rejected points."""
    out: list[str] = []
    for number, original, params in rows[:show_candidates]:
        label = "original" if original else " ".join(f"{k}={_fmt_value(v)}" for k, v in params.items())
        out.append(f"  {number:03d}  {label}")
    if len(rows) > show_candidates:
        out.append(f"  ... {len(rows) - show_candidates} more (write them all with -o DIR)")
    for point, reason in rejected[:show_rejected]:
        out.append(f"  rejected {point}: {reason}")
    return out


def write_candidates(p: Preview, out_dir: Path) -> list[Path]:
    """Write each candidate as out_dir/candidates/NNN.pbtxt; returns the paths."""
    folder = Path(out_dir) / "candidates"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        paths = []
        for c in p.candidates:
            path = folder / f"{c.number:03d}.pbtxt"
            path.write_text(c.text, encoding="utf-8")
            paths.append(path)
    except OSError as err:
        raise InputError(f"{folder}: cannot write candidates: {err.strerror or err}") from None
    return paths
