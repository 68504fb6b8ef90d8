#!/usr/bin/env bash
# The GPU check, in one call, for a machine with a GPU, Python 3.12, PyTorch and CuPy but no
# network and no Triton: everything else comes from the pack scripts/gpu_pack.sh builds.
#
#   1. unpack the pack; perfkit runs from this checkout, its missing dependencies from the pack
#   2. the pack's tritonserver with the python-backend stub for this Python: its libraries resolve
#   3. Triton with python models on KIND_GPU instances (fixtures/gpu): gpu_identity (numpy) and
#      gpu_matmul (computes on the GPU with torch, else CuPy, where the stub can import one)
#   4. each model's answer checked against numpy's on the host (scripts/gpu_outputs.py)
#   5. perfkit profile with --shared-memory cuda and GPU metrics collected (--collect-metrics)
#   6. a short perfkit tune over KIND_GPU instance counts with --objective per-gpu
#   7. summary.md, summary.json, the run and tune records and every step's log in one folder
#
# Without a GPU the same script runs every step that needs none -- the models on KIND_CPU
# instances instead, system shared memory instead of CUDA's, --objective throughput -- and names
# each step it skipped. Exit 0 when no step failed.
#
# Usage: scripts/gpu_check.sh [--pack FILE] [--out DIR] [--python PY] [--no-gpu]
#   --pack FILE   default build/gpu-pack.tar.xz
#   --out DIR     default gpu-check-<UTC time>
#   --python PY   the Python to run perfkit and the python backend with (default python3)
#   --no-gpu      act as if there were no GPU
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
pack=$repo/build/gpu-pack.tar.xz
out=gpu-check-$(date -u +%Y%m%dT%H%M%SZ)
py=python3
force_no_gpu=0
while [ $# -gt 0 ]; do
  case "$1" in
    --pack) pack=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --python) py=$2; shift 2 ;;
    --no-gpu) force_no_gpu=1; shift ;;
    *) echo "gpu_check: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
started=$(date +%s)
mkdir -p "$out/logs" "$out/records" "$out/model-notes"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
steps=$out/steps.tsv
: > "$steps"

# step NAME COMMAND...: run it with its output in logs/NAME.log, and record ok/failed and its time
step() {
  local name=$1; shift
  local t0=$SECONDS rc
  echo "gpu_check: $name ..." >&2
  "$@" > "$out/logs/$name.log" 2>&1
  rc=$?
  if [ $rc = 0 ]; then
    printf '%s\tok\t%s\t\n' "$name" $((SECONDS - t0)) >> "$steps"
  else
    printf '%s\tfailed\t%s\texit %s, see logs/%s.log\n' "$name" $((SECONDS - t0)) $rc "$name" >> "$steps"
    echo "gpu_check: $name failed (exit $rc): tail of logs/$name.log:" >&2
    tail -5 "$out/logs/$name.log" >&2
  fi
  return $rc
}
skip() {
  printf '%s\tskipped\t0\t%s\n' "$1" "$2" >> "$steps"
  echo "gpu_check: $1 skipped: $2" >&2
}

# 1. the pack
unpack() {
  [ -f "$pack" ] || { echo "no pack at $pack: build it with scripts/gpu_pack.sh"; return 1; }
  tar -C "$work" -xf "$pack" && cat "$work/perfkit-gpu-pack/MANIFEST.txt"
}
step unpack unpack || { echo "gpu_check: cannot go on without the pack" >&2; }
P=$work/perfkit-gpu-pack
cp "$P/MANIFEST.txt" "$out/pack-manifest.txt" 2>/dev/null
export PYTHONPATH="$repo:$P/site${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 PERFKIT_GPU_CHECK_DIR=$out/model-notes
pyver=$("$py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
pylib=$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR") or "")')
export LD_LIBRARY_PATH="$P/tritonserver/lib${pylib:+:$pylib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
step imports "$py" -c 'import perfkit, perfkit.cli, tritonclient.http, tritonclient.grpc, optuna, pandas, docker, pynvml
print("perfkit", perfkit.__version__, "from", perfkit.__file__)'

# 2. tritonserver and the stub for this Python
backends=$work/backends
triton_libs() {
  local stub=$P/tritonserver/python_backend_stubs/$pyver/triton_python_backend_stub
  [ -f "$stub" ] || { echo "the pack has no stub for Python $pyver: rebuild it with --stubs \"$pyver\""; return 1; }
  mkdir -p "$backends" && cp -r "$P/tritonserver/backends/python" "$backends/" && cp "$stub" "$backends/python/"
  local missing
  missing=$(ldd "$P/tritonserver/bin/tritonserver" "$backends/python/libtriton_python.so" "$stub" | grep "not found" | sort -u)
  "$P/tritonserver/bin/tritonserver" --help > /dev/null 2>&1 || true
  [ -z "$missing" ] || { echo "unresolved libraries: $missing (libpython$pyver.so must be in $pylib)"; return 1; }
  echo "tritonserver and the $pyver stub resolve every library"
}
step triton-libs triton_libs

# numpy for the stub: the bundled python-backend stub answers with empty output tensors under
# numpy 2 (binary_data_size 0 for every output). Where this Python has numpy 2, the stub gets the
# pack's numpy 1.x in a venv of its own over this Python's packages: perfkit puts its interpreter's
# folder first on the server's PATH, and the stub's Python takes its packages from the python3 it
# finds there (it reads no PYTHONPATH), while perfkit's own process keeps this Python's numpy
# through PYTHONPATH.
stub_numpy() {
  local ver site base
  ver=$("$py" -c 'import numpy; print(numpy.__version__)') || return 1
  if [ "${ver%%.*}" -lt 2 ]; then echo "numpy $ver: the stub uses it as it is"; return 0; fi
  [ -d "$P/numpy1/numpy" ] || { echo "numpy $ver here and no numpy 1.x in the pack (built with --no-wheels?)"; return 1; }
  "$py" -m venv --without-pip "$work/stubenv" || return 1
  site=$("$work/stubenv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  cp -r "$P/numpy1/." "$site/"
  base=$("$py" -c 'import site; print(":".join(site.getsitepackages()))')
  local d dirs
  IFS=: read -ra dirs <<< "$base"
  for d in "${dirs[@]}"; do echo "import site; site.addsitedir('$d')"; done > "$site/zz-base-python.pth"
  py=$work/stubenv/bin/python
  export PYTHONPATH="$PYTHONPATH:$base"
  local stub_ver
  stub_ver=$(env -u PYTHONPATH "$py" -c 'import numpy; print(numpy.__version__)') || return 1
  echo "perfkit's numpy: $("$py" -c 'import numpy; print(numpy.__version__)'); the stub's numpy: $stub_ver"
  echo "the stub's torch: $(env -u PYTHONPATH "$py" -c 'import torch; print(torch.__version__)' 2>&1 | tail -1)"
  [ "${stub_ver%%.*}" -lt 2 ]
}
step stub-numpy stub_numpy

# 3. a GPU?
gpu=0
if [ "$force_no_gpu" = 0 ] && command -v nvidia-smi > /dev/null 2>&1 && nvidia-smi -L > "$out/nvidia-smi.txt" 2>&1 \
  && grep -q '^GPU ' "$out/nvidia-smi.txt"; then
  gpu=1
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >> "$out/nvidia-smi.txt" 2>&1
fi
"$py" - > "$out/python-gpu-libraries.txt" 2>&1 <<'EOF'
for name in ("torch", "cupy"):
    try:
        mod = __import__(name)
        extra = f", cuda available: {mod.cuda.is_available()}" if name == "torch" else ""
        print(f"{name} {mod.__version__}{extra}")
    except Exception as err:
        print(f"{name}: not importable ({err.__class__.__name__}: {err})")
EOF
models=$work/models
mkdir -p "$models" && cp -r "$repo/fixtures/gpu/." "$models/"
kind=gpu
if [ $gpu = 0 ]; then
  kind=cpu  # the same models on KIND_CPU instances: every step that needs no GPU still runs
  sed -i 's/KIND_GPU/KIND_CPU/' "$models"/*/config.pbtxt
fi
server=(--model-repository "$models" --tritonserver "$P/tritonserver/bin/tritonserver" --backend-directory "$backends")
perfkit() { "$py" -m perfkit "$@"; }

# 4. the models answer with the right numbers (a load generator counts answers, not their contents)
step outputs "$py" "$repo/scripts/gpu_outputs.py" "$models" --tritonserver "$P/tritonserver/bin/tritonserver" \
  --backend-directory "$backends"

# 5. profile: a KIND_GPU instance answering, then the computing model with CUDA shm and GPU metrics
step profile-identity perfkit profile -m gpu_identity "${server[@]}" --concurrency-range 1:2 -p 500 -r 6 \
  -o "$out/records/profile-gpu_identity.json"
if [ $gpu = 1 ]; then
  step profile-cuda-shm-gpu-metrics perfkit profile -m gpu_matmul "${server[@]}" --concurrency-range 1:4:3 -p 1000 \
    -r 8 --shared-memory cuda --collect-metrics -o "$out/records/profile-gpu_matmul-cuda-shm.json"
else
  skip profile-cuda-shm-gpu-metrics "no GPU: --shared-memory cuda needs one"
  step profile-system-shm-metrics perfkit profile -m gpu_matmul "${server[@]}" --concurrency-range 1:4:3 -p 1000 \
    -r 8 --shared-memory system --collect-metrics -o "$out/records/profile-gpu_matmul-system-shm.json"
fi

# 6. a short tune over instance counts of that kind
tune_args=(-m gpu_matmul "${server[@]}" --sampler grid --trials 4 --load concurrency --max-concurrency 8
  --measurement-interval 500 --latency-budget 200ms --max-batch-sizes 64 --dynamic-batching
  --queue-delays-us 200:200 --preferred-batch-sizes none --instance-counts 1,2,3 --confirm 0)
if [ $gpu = 1 ]; then
  step tune-per-gpu perfkit tune "${tune_args[@]}" --instance-kinds gpu --objective per-gpu -o "$out/records/tune-per-gpu"
else
  skip tune-per-gpu "no GPU: KIND_GPU instance counts and --objective per-gpu need one"
  step tune-cpu-instances perfkit tune "${tune_args[@]}" --instance-kinds cpu --objective throughput \
    -o "$out/records/tune-cpu-instances"
fi

# 7. the summary
"$py" - "$out" "$gpu" $(( $(date +%s) - started )) <<'EOF'
import glob, json, os, platform, sys
from pathlib import Path

out, gpu, total_s = Path(sys.argv[1]), sys.argv[2] == "1", int(sys.argv[3])
steps = [dict(zip(("step", "status", "seconds", "note"), line.split("\t"))) for line in
         (out / "steps.tsv").read_text().splitlines() if line]
def text(name):
    p = out / name
    return p.read_text().strip() if p.exists() else ""
profiles = {}
for path in sorted(glob.glob(str(out / "records" / "profile-*.json"))):
    rec = json.loads(Path(path).read_text())
    levels = []
    for lv in rec.get("levels", []):
        samples = lv.get("metrics", [])  # Triton's nv_gpu_* series and pynvml, per GPU
        util = [m["utilization"] for m in samples if m.get("utilization") is not None]
        mem = [m["memory_used_bytes"] for m in samples if m.get("memory_used_bytes") is not None]
        levels.append({"load": lv["load"]["value"], "throughput_infer_per_s": round(lv["throughput_infer_per_s"], 1),
                       "p99_us": lv["service"].get("p99_us"), "errors": lv["error_count"],
                       "gpu_metric_samples": len(samples), "gpus": sorted({m["gpu"] for m in samples}),
                       "max_gpu_utilization": max(util) if util else None,
                       "max_gpu_memory_used_bytes": max(mem) if mem else None})
    profiles[Path(path).name] = {"status": rec.get("status"), "server": rec.get("server", {}).get("version"),
                                 "shared_memory": rec.get("spec", {}).get("shared_memory"), "levels": levels}
tunes = {}
for path in sorted(glob.glob(str(out / "records" / "tune-*" / "tune.json"))):
    rec = json.loads(Path(path).read_text())
    tunes[Path(path).parent.name] = {
        "status": rec.get("status"), "objective": rec.get("objective"), "best_trial": rec.get("best_trial"),
        "trials": [{"number": t["number"], "state": t["state"], "params": t["params"],
                    "throughput_infer_per_s": t["throughput_infer_per_s"], "feasible": t["feasible"]}
                   for t in rec.get("trials", [])]}
notes = [json.loads(Path(p).read_text()) for p in sorted(glob.glob(str(out / "model-notes" / "*.json")))]
summary = {"gpu": gpu, "total_s": total_s, "python": platform.python_version(), "machine": platform.node(),
           "nvidia_smi": text("nvidia-smi.txt"), "python_gpu_libraries": text("python-gpu-libraries.txt"),
           "steps": steps, "profiles": profiles, "tunes": tunes, "gpu_matmul_instances": notes}
(out / "summary.json").write_text(json.dumps(summary, indent=1))
lines = [f"# perfkit GPU check: {'with a GPU' if gpu else 'no GPU (the steps that need one are skipped)'}", "",
         f"- total {total_s} s, Python {platform.python_version()}", ""]
if summary["nvidia_smi"]:
    lines += ["```", summary["nvidia_smi"], "```", ""]
lines += ["Python GPU libraries:", "```", summary["python_gpu_libraries"], "```", "",
          "| step | status | s | note |", "| --- | --- | --- | --- |"]
lines += [f"| {s['step']} | {s['status']} | {s['seconds']} | {s.get('note', '')} |" for s in steps]
for name, p in profiles.items():
    lines += ["", f"## {name} ({p['status']}, shared memory {p['shared_memory']})", ""]
    for lv in p["levels"]:
        gm = (f"{lv['gpu_metric_samples']} samples from {', '.join(lv['gpus'])}, utilization up to "
              f"{lv['max_gpu_utilization']}, memory used up to {lv['max_gpu_memory_used_bytes']} B"
              if lv["gpu_metric_samples"] else "none")
        lines.append(f"- load {lv['load']:g}: {lv['throughput_infer_per_s']} infer/s, p99 {lv['p99_us']} us, "
                     f"errors {lv['errors']}, GPU metrics: {gm}")
for name, t in tunes.items():
    lines += ["", f"## {name} ({t['status']}, objective {t['objective']}, best trial {t['best_trial']})", ""]
    lines += [f"- trial {x['number']} {x['state']} {x['params']}: {x['throughput_infer_per_s']} infer/s"
              for x in t["trials"]]
if notes:
    lines += ["", "## gpu_matmul instances (what computed)", ""]
    lines += [f"- {n['kind']} instance, device {n['device']}: {n['library']}, numpy {n.get('numpy', '?')} {n['errors'] or ''}" for n in notes]
(out / "summary.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
failed=$(awk -F'\t' '$2 == "failed"' "$steps" | wc -l)
skipped=$(awk -F'\t' '$2 == "skipped" {print $1}' "$steps" | tr '\n' ' ')
echo "gpu_check: done in $(( $(date +%s) - started )) s; summary in $out/summary.md; failed: $failed; skipped: ${skipped:-none}" >&2
[ "$failed" = 0 ]
