"""A/B in one job: baseline and candidate configs measured alternately on one server.

Machine noise (a neighbour on the runner, thermal state, a noisy disk) then hits both
arms alike, which a baseline stored by another job cannot offer. Each arm goes on the
server through modelconfig's one mechanism (atomic write, reload, check of what the server
applied, under the config guard), so the user's config.pbtxt is back byte for byte at the
end, on error and on Ctrl-C, and an arm the server did not apply is never measured.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfkit.errors import ConfigError, InputError, UsageError
from perfkit.gate.compare import GateOptions, GateResult, compare_records
from perfkit.gate.merge import merge_runs
from perfkit.records import LoadLevel, ProfileSpec, RunRecord
from perfkit.server.base import Server
from perfkit.server.modelconfig import ConfigGuard, parse_config

if TYPE_CHECKING:
    from perfkit.server.launch import ServerOptions


@dataclass(frozen=True)
class ABPlan:
    """What an A/B gate measures: one model, two configs, the same load, several rounds each."""

    model: str
    model_repository: Path
    baseline_config: Path
    candidate_config: Path
    spec: ProfileSpec
    rounds: int = 3


def _read(path: Path, what: str) -> str:
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise InputError(f"{what} {path} does not exist") from None
    except UnicodeDecodeError as err:
        raise InputError(f"{what} {path} is not UTF-8 text ({err.reason} at byte {err.start})") from None
    except OSError as err:
        raise InputError(f"{what} {path} cannot be read: {err}") from None
    try:
        parse_config(text, source=str(path))
    except ConfigError as err:
        raise InputError(f"{what}: {err.message}", hint=err.hint) from None
    return text


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

    Raises InputError for unreadable or invalid configs, ModelLoadError for an arm the
    server refuses, CandidateNotAppliedError for one it loads but does not apply (e.g. it
    reads another model repository), the measure/server errors of a failed round. The
    original config.pbtxt is back, byte for byte, whatever happens.
    """
    from perfkit.measure import profile  # noqa: PLC0415  # the load generator is imported only when an A/B run starts

    if plan.rounds < 1:
        raise InputError(f"--rounds {plan.rounds}: need at least 1 round")
    target = config_path(plan)
    arms = {"baseline": _read(plan.baseline_config, "--baseline-config"),
            "candidate": _read(plan.candidate_config, "--candidate-config")}  # fmt: skip
    runs: dict[str, list[RunRecord]] = {"baseline": [], "candidate": []}
    with ConfigGuard(target, server, plan.model) as guard:
        for round_no in range(plan.rounds):
            # ABBA: each arm goes first equally often, so a drift across the job cancels out.
            order = ("baseline", "candidate") if round_no % 2 == 0 else ("candidate", "baseline")
            for arm in order:
                if on_round:
                    on_round(round_no + 1, arm)
                guard.apply(arms[arm])
                runs[arm].append(profile(server, plan.spec, command=command))
    return merge_runs(runs["baseline"]), merge_runs(runs["candidate"])


def ab_levels(concurrency: tuple[int, ...], rates: tuple[float, ...], distribution: str) -> tuple[LoadLevel, ...]:
    """An A/B run's levels: the request rates, else the concurrencies (1 when neither is given); raises UsageError."""
    if concurrency and rates:
        raise UsageError("--concurrency and --request-rate are exclusive: one load mode per A/B run")
    if rates:
        dist: Any = distribution
        return tuple(LoadLevel("request_rate", float(r), dist) for r in rates)
    return tuple(LoadLevel("concurrency", float(c)) for c in (concurrency or (1,)))


def ab_gate(
    server_opts: ServerOptions,
    spec: ProfileSpec,
    baseline_config: Path,
    candidate_config: Path,
    opts: GateOptions,
    *,
    rounds: int = 3,
    output: Path | None = None,
    on_start: Callable[[ABPlan], None] | None = None,
    on_round: Callable[[int, str], None] | None = None,
    on_saved: Callable[[Path], None] | None = None,
) -> tuple[list[GateResult], list[tuple[RunRecord, RunRecord]]]:
    """`perfkit gate --ab`: serve spec's model, measure both configs `rounds` times each (run_ab), save the
    pooled records in output (when given) and compare them; returns the result and the (baseline, candidate) pair.

    Raises UsageError when the server has no model repository (the folder whose config.pbtxt is swapped),
    and as run_ab and compare_records do.
    """
    if server_opts.model_repository is None:
        raise UsageError("--ab needs --model-repository DIR (the folder whose config.pbtxt is swapped)")
    plan = ABPlan(spec.model, server_opts.model_repository, baseline_config, candidate_config, spec, rounds)
    if on_start:
        on_start(plan)
    from perfkit.server.launch import open_server  # noqa: PLC0415  # a server is started only for an A/B run

    with open_server(server_opts) as server:
        baseline, current = run_ab(server, plan, command=("perfkit", "gate", "--ab"), on_round=on_round)
    if output:
        baseline.save(output / "baseline.json")
        current.save(output / "candidate.json")
        if on_saved:
            on_saved(output)
    result = compare_records(
        baseline,
        current,
        opts,
        comparison="ab",
        baseline_label=f"{plan.baseline_config} ({plan.rounds} rounds)",
        current_label=f"{plan.candidate_config} ({plan.rounds} rounds)",
    )
    return [result], [(baseline, current)]
