"""`perfkit tune --ray`: one tuning worker per server, all sharing one Optuna study.

Each worker is a Ray actor pinned to a node (and given GPUs by Ray when asked, so the server
it launches sees only its own); it copies the model's folder into a private repository on its
node, launches a Triton there, and runs the tuner's own `tune()` with local load against it,
joined to the shared study. N workers measure N trials at a time; the study's storage (and
its heartbeats) is what keeps trials from being lost or measured twice.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfkit.distributed import alive_nodes, connect
from perfkit.errors import PerfkitError, UsageError
from perfkit.server.launch import ServerOptions, open_server
from perfkit.tuner._run import tune
from perfkit.tuner._settings import TuneSettings, default_output_dir
from perfkit.tuner._space import TuneSpace

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerOutcome:
    """What one tuning worker did: where it ran, its output folder, how it ended."""

    worker: int
    host: str
    node_id: str
    output_dir: str
    status: str  # ok | failed | lost
    error: str = ""
    trials_here: int = 0
    log_tail: tuple[str, ...] = ()


class TuneWorker:
    """The actor body: a private copy of the model, a server on this node, the tuner's loop."""

    def run(self, worker: int, opts: ServerOptions, settings: TuneSettings, space: TuneSpace) -> WorkerOutcome:
        """Tune against a server launched on this node; never raises (the outcome says)."""
        lines: list[str] = []

        def echo(text: object = "", **_: Any) -> None:
            lines.append(str(text))
            log.info("%s", text)

        node = ""
        try:
            import ray

            node = ray.get_runtime_context().get_node_id()
        except Exception:  # not under Ray
            node = ""
        src = Path(opts.model_repository or ".") / settings.model
        tmp = Path(tempfile.mkdtemp(prefix=f"perfkit-tune-{worker}-"))
        status, error, done = "ok", "", 0
        try:
            if not src.is_dir():
                raise UsageError(f"--model-repository: {src} is not a folder on host {socket.gethostname()}")
            shutil.copytree(src, tmp / settings.model, ignore=shutil.ignore_patterns("__pycache__"))
            mine = dataclasses.replace(opts, model_repository=tmp, models=(settings.model,))
            with open_server(mine) as server:
                result = tune(server, settings, space, model_repository=tmp, echo=echo, shared_study=True)
            done = sum(1 for _ in (Path(result.output_dir) / "runs").glob("trial-*.json"))
        except PerfkitError as err:
            status, error = "failed", err.one_line()
        except Exception as err:  # report, don't lose the other workers' outcome
            status, error = "failed", f"{type(err).__name__}: {err}"
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return WorkerOutcome(
            worker=worker,
            host=socket.gethostname(),
            node_id=str(node),
            output_dir=str(settings.output_dir),
            status=status,
            error=error,
            trials_here=done,
            log_tail=tuple(lines[-20:]),
        )

    def pid(self) -> int:
        """This worker's process id."""
        return os.getpid()


def _one_host(nodes: list[dict[str, Any]]) -> bool:
    return len({n.get("NodeManagerAddress") for n in nodes}) <= 1


def tune_on_ray(
    opts: ServerOptions,
    settings: TuneSettings,
    space: TuneSpace,
    *,
    address: str = "auto",
    workers: int | None = None,
    gpus_per_worker: float = 0.0,
) -> tuple[Path, list[WorkerOutcome]]:
    """Run one tuning worker per server on a Ray cluster, sharing one study; returns (output dir, outcomes).

    Worker i runs on node i mod N with `gpus_per_worker` GPUs reserved by Ray, launches its own
    server (local or docker mode) on a copy of the model, and writes its outputs under
    <output dir>/worker-i. Raises UsageError for settings that cannot be shared (no shared
    storage across hosts, --apply, a remote server) and when Ray or the cluster is missing.
    """
    if opts.mode == "remote":
        raise UsageError("tune --ray launches one server per worker: -u/--launch-mode remote cannot be used with it")
    if settings.apply:
        raise UsageError("--apply with --ray: apply the best config from the study's results by hand (tune.json)")
    if opts.model_repository is None:
        raise UsageError("tune --ray needs --model-repository DIR (the same path on every node)")
    ray = connect(address)
    nodes = alive_nodes(ray)
    if not nodes:
        raise UsageError("the Ray cluster has no live node")
    count = workers if workers is not None else len(nodes)
    if count < 1:
        raise UsageError(f"--tune-workers {count}: need at least 1")
    out_dir = Path(settings.output_dir or default_output_dir(settings.model)).resolve()
    storage = settings.storage
    if storage is None:
        if not _one_host(nodes):
            raise UsageError(
                "tune --ray across hosts needs a study storage every node reaches",
                hint="pass --storage postgresql://USER@HOST/DB",
            )
        out_dir.mkdir(parents=True, exist_ok=True)
        storage = f"sqlite:///{out_dir / 'study.db'}"
    name = settings.study_name or f"tune-{settings.model}"
    repo = Path(opts.model_repository).resolve()
    base = dataclasses.replace(opts, model_repository=repo, http_port=None, grpc_port=None, metrics_port=None)

    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    remote_cls = ray.remote(max_restarts=0)(TuneWorker)
    handles = []
    for i in range(count):
        node = nodes[i % len(nodes)]
        handle = remote_cls.options(
            num_cpus=0,
            num_gpus=gpus_per_worker,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node["NodeID"], soft=False),
        ).remote()
        mine = dataclasses.replace(
            settings,
            output_dir=out_dir / f"worker-{i}",
            storage=storage,
            study_name=name,
            seed=settings.seed + i,  # alike samplers would propose alike candidates
            apply=False,
        )
        handles.append((i, node, handle, handle.run.remote(i, base, mine, space)))
    outcomes = []
    for i, node, _handle, ref in handles:
        try:
            outcomes.append(ray.get(ref))
        except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as err:
            outcomes.append(
                WorkerOutcome(
                    worker=i,
                    host=str(node.get("NodeManagerAddress", "")),
                    node_id=str(node["NodeID"]),
                    output_dir=str(out_dir / f"worker-{i}"),
                    status="lost",
                    error=str(err).splitlines()[0][:300],
                )
            )
    for _, _, handle, _ in handles:
        ray.kill(handle)
    return out_dir, outcomes
