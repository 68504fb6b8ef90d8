#!/usr/bin/env bash
# Build the pack scripts/gpu_check.sh needs on a GPU machine that has Python 3.12, PyTorch and
# CuPy but no network and no Triton: the nvidia-pytriton wheel's tritonserver with the libraries
# it links, its python backend and the backend stubs for the Python versions asked for, and the
# cp312 wheels of perfkit's dependencies that such a machine lacks. perfkit itself runs from this
# checkout (the check puts it on PYTHONPATH; its compiled sender is optional).
#
# The wheels are unpacked into site/ (an importable folder, as `pip install --target` makes it,
# less their tests and C sources) so that xz compresses them with the rest.
#
# Usage: scripts/gpu_pack.sh [--out FILE] [--stubs "3.12 3.11"] [--no-wheels] [--fast]
#   --out FILE    the pack (default build/gpu-pack.tar.xz); a full pack must stay <= 60 MiB
#   --stubs LIST  python-backend stubs to include (default: 3.12 and this machine's Python)
#   --no-wheels   leave the wheels out (a machine that already has perfkit's dependencies)
#   --have LIST   distributions the GPU machine has, left out of the pack (default: numpy)
#   --unused LIST perfkit requirements the check never imports, left out (default: numba matplotlib)
#   --fast        gzip -1 instead of xz (quick, larger: for the no-GPU test, not for a GPU machine)
# Needs: .venv with perfkit[server] (scripts/setup.sh); the wheels need the package index.
set -euo pipefail
cd "$(dirname "$0")/.."
out=build/gpu-pack.tar.xz
fast=0
py=.venv/bin/python
here_ver=$("$py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
stubs="3.12 $here_ver"
wheels=1
# what a bare GPU machine has (Python 3.12 and numpy), and perfkit's requirements the check never
# imports: numba runs the predicted search's simulator (the check's tune is a measured grid) and
# matplotlib draws reports (the check writes none). tests/server/server/test_gpu_check.py runs the
# pack on a Python 3.12 with numpy alone, so a requirement the check does import cannot be left out.
have="numpy"
unused="numba matplotlib"
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --stubs) stubs=$2; shift 2 ;;
    --no-wheels) wheels=0; shift ;;
    --have) have=$2; shift 2 ;;
    --unused) unused=$2; shift 2 ;;
    --fast) fast=1; shift ;;
    *) echo "gpu_pack: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
limit_bytes=$((60 * 1024 * 1024))
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pack="$work/perfkit-gpu-pack"
mkdir -p "$pack/tritonserver" "$pack/site"

# tritonserver, its python backend, the stubs and the libraries they link (ldd closure)
"$py" - "$pack/tritonserver" "$stubs" <<'EOF'
import os, re, shutil, subprocess, sys, sysconfig
from pathlib import Path

dest, stubs = Path(sys.argv[1]), sys.argv[2].split()
site = Path(sysconfig.get_paths()["purelib"])
wheel, libs = site / "pytriton" / "tritonserver", site / "nvidia_pytriton.libs"
if not (wheel / "bin" / "tritonserver").is_file():
    sys.exit("gpu_pack: nvidia-pytriton is not installed in .venv (bash scripts/setup.sh)")
(dest / "bin").mkdir(parents=True)
shutil.copy2(wheel / "bin" / "tritonserver", dest / "bin" / "tritonserver")
(dest / "backends" / "python").mkdir(parents=True)
for name in ("libtriton_python.so", "triton_python_backend_utils.py"):
    shutil.copy2(wheel / "backends" / "python" / name, dest / "backends" / "python" / name)
elves = [dest / "bin" / "tritonserver", dest / "backends" / "python" / "libtriton_python.so"]
for ver in stubs:
    stub = wheel / "python_backend_stubs" / ver / "triton_python_backend_stub"
    if not stub.is_file():
        have = sorted(p.name for p in (wheel / "python_backend_stubs").iterdir())
        sys.exit(f"gpu_pack: nvidia-pytriton has no python backend stub for {ver} (it has {have})")
    (dest / "python_backend_stubs" / ver).mkdir(parents=True, exist_ok=True)
    shutil.copy2(stub, dest / "python_backend_stubs" / ver / stub.name)
    elves.append(stub)
env = {**os.environ, "LD_LIBRARY_PATH": str(libs)}
text = subprocess.run(["ldd", *map(str, elves)], capture_output=True, text=True, env=env).stdout
needed = {Path(m.group(1)) for m in re.finditer(r"=>\s+(/\S+)", text)}
(dest / "lib").mkdir()
for lib in sorted(needed):
    if lib.parent == libs:  # the wheel's own copies; the system's (libc, libstdc++ ...) the GPU machine has
        shutil.copy2(lib, dest / "lib" / lib.name)
import importlib.metadata as md
(dest / "VERSION").write_text(f"nvidia-pytriton {md.version('nvidia-pytriton')}\nstubs {' '.join(stubs)}\n")
EOF

if [ "$wheels" = 1 ]; then
  # perfkit's own requirements (pyproject.toml's [project] dependencies), resolved by pip for CPython
  # 3.12 on manylinux x86_64 with everything they need, so that a bare Python 3.12 with numpy runs the
  # check. Left out: what such a machine has (--have: numpy), and the requirements the check never
  # imports (--unused), with everything only they need (pip resolves the rest without them).
  # numpy 1.x goes apart, into numpy1/: the bundled python-backend stub answers with empty output
  # tensors under numpy 2 (measured: binary_data_size 0 for every output), so the check gives the
  # stub, and the stub alone, this numpy (gpu_check.sh, step stub-numpy).
  "$py" - "$unused" > "$work/requirements.txt" <<'EOF'
import re, sys
try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib
unused = {n.lower() for n in sys.argv[1].split()}
with open("pyproject.toml", "rb") as f:
    for req in tomllib.load(f)["project"]["dependencies"]:
        if re.match(r"[A-Za-z0-9._-]+", req).group(0).lower() not in unused:
            print(req)
EOF
  plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64
        --platform manylinux1_x86_64 --platform any)
  if ! "$py" -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 \
    --abi abi3 --abi none "${plat[@]}" -d "$work/dl" -r "$work/requirements.txt" > "$work/pip.log" 2>&1; then
    grep -v '^WARNING: Location' "$work/pip.log" >&2
    echo "gpu_pack: pip could not resolve perfkit's requirements for Python 3.12 (above)" >&2
    exit 1
  fi
  "$py" - "$work/dl" "$pack/site" "$have" "$pack/numpy1" <<'EOF'
import re, shutil, sys, zipfile
from pathlib import Path

src, dest, numpy1 = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[4])
def dist(name):  # a distribution's name, normalized (PEP 503)
    return re.sub(r"[-_.]+", "-", name).lower()
have = {dist(n) for n in sys.argv[3].split()}
names = []
for whl in sorted(src.glob("*.whl")):
    if re.match(r"numpy-1\.", whl.name):
        zipfile.ZipFile(whl).extractall(numpy1)
        names.append(f"{whl.name} (in numpy1/, for the python-backend stub)")
    elif dist(whl.name.split("-")[0]) not in have:
        zipfile.ZipFile(whl).extractall(dest)
        names.append(whl.name)
for path in sorted([*dest.rglob("*"), *numpy1.rglob("*")], reverse=True):  # children before their folders
    if path.is_dir() and path.name in ("tests", "__pycache__"):
        shutil.rmtree(path, ignore_errors=True)
    elif path.is_file() and path.suffix in (".pyx", ".pxd", ".pyi", ".c", ".cpp", ".h"):
        path.unlink()
(dest / "WHEELS.txt").write_text("".join(n + "\n" for n in names))
EOF
  # the extension modules' debug information (ml_dtypes' alone is 23 MB): nothing on the GPU machine reads it
  if command -v strip > /dev/null; then
    find "$pack/site" "$pack/numpy1" -type f -name '*.so*' -exec strip --strip-debug {} + 2>/dev/null || true
  fi
fi

{
  echo "perfkit GPU check pack, built $(date -u +%Y-%m-%dT%H:%M:%SZ) from $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  cat "$pack/tritonserver/VERSION"
  echo "wheels unpacked in site/:"
  sed 's/^/  /' "$pack/site/WHEELS.txt" 2>/dev/null || true
} > "$pack/MANIFEST.txt"

mkdir -p "$(dirname "$out")"
if [ "$fast" = 1 ]; then
  tar -C "$work" -c perfkit-gpu-pack | gzip -1 > "$out"
else
  tar -C "$work" -c perfkit-gpu-pack | xz -6 -T0 > "$out"
fi
size=$(stat -c %s "$out")
nwheels=0
if [ -f "$pack/site/WHEELS.txt" ]; then nwheels=$(wc -l < "$pack/site/WHEELS.txt"); fi
echo "gpu_pack: $out, $((size / 1024 / 1024)) MiB ($size bytes): tritonserver, stubs for $stubs, $nwheels wheels"
if [ "$wheels" = 1 ] && [ "$fast" = 0 ] && [ "$size" -gt "$limit_bytes" ]; then
  echo "gpu_pack: the pack is over 60 MiB" >&2
  exit 1
fi
