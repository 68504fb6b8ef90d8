"""What a model load request carries: a config override and, with it, files that form the model's
folder, and the vLLM backend's engine arguments written as such a file.

Triton's model repository extension (triton-inference-server/server
docs/protocol/extension_model_repository.md, "Load"): the HTTP load request's `parameters` take
`config` (the model configuration as a JSON string) and `file:<version>/<file-name>` (the file's
content, base64 encoded). The files given form the folder the model is loaded from instead of the
repository's, and `config` must come with them. The vLLM backend reads its engine arguments from
`model.json` in the version folder (triton-inference-server/vllm_backend src/model.py,
`TritonPythonModel._init_engine_args`: `pb_utils.get_model_dir()` joined with
`_VLLM_ENGINE_ARGS_FILENAME`), and its model code is the backend's own, so a load that overrides
`VERSION/model.json` (with the version folder's other files, e.g. `multi_lora.json`, as they are)
and the config serves the same model with other engine arguments; nothing is written to the
repository.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from perfkit.errors import InputError

_FILE_KEY = re.compile(r"^file:[0-9]+/[^/].*$")


def load_request_body(
    config: Mapping[str, Any] | None, files: Mapping[str, bytes] | None = None
) -> dict[str, Any] | None:
    """The JSON body of POST v2/repository/models/NAME/load: None (load as the repository holds it),
    or `parameters` with `config` and each `file:VERSION/NAME` base64 encoded. Raises ValueError for
    files without a config (Triton refuses them) or a key not of the form file:VERSION/NAME."""
    if config is None and not files:
        return None
    params: dict[str, str] = {}
    if files:
        if config is None:
            raise ValueError("a load with override files needs the config override too (the files replace the folder)")
        for key, content in files.items():
            if not _FILE_KEY.match(key):
                raise ValueError(f"override file key {key!r} is not file:VERSION/NAME")
            params[key] = base64.b64encode(content).decode("ascii")
    if config is not None:
        params["config"] = json.dumps(config)
    return {"parameters": params}


def vllm_model_json(original: str, engine_args: Mapping[str, Any], *, source: str = "model.json") -> bytes:
    """The vLLM backend's model.json with engine_args set over the original's (other keys kept, in their
    order); raises InputError naming the file when the original is not a JSON object."""
    try:
        data = json.loads(original)
    except json.JSONDecodeError as err:
        raise InputError(f"{source}: not JSON ({err.msg} at line {err.lineno})", hint="fix the file") from None
    if not isinstance(data, dict):
        raise InputError(f"{source}: holds {type(data).__name__}, not the engine arguments' object")
    data.update(engine_args)
    return (json.dumps(data, indent=2) + "\n").encode()


def vllm_override_files(version_dir: Path, engine_args: Mapping[str, Any]) -> dict[str, bytes]:
    """The override files of a vLLM model's version folder with engine_args set in its model.json:
    {"file:VERSION/NAME": content} for every file there (the override replaces the folder), model.json
    rewritten. Raises InputError naming the folder when it holds no model.json."""
    engine = version_dir / "model.json"
    if not engine.is_file():
        raise InputError(f"{version_dir}: no model.json (the vLLM backend's engine arguments)")
    files = {}
    for path in sorted(p for p in version_dir.rglob("*") if p.is_file()):
        rel = path.relative_to(version_dir).as_posix()
        content = (
            vllm_model_json(path.read_text(encoding="utf-8"), engine_args, source=str(path))
            if path == engine
            else path.read_bytes()
        )
        files[f"file:{version_dir.name}/{rel}"] = content
    return files
