"""A/B in one job: baseline and candidate configs measured alternately on one server.

Machine noise (a neighbour on the runner, thermal state, a noisy disk) then hits both
arms alike, which a baseline stored by another job cannot offer. The user's
config.pbtxt is swapped atomically per round and restored byte for byte at the end,
on error and on Ctrl-C.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from perfkit.errors import InputError, PerfkitError
from perfkit.gate.merge import merge_runs
from perfkit.records import ProfileSpec, RunRecord
from perfkit.server.base import Server


@dataclass(frozen=True)
class ABPlan:
    """What an A/B gate measures: one model, two configs, the same load, several rounds each."""

    model: str
    model_repository: Path
    baseline_config: Path
    candidate_config: Path
    spec: ProfileSpec
    rounds: int = 3


def _read(path: Path, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise InputError(f"{what} {path} does not exist") from None
    except OSError as err:
        raise InputError(f"{what} {path} cannot be read: {err}") from None


def write_atomic(path: Path, data: bytes) -> None:
    """Replace path's content in one step (temp file in the same folder, then os.replace)."""
    tmp = path.with_name(f".{path.name}.perfkit-ab.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def config_path(plan: ABPlan) -> Path:
    """The config.pbtxt the server reads for the plan's model."""
    return Path(plan.model_repository) / plan.model / "config.pbtxt"


def run_ab(
    server: Server,
    plan: ABPlan,
    *,
    command: tuple[str, ...] = (),
    on_round: Callable[[int, str], None] | None = None,
) -> tuple[RunRecord, RunRecord]:
    """Measure both arms `plan.rounds` times each in ABBA order; returns the pooled (baseline, candidate).

    Raises InputError for unreadable configs, the measure/server errors of a failed round.
    The original config.pbtxt is back, byte for byte, whatever happens.
    """
    from perfkit.measure import profile  # type: ignore[attr-defined,unused-ignore]  # noqa: PLC0415

    if plan.rounds < 1:
        raise InputError(f"--rounds {plan.rounds}: need at least 1 round")
    target = config_path(plan)
    original = _read(target, f"model {plan.model!r} config")
    arms = {"baseline": _read(plan.baseline_config, "--baseline-config"),
            "candidate": _read(plan.candidate_config, "--candidate-config")}  # fmt: skip
    runs: dict[str, list[RunRecord]] = {"baseline": [], "candidate": []}
    try:
        for round_no in range(plan.rounds):
            # ABBA: each arm goes first equally often, so a drift across the job cancels out.
            order = ("baseline", "candidate") if round_no % 2 == 0 else ("candidate", "baseline")
            for arm in order:
                if on_round:
                    on_round(round_no + 1, arm)
                write_atomic(target, arms[arm])
                server.load_model(plan.model)
                runs[arm].append(profile(server, plan.spec, command=command))
    finally:
        write_atomic(target, original)
        if server.mode == "remote":  # a server we do not stop keeps serving the user's own config
            with contextlib.suppress(PerfkitError):
                server.load_model(plan.model)
    return merge_runs(runs["baseline"]), merge_runs(runs["candidate"])
