#!/usr/bin/env bash
# Make (or refresh) the project's virtual environment in .venv with perfkit installed
# editable, with the bundled Triton server, the dev tools and the docs tools (mkdocs). Idempotent and quick when
# nothing changed. Usage: source-free; other scripts call it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.perfkit-installed
# setup.py and the C source: the compiled sender (perfkit/loadgen/_native.c) is built in place by the install
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ setup.py -nt "$stamp" ] \
  || [ -n "$(find perfkit/loadgen -name '_native*.[ch]' -newer "$stamp")" ]; then
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
  .venv/bin/python -m pip install -q -e ".[server,dev,docs]"
  touch "$stamp"
fi
