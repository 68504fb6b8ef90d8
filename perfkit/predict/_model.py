"""What the simulator is given and what it answers: a service-time model, an instance-contention
model, a batcher config, a load, and the predicted figures. Frozen dataclasses, numpy-free."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from perfkit.errors import UsageError

LOAD_KINDS = ("poisson", "constant", "concurrency", "trace")


@dataclass(frozen=True)
class ServiceModel:
    """Execution time of one batch of n items on one instance, alone on its device:
    fixed_us + per_item_us * n. overhead_us is what each request spends outside the instance
    (network, HTTP/gRPC, the server's request handling): added to its latency, never holding an
    instance. table_us, when given, overrides the line for the batch sizes it names.

    host_us is the request path's ceiling: each request holds the path every request shares on
    its way to the batcher (the server's HTTP/gRPC frontend and the backend's per-request work,
    and a load generator on the same machine) for host_us, one request at a time, first come
    first served; 0 where the instances, not that path, set the ceiling. It is what a model whose
    execution is cheap next to its requests' handling (a small network on the CPU the server and
    its clients share) runs into long before its instances are busy."""

    fixed_us: float
    per_item_us: float
    overhead_us: float = 0.0
    table_us: tuple[tuple[int, float], ...] = ()
    host_us: float = 0.0

    def __post_init__(self) -> None:
        if self.host_us < 0:
            raise UsageError(
                f"host_us={self.host_us}: must be >= 0", hint="give 0 where the request path sets no ceiling"
            )

    def service_us(self, n: int) -> float:
        """The execution time of a batch of n items (the table's figure where it has one)."""
        for size, us in self.table_us:
            if size == n:
                return us
        return self.fixed_us + self.per_item_us * n

    def stretched(self, factor: float) -> ServiceModel:
        """This model with every execution `factor` times as long (the overhead outside the
        instance and the request path's ceiling as they are)."""
        return dataclasses.replace(
            self, fixed_us=self.fixed_us * factor, per_item_us=self.per_item_us * factor,
            table_us=tuple((n, us * factor) for n, us in self.table_us),
        )  # fmt: skip


@dataclass(frozen=True)
class Contention:
    """How instances share what they run on. shared_fraction f: the part of each execution that
    runs on one device shared by every instance (one at a time, first come first served); the rest
    runs on the instance alone. f = 0: instances are independent (c instances, c times the
    throughput); f = 1: they take turns on one device (c instances, the throughput of one)."""

    shared_fraction: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.shared_fraction <= 1.0:
            raise UsageError(
                f"contention shared_fraction={self.shared_fraction}: must be within 0..1",
                hint="0 for independent instances, 1 for instances taking turns on one device",
            )

    def instance_scaling(self, instances: int) -> float:
        """Saturated throughput with `instances` instances over that of one: min(c, 1/f)."""
        if self.shared_fraction <= 0:
            return float(instances)
        return min(float(instances), 1.0 / self.shared_fraction)


@dataclass(frozen=True)
class BatcherConfig:
    """The parts of a model config that decide how requests become executions. `variant` names
    the values of the knobs that change the execution itself (precision, instance kind) the
    config is at, as its calibration names them (records Calibration.value): configs alike but
    for it run different service models ('' where one model serves every config). The simulator
    never reads it: the caller gives each config its variant's service model."""

    max_batch_size: int = 0
    dynamic_batching: bool = False
    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue_delay_us: float = 0.0
    instances: int = 1
    variant: str = ""
    # The dynamic batcher's default queue policy (admission control, perfkit.predict._simqueue):
    # requests queued at most (0: no bound), the queue timeout (0: none) and its action.
    max_queue_size: int = 0
    queue_timeout_us: float = 0.0
    timeout_action: str = "reject"  # or "delay"

    def __post_init__(self) -> None:
        if self.max_queue_size < 0 or self.queue_timeout_us < 0:
            raise UsageError(
                f"max_queue_size={self.max_queue_size}, queue_timeout_us={self.queue_timeout_us}: must be >= 0",
                hint="give 0 for no bound / no timeout",
            )
        if self.timeout_action not in ("reject", "delay"):
            raise UsageError(f"timeout_action={self.timeout_action!r} unknown", hint="give reject or delay")
        if self.instances < 1:
            raise UsageError(f"instances={self.instances}: must be at least 1", hint="give 1 or more")
        if self.max_queue_delay_us < 0:
            raise UsageError(f"max_queue_delay_us={self.max_queue_delay_us}: must be >= 0", hint="give 0 or more")
        if any(p < 1 or (self.max_batch_size > 0 and p > self.max_batch_size) for p in self.preferred_batch_sizes):
            raise UsageError(
                f"preferred_batch_sizes={list(self.preferred_batch_sizes)}: each must be within 1..max_batch_size"
                f" ({self.max_batch_size})",
                hint="drop the sizes past max_batch_size",
            )

    @property
    def queue_policy(self) -> bool:
        """Whether the dynamic batcher runs a queue policy (a bound or a timeout): it then forms a
        batch only for an idle instance (perfkit.predict._simqueue, rule 1)."""
        return self.dynamic_batching and (self.max_queue_size > 0 or self.queue_timeout_us > 0)

    @property
    def batching(self) -> bool:
        """Whether requests are grouped at all (dynamic batching on a model that batches)."""
        return self.dynamic_batching and self.max_batch_size > 1

    def preferred(self) -> tuple[int, ...]:
        """The preferred sizes Triton applies: max_batch_size when none is given
        (core src/model_config_utils.cc, NormalizeModelConfig)."""
        if self.preferred_batch_sizes:
            return tuple(sorted(set(self.preferred_batch_sizes)))
        return (max(1, self.max_batch_size),)


@dataclass(frozen=True)
class Load:
    """The arrival process: 'poisson' or 'constant' at rate_rps, 'concurrency' clients each
    sending its next request when its last is answered, or a 'trace' of arrival times (s)."""

    kind: str
    rate_rps: float = 0.0
    concurrency: int = 0
    arrivals_s: tuple[float, ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        if self.kind not in LOAD_KINDS:
            raise UsageError(f"load kind {self.kind!r} unknown", hint=f"use one of {', '.join(LOAD_KINDS)}")
        if self.kind in ("poisson", "constant") and self.rate_rps <= 0:
            raise UsageError(f"{self.kind} load rate_rps={self.rate_rps}: must be > 0", hint="give a positive rate")
        if self.kind == "concurrency" and self.concurrency < 1:
            raise UsageError(f"concurrency={self.concurrency}: must be at least 1", hint="give 1 or more clients")
        if self.kind == "trace" and len(self.arrivals_s) < 2:
            raise UsageError("trace load: needs at least 2 arrival times", hint="give the trace's arrival times")


@dataclass(frozen=True)
class Prediction:
    """What one simulated run predicts: latency percentiles (client side, from each request's
    due time), the completed and offered rates, and the mean batch size executed."""

    p50_us: float
    p90_us: float
    p95_us: float
    p99_us: float
    mean_us: float
    mean_wait_us: float
    completed_rps: float
    offered_rps: float
    mean_batch: float
    requests: int
    # the share of the kept requests the queue policy rejected (a full queue, a timeout under
    # REJECT); the latencies and rates above are the served requests'
    rejected_fraction: float = 0.0

    def percentile_us(self, percentile: float) -> float:
        """The latency at one of the percentiles kept (50, 90, 95, 99)."""
        table = {50.0: self.p50_us, 90.0: self.p90_us, 95.0: self.p95_us, 99.0: self.p99_us}
        if float(percentile) not in table:
            raise UsageError(f"percentile {percentile} not kept", hint="use 50, 90, 95 or 99")
        return table[float(percentile)]
