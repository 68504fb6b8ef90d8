"""Backends' own threads and graphs: ONNX Runtime's and PyTorch's thread pools, ONNX Runtime's
execution mode and graph optimisation level, TensorRT's CUDA graphs and busy-wait events, and
pinned host memory for device copies. Each is read and written where its backend reads it, and
searched only where a reload of the model changes it and the machine has what it acts on.

Thread counts: each instance runs its own session with its own pool (ONNX Runtime's backend opens
a session per instance: onnxruntime_backend src/onnxruntime.cc ModelInstanceState), so n instances
of t threads ask for n*t cores. Past the machine's cores they time-slice the same cores and every
execution stretches, so the values searched are t = 1, 2, 4, ... with t * n <= cores for the
fewest instances candidates may have: on 2 cores and one instance, 1 or 2 threads. Which of them
wins depends on how much of an execution the graph parallelises, which no rule predicts: the
predicted search measures a service curve at each value (tuner/_search/_predict_points.py PER_VALUE).
"""

from __future__ import annotations

from typing import Any

from perfkit.server.modelconfig import ModelConfig
from perfkit.tuner._space._core import P_COUNT, Dimension
from perfkit.tuner._space._knob_base import ABSENT, Ctx, ExtractInfo, Knob, pow2_sizes

P_INTRA = "intra_op_threads"
P_INTER = "inter_op_threads"
P_ORT_MODE = "ort_execution_mode"
P_ORT_GRAPH = "ort_graph_level"
P_CUDA_GRAPHS = "cuda_graphs"
P_BUSY_WAIT = "busy_wait_events"
P_PINNED = "pinned_memory"

# The parameter each backend reads (onnxruntime_backend README "Model Config Options"; pytorch_backend
# README "Parameters"). A python model's is whichever of these its config declares: the model reads it.
ORT_KEYS = {P_INTRA: "intra_op_thread_count", P_INTER: "inter_op_thread_count"}
TORCH_KEYS = {P_INTRA: "INTRA_OP_THREAD_COUNT", P_INTER: "INTER_OP_THREAD_COUNT"}
PYTHON_KEYS = {
    P_INTRA: ("intra_op_threads", "intra_op_thread_count", "INTRA_OP_THREAD_COUNT"),
    P_INTER: ("inter_op_threads", "inter_op_thread_count", "INTER_OP_THREAD_COUNT"),
}
# execution_mode parameter: 0 sequential (the default), 1 parallel (onnxruntime.cc ModelState::ModelState).
ORT_MODES = {"sequential": "0", "parallel": "1"}
# optimization { graph { level } }: 0 or unset all optimisations, -1 basic, 1 basic and extended,
# 2 none (onnxruntime.cc ModelState::ModelState maps them to GraphOptimizationLevel).
ORT_GRAPH_LEVELS = {"all": 0, "basic": -1, "extended": 1, "disabled": 2}
DEFAULT_GRAPH_LEVELS = ("all", "basic")
# CUDA graphs: off; on at the TensorRT backend's own sizes (no graph_spec: 1, the preferred sizes and
# max_batch_size, tensorrt_backend src/instance_state.cc InitializeGraphSpecs); or one graph_spec per
# power of two up to max_batch_size.
CUDA_GRAPH_CHOICES = ("off", "on", "pow2")
TORCH_GLOBAL = (
    "not searched: the PyTorch backend sets its thread pools once per server process, from the first model"
    " that loads (pytorch_backend src/pt/model_state.cc, std::call_once), so a reload does not change them"
)


def _param(cfg: ModelConfig, key: str) -> str | None:
    return cfg.parameters[key].string_value if key in cfg.parameters else None


def thread_key(cfg: ModelConfig, backend: str, knob: str) -> str | None:
    """The parameter holding this thread count for the backend (a python model's: the one it declares)."""
    if backend == "onnxruntime":
        return ORT_KEYS[knob]
    if backend == "pytorch":
        return TORCH_KEYS[knob]
    if backend == "python":
        return next((k for k in PYTHON_KEYS[knob] if k in cfg.parameters), None)
    return None


def thread_values(cores: int, instances: int) -> tuple[int, ...]:
    """Thread counts t = 1, 2, 4, ... (and the largest fitting) with t * instances <= cores."""
    room = max(1, cores // max(1, instances))
    return (1, *pow2_sizes(room)) if room > 1 else (1,)


def _fewest_instances(ctx: Ctx) -> int:
    return min(ctx.space.instance_counts or (int(ctx.orig.get(P_COUNT, 1)),))


def _asked_threads(ctx: Ctx, knob: str) -> tuple[int, ...] | None:
    return ctx.space.intra_op_threads if knob == P_INTRA else ctx.space.inter_op_threads


def _parallel(cfg: ModelConfig) -> bool:
    return (_param(cfg, "execution_mode") or "0").strip().lower() in ("1", "parallel")


def _resolve_threads(knob: str, ctx: Ctx) -> tuple[Dimension | None, str]:
    backend = ctx.facts.backend
    key = thread_key(ctx.cfg, backend, knob)
    if backend == "pytorch":
        return None, TORCH_GLOBAL
    if key is None:
        if backend == "python":
            names = " or ".join(repr(k) for k in PYTHON_KEYS[knob][:2])
            return None, f"not searched: the model declares no {names} parameter for its runtime to read"
        return None, f"not searched: the {backend} backend has no {knob.replace('_', '-')} setting perfkit knows"
    if knob == P_INTER and not _parallel(ctx.cfg):
        return None, (
            "not searched: in sequential execution (execution_mode 0, the default) ONNX Runtime runs one node at"
            " a time and ignores inter_op_thread_count (onnxruntime_backend README)"
        )
    n = _fewest_instances(ctx)
    asked = _asked_threads(ctx, knob)
    base = asked or thread_values(ctx.machine.cpu_cores, n)
    values = set(base) | ({ctx.orig[knob]} if knob in ctx.orig else set())
    choices = tuple(sorted(values))
    why = (
        f"parameters {{ key: {key!r} }}: "
        + ("the counts asked for" if asked else f"t * {n} instance(s) <= {ctx.machine.cpu_cores} cores")
        + "; measured at each value (a graph's parallel share is not predicted)"
    )
    if len(choices) < 2:
        return None, f"only {choices[0]}: {why}"
    return Dimension(knob, choices), why


def _extract_threads(knob: str, cfg: ModelConfig, info: ExtractInfo) -> Any:
    key = thread_key(cfg, info.backend, knob)
    if key is None:
        return ABSENT
    text = _param(cfg, key)
    if text is None:
        return 0 if info.backend == "onnxruntime" else ABSENT  # 0: ORT picks the core count
    try:
        return int(text)
    except ValueError:
        return ABSENT


def _apply_threads(knob: str, cfg: ModelConfig, value: Any, space: Any) -> None:
    key = thread_key(cfg, space.backend, knob)
    if key is not None:
        cfg.parameters[key].string_value = str(int(value))


# -- ONNX Runtime: execution mode and graph level -------------------------------------------------
def _resolve_mode(ctx: Ctx) -> tuple[Dimension | None, str]:
    if ctx.facts.backend != "onnxruntime":
        return None, "not searched: ONNX Runtime's backend only"
    orig = ctx.orig[P_ORT_MODE]
    choices = tuple(dict.fromkeys((orig, *ORT_MODES)))
    why = "parameters { key: 'execution_mode' }: parallel runs a graph's branches at once; measured at each value"
    return Dimension(P_ORT_MODE, choices), why


def _extract_mode(cfg: ModelConfig, info: ExtractInfo) -> Any:
    if info.backend != "onnxruntime":
        return ABSENT
    return "parallel" if _parallel(cfg) else "sequential"


def _apply_mode(cfg: ModelConfig, value: Any, space: Any) -> None:
    if space.backend != "onnxruntime" or ("execution_mode" not in cfg.parameters and value == "sequential"):
        return  # unset is sequential: the original's text stays as it was
    cfg.parameters["execution_mode"].string_value = ORT_MODES[str(value)]


def _resolve_graph(ctx: Ctx) -> tuple[Dimension | None, str]:
    if ctx.facts.backend != "onnxruntime":
        return None, "not searched: ONNX Runtime's backend only"
    choices = tuple(dict.fromkeys((ctx.orig[P_ORT_GRAPH], *DEFAULT_GRAPH_LEVELS)))
    why = "optimization { graph { level } }: which of ONNX Runtime's graph rewrites run; measured at each value"
    return Dimension(P_ORT_GRAPH, choices), why


def _extract_graph(cfg: ModelConfig, info: ExtractInfo) -> Any:
    if info.backend != "onnxruntime":
        return ABSENT
    level = int(cfg.optimization.graph.level)
    return next((name for name, v in ORT_GRAPH_LEVELS.items() if v == level), "all")


def _apply_graph(cfg: ModelConfig, value: Any, space: Any) -> None:
    if space.backend != "onnxruntime":
        return
    level = ORT_GRAPH_LEVELS[str(value)]
    if level != 0:
        cfg.optimization.graph.level = level
    elif cfg.optimization.HasField("graph"):
        cfg.optimization.ClearField("graph")  # unset is every optimisation (level 0)
        if not cfg.optimization.ListFields():
            cfg.ClearField("optimization")


# -- GPU only: TensorRT's CUDA graphs and busy-wait events, pinned host memory --------------------
def _why_no_gpu(ctx: Ctx, what: str) -> str | None:
    if ctx.machine.gpus == 0:
        return f"not searched: {what} acts on a GPU and none is planned for (--assume-gpu plans for one)"
    if ctx.kinds and all(k == "cpu" for k in ctx.kinds):
        return f"not searched: {what} acts on a GPU and the instances are KIND_CPU"
    return None


def _resolve_cuda_graphs(ctx: Ctx) -> tuple[Dimension | None, str]:
    if ctx.facts.backend != "tensorrt":
        return None, "not searched: TensorRT's backend only"
    why_not = _why_no_gpu(ctx, "a CUDA graph")
    if why_not:
        return None, why_not
    choices = tuple(dict.fromkeys((ctx.orig[P_CUDA_GRAPHS], *CUDA_GRAPH_CHOICES)))
    if ctx.mbs <= 1:
        choices = tuple(c for c in choices if c != "pow2")
    why = "optimization { cuda { graphs graph_spec } }: replays captured launches; measured at each value"
    return Dimension(P_CUDA_GRAPHS, choices), why


def _extract_cuda_graphs(cfg: ModelConfig, info: ExtractInfo) -> Any:
    if info.backend != "tensorrt":
        return ABSENT
    cuda = cfg.optimization.cuda
    if not cuda.graphs:
        return "off"
    return "pow2" if cuda.graph_spec else "on"


def _apply_cuda_graphs(cfg: ModelConfig, value: Any, space: Any) -> None:
    if space.backend != "tensorrt" or (value == "off" and not cfg.optimization.HasField("cuda")):
        return
    cuda = cfg.optimization.cuda
    cuda.graphs = value != "off"
    if value == "pow2":
        del cuda.graph_spec[:]
        for size in [1, *pow2_sizes(int(cfg.max_batch_size))]:
            cuda.graph_spec.add(batch_size=size)
    elif value == "on" and cuda.graph_spec:
        del cuda.graph_spec[:]


def _resolve_busy_wait(ctx: Ctx) -> tuple[Dimension | None, str]:
    if ctx.facts.backend != "tensorrt":
        return None, "not searched: TensorRT's backend only"
    why_not = _why_no_gpu(ctx, "busy-waiting on CUDA events")
    if why_not:
        return None, why_not
    why = "optimization { cuda { busy_wait_events } }: spin instead of block on completion; measured at each value"
    return Dimension(P_BUSY_WAIT, (bool(ctx.orig[P_BUSY_WAIT]), not ctx.orig[P_BUSY_WAIT])), why


def _extract_busy_wait(cfg: ModelConfig, info: ExtractInfo) -> Any:
    return bool(cfg.optimization.cuda.busy_wait_events) if info.backend == "tensorrt" else ABSENT


def _apply_busy_wait(cfg: ModelConfig, value: Any, space: Any) -> None:
    if space.backend == "tensorrt" and (value or cfg.optimization.HasField("cuda")):
        cfg.optimization.cuda.busy_wait_events = bool(value)


def _resolve_pinned(ctx: Ctx) -> tuple[Dimension | None, str]:
    if ctx.facts.backend in ("python", "ensemble"):
        return None, "not searched: the python backend stages its tensors itself"
    why_not = _why_no_gpu(ctx, "pinned host memory (for host-device copies)")
    if why_not:
        return None, why_not
    orig = ctx.orig[P_PINNED]
    why = "optimization { input_pinned_memory output_pinned_memory }: page-locked staging for device copies"
    return Dimension(P_PINNED, (orig, not orig)), why


def _extract_pinned(cfg: ModelConfig, info: ExtractInfo) -> Any:
    if info.backend in ("python", "ensemble"):
        return ABSENT
    opt = cfg.optimization
    # unset is on: core src/model_config_utils.cc NormalizeModelConfig enables both
    ins = opt.input_pinned_memory.enable if opt.HasField("input_pinned_memory") else True
    outs = opt.output_pinned_memory.enable if opt.HasField("output_pinned_memory") else True
    return bool(ins and outs)


def _apply_pinned(cfg: ModelConfig, value: Any, space: Any) -> None:
    if space.backend in ("python", "ensemble"):
        return
    opt = cfg.optimization
    if value and not (opt.HasField("input_pinned_memory") or opt.HasField("output_pinned_memory")):
        return  # unset is on: the original's text stays as it was
    opt.input_pinned_memory.enable = bool(value)
    opt.output_pinned_memory.enable = bool(value)


def _threads_knob(knob: str) -> Knob:
    return Knob(
        knob,
        lambda ctx: _resolve_threads(knob, ctx),
        lambda cfg, info: _extract_threads(knob, cfg, info),
        lambda cfg, value, space: _apply_threads(knob, cfg, value, space),
    )


# Order matters: after the instance knobs (the thread values read the instance counts and kinds).
KNOBS: tuple[Knob, ...] = (
    _threads_knob(P_INTRA),
    _threads_knob(P_INTER),
    Knob(P_ORT_MODE, _resolve_mode, _extract_mode, _apply_mode),
    Knob(P_ORT_GRAPH, _resolve_graph, _extract_graph, _apply_graph),
    Knob(P_CUDA_GRAPHS, _resolve_cuda_graphs, _extract_cuda_graphs, _apply_cuda_graphs),
    Knob(P_BUSY_WAIT, _resolve_busy_wait, _extract_busy_wait, _apply_busy_wait),
    Knob(P_PINNED, _resolve_pinned, _extract_pinned, _apply_pinned),
)
# The knobs whose effect is measured at each value, never simulated.
MEASURED_PER_VALUE = tuple(k.name for k in KNOBS)
