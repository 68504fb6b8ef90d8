"""The GPU check's output step: do the check's models answer with the right numbers?

A load generator counts answers, not their contents, so a model that answers with empty or wrong
tensors would still be profiled and tuned. This step starts Triton on the check's repository,
sends each model a fixed batch over HTTP and compares OUTPUT0 with numpy's result on the host:
gpu_identity must echo its input, gpu_matmul must match tanh(tanh(x @ W) @ W) within 1e-3.
It prints one line a model (the response's datatype, shape and binary_data_size, the largest
difference) and exits 1 when any model's answer is wrong.

Usage: python scripts/gpu_outputs.py REPO --tritonserver BIN --backend-directory DIR [--rows N]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np

TOLERANCE = 1e-3  # float32 on a GPU vs numpy's float32 on the host, two 1024-wide products


def _matmul_reference(repo: Path, x: np.ndarray) -> np.ndarray:
    """The model's own weights (its module's _weights), applied on the host with numpy."""
    spec = importlib.util.spec_from_file_location("gpu_matmul_model", repo / "gpu_matmul" / "1" / "model.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("triton_python_backend_utils", type(sys)("triton_python_backend_utils"))
    spec.loader.exec_module(module)
    w = module._weights()
    return np.tanh(np.tanh(x @ w) @ w)


def check(url: str, model: str, x: np.ndarray, want: np.ndarray) -> tuple[bool, str]:
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(url)
    try:
        inp = httpclient.InferInput("INPUT0", list(x.shape), "FP32")
        inp.set_data_from_numpy(x, binary_data=True)
        res = client.infer(model, [inp], outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)])
    finally:
        client.close()
    out = res.get_output("OUTPUT0") or {}
    size = (out.get("parameters") or {}).get("binary_data_size")
    head = f"{model}: OUTPUT0 {out.get('datatype')} shape {out.get('shape')} binary_data_size {size}"
    try:
        got = res.as_numpy("OUTPUT0")
    except ValueError as err:  # the body holds fewer bytes than the shape needs
        return False, f"{head}: cannot be read ({err})"
    if got is None or got.shape != want.shape:
        return False, f"{head}: expected shape {list(want.shape)}"
    diff = float(np.max(np.abs(got.astype(np.float64) - want)))
    return diff <= TOLERANCE, f"{head}: max abs difference from numpy {diff:.3g} (allowed {TOLERANCE:g})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("repo", type=Path)
    ap.add_argument("--tritonserver", type=Path, required=True)
    ap.add_argument("--backend-directory", type=Path, required=True)
    ap.add_argument("--rows", type=int, default=4)
    args = ap.parse_args()
    from perfkit.server.local import LocalLaunch, launch_local

    rng = np.random.default_rng(7)
    x16 = rng.standard_normal((args.rows, 16)).astype(np.float32)
    x1024 = rng.standard_normal((args.rows, 1024)).astype(np.float32)
    cases = [("gpu_identity", x16, x16.astype(np.float64)),
             ("gpu_matmul", x1024, _matmul_reference(args.repo, x1024.astype(np.float64)))]  # fmt: skip
    spec = LocalLaunch(args.repo, tritonserver=args.tritonserver, backend_directory=args.backend_directory)
    server = launch_local(spec)
    failed = 0
    try:
        for model, x, want in cases:
            ok, line = check(server.endpoints.http_url, model, x, want)
            print(("ok     " if ok else "WRONG  ") + line)
            failed += not ok
    finally:
        server.stop()
    print(json.dumps({"models": len(cases), "wrong": failed}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
