"""The onnxruntime fixture model: its files copied into a repository and its graph built there.

The graph is a small MLP (64 -> 1024 -> 1024 -> 64 with ReLU) made with the `onnx` helper from
seeded weights, written as `1/model.onnx`; its python model (fixtures/onnx/onnx_mlp) runs it with
onnxruntime. It lives outside fixtures/models so that the default repository loads without onnx.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "onnx" / "onnx_mlp"
WIDTHS = (64, 1024, 1024, 64)  # input, hidden, hidden, output


def mlp_graph(seed: int = 0, widths: tuple[int, ...] = WIDTHS) -> bytes:
    """The serialized ONNX model: Gemm + Relu layers, batch dimension left free."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    prev = "INPUT0"
    for i, (n_in, n_out) in enumerate(zip(widths, widths[1:])):
        w = (rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)).astype(np.float32)
        b = (rng.standard_normal(n_out) * 0.01).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        last = i == len(widths) - 2
        gemm_out = "OUTPUT0" if last else f"h{i}"
        nodes.append(helper.make_node("Gemm", [prev, f"w{i}", f"b{i}"], [gemm_out]))
        if not last:
            nodes.append(helper.make_node("Relu", [gemm_out], [f"r{i}"]))
            prev = f"r{i}"
    graph = helper.make_graph(
        nodes,
        "perfkit_mlp",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["batch", widths[0]])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["batch", widths[-1]])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="perfkit-fixtures")
    model.ir_version = 8  # readable by every onnxruntime that knows opset 17
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())


def reference_output(x: np.ndarray, seed: int = 0, widths: tuple[int, ...] = WIDTHS) -> np.ndarray:
    """What the graph computes, in numpy, for checking a served answer."""
    rng = np.random.default_rng(seed)
    h = x.astype(np.float32)
    for i, (n_in, n_out) in enumerate(zip(widths, widths[1:])):
        w = (rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)).astype(np.float32)
        b = (rng.standard_normal(n_out) * 0.01).astype(np.float32)
        h = h @ w + b
        if i < len(widths) - 2:
            h = np.maximum(h, 0)
    return h


def add_onnx_model(repo: Path, name: str = "onnx_mlp", seed: int = 0, widths: tuple[int, ...] = WIDTHS) -> Path:
    """Copy the fixture into repo/name and build its graph (layer widths `widths`; input and output
    stay 64 wide, as the config says); returns the model folder."""
    dest = repo / name
    shutil.copytree(FIXTURE, dest, ignore=shutil.ignore_patterns("__pycache__", "*.onnx"))
    if name != "onnx_mlp":
        cfg = dest / "config.pbtxt"
        cfg.write_text(cfg.read_text().replace('name: "onnx_mlp"', f'name: "{name}"'))
    (dest / "1" / "model.onnx").write_bytes(mlp_graph(seed, widths))
    return dest
