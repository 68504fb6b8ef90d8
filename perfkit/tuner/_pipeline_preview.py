"""`perfkit tune --dry-run` on a pipeline (an ensemble, or a BLS model with --composing-models):
every step's space and validated candidates, then the joint candidates checked across the
pipeline, with no server and without touching the model repository."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfkit.errors import CandidateRejectedError, InputError
from perfkit.tuner import _pipeline
from perfkit.tuner._preview import DEFAULT_CANDIDATE_LIMIT, Preview, candidate_lines, describe, preview
from perfkit.tuner._space import TuneSpace


@dataclass(frozen=True)
class PipelinePreview:
    """What a tune would search for a pipeline, decided without a server."""

    pipeline: _pipeline.Pipeline
    step_previews: tuple[Preview, ...]  # one per searched step
    candidates: tuple[_pipeline.JointCandidate, ...]  # the original first
    rejected: tuple[tuple[dict[str, Any], str], ...]
    points: int

    @property
    def refused(self) -> str | None:
        return self.pipeline.refused


def preview_pipeline(
    space: TuneSpace,
    repository: Path,
    model: str,
    *,
    composing: Sequence[str] = (),
    latency_budget_us: float,
    gpus: int = 0,
    limit: int = DEFAULT_CANDIDATE_LIMIT,
    seed: int = 0,
) -> PipelinePreview:
    """Every step's preview and the joint candidates (validated step by step and across the
    pipeline, deduplicated). Reads only; raises InputError/ConfigError/UsageError."""
    p = _pipeline.build(space, repository, model, composing=composing, latency_budget_us=latency_budget_us, gpus=gpus)
    if p.refused:
        return PipelinePreview(p, (), (), (), 0)
    step_previews = tuple(
        preview(space, repository, s.model, latency_budget_us=latency_budget_us, gpus=gpus, limit=limit, seed=seed)
        for s in p.searched_steps
    )
    first = _pipeline.original_candidate(p)
    cands = [first]
    seen = {first.sha256}
    rejected: list[tuple[dict[str, Any], str]] = []
    points = _pipeline.joint_points(p, limit=limit, seed=seed)
    for point in points:
        try:
            cand = _pipeline.candidate(p, point)
        except CandidateRejectedError as err:
            rejected.append((point, err.message))
            continue
        if cand.sha256 not in seen:
            seen.add(cand.sha256)
            cands.append(cand)
    return PipelinePreview(p, step_previews, tuple(cands), tuple(rejected), len(points))


def describe_pipeline(pp: PipelinePreview, *, show_candidates: int = 30) -> list[str]:
    """The preview as lines of text for the terminal."""
    p = pp.pipeline
    what = "ensemble" if p.kind == "ensemble" else "BLS model"
    out = [f"pipeline {p.model!r} ({what}), {len(p.steps)} step(s): {', '.join(s.model for s in p.steps)}", ""]
    for s in p.steps:
        if not s.searched:
            out.append(f"step {s.model!r}: held at its config: {s.fixed}")
    out.append("")
    for sp in pp.step_previews:
        out.append(f"---- step {sp.model!r}")
        out += describe(sp, show_candidates=5)
        out.append("")
    for note in p.notes:
        out.append(f"note: {note}")
    if pp.refused:
        out.append(f"not tunable: {pp.refused}")
        return out
    out.append(
        f"joint space: {len(p.space.dimensions)} dimensions over {len(p.searched_steps)} step(s);"
        f" {len(pp.candidates)} joint candidate configs ({pp.points} points considered,"
        f" {len(pp.rejected)} rejected by validation across the pipeline)"
    )
    for d in p.space.dimensions:
        out.append(f"  search {d.describe()}")
    rows = [(i, i == 0, c.params) for i, c in enumerate(pp.candidates)]
    return out + candidate_lines(rows, pp.rejected, show_candidates=show_candidates, show_rejected=5)


def write_pipeline_candidates(pp: PipelinePreview, out_dir: Path) -> list[Path]:
    """Write each joint candidate as out_dir/candidates/NNN/<model>/config.pbtxt; returns the paths."""
    folder = Path(out_dir) / "candidates"
    paths: list[Path] = []
    try:
        for i, c in enumerate(pp.candidates):
            for model, text in c.texts.items():
                path = folder / f"{i:03d}" / model / "config.pbtxt"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
                paths.append(path)
    except OSError as err:
        raise InputError(f"{folder}: cannot write candidates: {err.strerror or err}") from None
    return paths
