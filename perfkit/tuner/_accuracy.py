"""The accuracy guard: a candidate's outputs on fixed inputs against the original config's.

A faster precision or batching that changes the answers is not a win. Before a candidate
counts as feasible, the same deterministic inputs go through it and through the original
(captured once, before any candidate is loaded); each output's largest absolute difference
and its largest difference relative to the output's scale (max |reference|) must stay within
the tolerance. Defaults by output datatype: FP32/FP64 2e-3 relative (half-precision rounding
of the arithmetic passes, 8-bit quantization does not), FP16/BF16 1e-2, integers, booleans
and strings exact.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from perfkit.errors import ServerError, UsageError

log = logging.getLogger(__name__)

DEFAULT_REL_BY_DATATYPE = {"FP64": 2e-3, "FP32": 2e-3, "FP16": 1e-2, "BF16": 1e-2}
REQUESTS = 8  # sent at once, so a dynamic batcher really groups them
_NUMPY = {
    "BOOL": np.bool_, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT64": np.int64,
    "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32, "UINT64": np.uint64,
    "FP16": np.float16, "FP32": np.float32, "FP64": np.float64, "BYTES": np.object_,
}  # fmt: skip


@dataclass(frozen=True)
class OutputTolerance:
    """How far a candidate's outputs may be from the original's. None fields take the
    per-datatype default (relative) or no bound (absolute); enabled=False skips the guard."""

    max_abs: float | None = None
    max_rel: float | None = None
    enabled: bool = True

    @classmethod
    def off(cls) -> OutputTolerance:
        return cls(enabled=False)

    def rel_for(self, datatype: str) -> float:
        if self.max_rel is not None:
            return self.max_rel
        return DEFAULT_REL_BY_DATATYPE.get(datatype, 0.0)


def parse_max_output_diff(text: str) -> OutputTolerance:
    """'1e-3' (relative), 'rel=1e-3', 'abs=0.01', 'abs=0.01,rel=1e-2', or 'off'. Raises UsageError."""
    raw = text.strip().lower()
    if raw in ("off", "none", "no"):
        return OutputTolerance.off()
    fields: dict[str, float] = {}
    for part in raw.split(","):
        key, _, value = part.strip().rpartition("=")
        key = key or "rel"
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if key not in ("abs", "rel") or not number >= 0 or key in fields:
            raise UsageError(
                f"--max-output-diff {text!r}: expected a relative difference or abs=X,rel=Y",
                hint="e.g. 1e-3, abs=0.01,rel=1e-2, or off",
            )
        fields[key] = number
    return OutputTolerance(max_abs=fields.get("abs"), max_rel=fields.get("rel"))


@dataclass(frozen=True)
class OutputDiff:
    """One output's difference between a candidate and the reference."""

    name: str
    datatype: str
    max_abs: float
    max_rel: float
    allowed_abs: float | None
    allowed_rel: float

    @property
    def within(self) -> bool:
        abs_ok = self.allowed_abs is None or self.max_abs <= self.allowed_abs
        return abs_ok and self.max_rel <= self.allowed_rel

    def describe(self) -> str:
        bound = f"{self.allowed_rel:g} relative" + (f", {self.allowed_abs:g} absolute" if self.allowed_abs else "")
        got = f"max abs diff {self.max_abs:.3g}, relative {self.max_rel:.3g}"
        return f"{self.name} ({self.datatype}) {got} (allowed {bound})"


def compare_outputs(
    reference: dict[str, np.ndarray], candidate: dict[str, np.ndarray], datatypes: dict[str, str], tol: OutputTolerance
) -> list[OutputDiff]:
    """Per-output differences (pure). An output missing or of another shape differs infinitely."""
    diffs = []
    for name, ref in reference.items():
        dtype = datatypes.get(name, "")
        got = candidate.get(name)
        if got is None or got.shape != ref.shape:
            max_abs = max_rel = math.inf
        elif ref.dtype == np.object_ or dtype == "BYTES":
            same = bool(np.array_equal(ref, got))
            max_abs = max_rel = 0.0 if same else math.inf
        else:
            a, b = ref.astype(np.float64), got.astype(np.float64)
            delta = np.abs(a - b)
            max_abs = float(delta.max()) if delta.size else 0.0
            scale = float(np.abs(a).max()) if a.size else 0.0
            max_rel = 0.0 if max_abs == 0 else (max_abs / scale if scale > 0 else math.inf)
        diffs.append(OutputDiff(name, dtype, max_abs, max_rel, tol.max_abs, tol.rel_for(dtype)))
    return diffs


@dataclass(frozen=True)
class Probe:
    """Fixed inputs for a model and a way to read its outputs over HTTP."""

    url: str
    model: str
    inputs: tuple[dict[str, Any], ...]  # one request each: name -> (datatype, array)
    outputs: tuple[str, ...]
    datatypes: dict[str, str]

    def run(self) -> dict[str, np.ndarray]:
        """Send every request at once and stack each output in request order; raises ServerError.

        tritonclient.http is gevent-based: a client must be created and used in one thread (a
        client shared with pool threads fails with greenlet's "Cannot switch to a different
        thread"). So the requests go out together with async_infer, which runs them on the
        client's own greenlet pool in the calling thread."""
        import tritonclient.http as httpclient

        host = self.url.split("://", 1)[-1]
        try:
            client = httpclient.InferenceServerClient(host, concurrency=len(self.inputs))
        except Exception as err:  # tritonclient raises its own exception types and socket errors
            raise ServerError(f"accuracy check: cannot reach {self.url} for {self.model!r}: {err}") from None
        wanted = [httpclient.InferRequestedOutput(o, binary_data=True) for o in self.outputs]

        def tensors(req: dict[str, Any]) -> list[Any]:
            out = []
            for name, (dt, arr) in req.items():
                t = httpclient.InferInput(name, list(arr.shape), dt)
                t.set_data_from_numpy(arr, binary_data=True)
                out.append(t)
            return out

        def answer(pending: Any, req: dict[str, Any]) -> Any:
            try:
                return pending.get_result()
            except Exception as err:  # tritonclient raises its own exception types
                if "Exceeds maximum queue size" not in str(err):
                    raise
                # A bounded queue (a candidate's max_queue_size) refused part of the burst
                # (core src/scheduler_utils.cc PolicyQueue::Enqueue): sent alone, it is admitted.
                return client.infer(self.model, tensors(req), outputs=wanted)

        try:
            pending = [client.async_infer(self.model, tensors(req), outputs=wanted) for req in self.inputs]
            answers = [answer(p, req) for p, req in zip(pending, self.inputs, strict=True)]
            results = [{o: res.as_numpy(o) for o in self.outputs} for res in answers]
        except Exception as err:  # tritonclient raises its own exception types and socket errors
            raise ServerError(f"accuracy check: inference on {self.model!r} failed: {err}") from None
        finally:
            client.close()
        return {o: np.stack([r[o] for r in results]) for o in self.outputs}


def make_probe(url: str, model: str, metadata: dict[str, Any], max_batch_size: int, seed: int = 0) -> Probe | None:
    """Deterministic inputs from the model's metadata; None (with a log line) for a model
    whose inputs cannot be synthesized (unknown datatype)."""
    rng = np.random.default_rng(seed)
    requests: list[dict[str, Any]] = []
    for _ in range(REQUESTS):
        req: dict[str, Any] = {}
        for inp in metadata.get("inputs", []):
            dt = str(inp["datatype"])
            dims = [int(d) for d in inp["shape"]]
            if max_batch_size > 0 and dims:
                dims = dims[1:]  # metadata lists the batch dimension as -1
            shape = [1] + [d if d > 0 else 4 for d in dims] if max_batch_size > 0 else [d if d > 0 else 4 for d in dims]
            if dt not in _NUMPY:
                log.info("accuracy check skipped: input %s has datatype %s", inp["name"], dt)
                return None
            if dt == "BYTES":
                arr = np.array([f"perfkit-{v}".encode() for v in rng.integers(0, 1000, size=int(np.prod(shape)))],
                               dtype=np.object_).reshape(shape)  # fmt: skip
            elif dt == "BOOL":
                arr = rng.integers(0, 2, size=shape).astype(np.bool_)
            elif dt.startswith(("INT", "UINT")):
                arr = rng.integers(0, 100, size=shape).astype(_NUMPY[dt])
            else:
                arr = rng.uniform(-1.0, 1.0, size=shape).astype(_NUMPY[dt])
            req[str(inp["name"])] = (dt, arr)
        requests.append(req)
    outputs = tuple(str(o["name"]) for o in metadata.get("outputs", []))
    datatypes = {str(o["name"]): str(o["datatype"]) for o in metadata.get("outputs", [])}
    return Probe(url, model, tuple(requests), outputs, datatypes)
