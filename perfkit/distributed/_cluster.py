"""The Ray side of a distributed run: joining the cluster, placing workers, calling them all at once."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from perfkit.distributed._clock import ClockOffset, measure_offset
from perfkit.distributed._worker import LevelPlan, LoadWorker, Unit
from perfkit.errors import UsageError

log = logging.getLogger(__name__)


CALL_TIMEOUT_S = 60.0  # longest a worker may take to answer a call beyond its own waiting


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UsageError("--ray needs Ray, which is not installed", hint='pip install "perfkit[distributed]"') from None
    return ray


def connect(address: str) -> Any:
    """Join the Ray cluster at address ('auto': the one this host belongs to); returns the ray module.

    Raises UsageError when Ray is missing or no cluster answers there.
    """
    ray = _ray()
    if ray.is_initialized():
        return ray
    try:
        ray.init(address=address, ignore_reinit_error=True, log_to_driver=False, logging_level=logging.WARNING)
    except (ConnectionError, RuntimeError, ValueError) as err:
        raise UsageError(
            f"--ray {address}: no Ray cluster answers there ({str(err).splitlines()[0]})",
            hint="start one with `ray start --head` (and `ray start --address=HEAD:PORT` on each client host)",
        ) from None
    return ray


def alive_nodes(ray: Any) -> list[dict[str, Any]]:
    """The cluster's live nodes, in a stable order (by node id)."""
    return sorted((n for n in ray.nodes() if n.get("Alive")), key=lambda n: str(n["NodeID"]))


@dataclass
class Placed:
    """A load worker placed on the cluster: its actor, its units, its clock, its fate."""

    index: int
    handle: Any
    units: list[Unit]
    unit_ids: list[int]  # positions of its units in the run's unit list
    identity: dict[str, Any] = field(default_factory=dict)
    clock: ClockOffset | None = None
    dead: bool = False
    note: str = ""
    digest_bytes: int = 0  # this level's
    usage: tuple[float, int] = (0.0, 0)  # this level's CPU seconds, peak RSS bytes


def place(ray: Any, units: list[Unit], client_hosts: int, node_resource: str | None = None) -> list[Placed]:
    """Create one LoadWorker actor per client host, spread over the nodes; raises UsageError without a node."""

    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = alive_nodes(ray)
    if node_resource:
        nodes = [n for n in nodes if float(n.get("Resources", {}).get(node_resource, 0)) > 0]
        if not nodes:
            raise UsageError(
                f"--client-resource {node_resource}: no live node of the Ray cluster offers that resource",
                hint=f"start client hosts with ray start --resources '{{\"{node_resource}\": 1}}'",
            )
    if not nodes:
        raise UsageError("the Ray cluster has no live node")
    remote_cls = ray.remote(num_cpus=0, max_restarts=0)(LoadWorker)
    workers = []
    for i in range(client_hosts):
        mine = [u.index for u in units if u.worker == i]
        node = nodes[i % len(nodes)]  # spread: worker i on node i mod N
        handle = remote_cls.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node["NodeID"], soft=False),
        ).remote(i, [units[u] for u in mine])
        workers.append(Placed(i, handle, [units[u] for u in mine], mine))
    idents = ray.get([w.handle.identity.remote() for w in workers], timeout=CALL_TIMEOUT_S * 2)
    for w, ident in zip(workers, idents):
        w.identity = ident
    return workers


def sync_clocks(ray: Any, workers: list[Placed]) -> None:
    """Measure every live worker's clock offset to this process (round trips, fastest kept)."""

    for w in workers:
        if not w.dead:
            handle = w.handle

            def read(handle: Any = handle) -> int:
                return int(ray.get(handle.clock_ns.remote(), timeout=CALL_TIMEOUT_S))

            w.clock = measure_offset(read)


def call_all(ray: Any, workers: list[Placed], method: str, *args: Any, timeout_s: float) -> dict[int, Any]:
    """Call a method on every live worker at once; a worker that died is marked, not raised."""
    refs = {w.index: getattr(w.handle, method).remote(*args) for w in workers if not w.dead}
    out = {}
    for w in workers:
        if w.index not in refs:
            continue
        try:
            out[w.index] = ray.get(refs[w.index], timeout=timeout_s)
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError, ray.exceptions.RayTaskError) as err:
            w.dead = True
            w.note = f"{method}: {type(err).__name__}: {str(err).splitlines()[0][:200]}"
            log.warning("load worker %d lost during %s: %s", w.index, method, w.note)
    return out


def call_start(ray: Any, live: list[Placed], plans: dict[int, LevelPlan]) -> None:
    """Start a level on every live worker at once; a worker that died is marked, not raised."""

    refs = {w.index: w.handle.start.remote(plans[w.index]) for w in live}
    for w in live:
        try:
            ray.get(refs[w.index], timeout=CALL_TIMEOUT_S)
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError, ray.exceptions.RayTaskError) as err:
            w.dead = True
            w.note = f"start: {type(err).__name__}: {str(err).splitlines()[0][:200]}"
