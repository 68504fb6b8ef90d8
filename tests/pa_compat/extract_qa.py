"""Extract the perf_analyzer command lines of Triton's QA scripts into qa_cases.json (data, with provenance).

    python -m tests.pa_compat.extract_qa /path/to/triton-inference-server/server.git

Reads `qa/L0_perf_analyzer/test.sh` and `qa/L0_perf_analyzer_capi/test.sh` at COMMIT (the last
commit that has them), joins continued lines, expands the loops around each command line
(protocol, shared-memory kind, model, batch size) and records what the script expects of it:
a script that fails the test when the exit code is non-zero expects "ok", one that fails it
when the code is zero expects "error". File paths become placeholders the runner fills in:
{inputdata} (tests/inputdata/files), {pa_compat} (tests/pa_compat/files), {testdata} (a
directory the runner writes as the script does), {models}, {work}, {tritonserver_dir}.
Not collected by pytest.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

COMMIT = "292dfd95c0a4d3d316b29a00b30ab570a8f5e075"
SCRIPTS = ("qa/L0_perf_analyzer/test.sh", "qa/L0_perf_analyzer_capi/test.sh")
OUT = Path(__file__).resolve().parent / "qa_cases.json"

_INPUTDATA = {
    "INT_JSONDATAFILE": "int_data.json",
    "INT_DIFFSHAPE_JSONDATAFILE": "int_data_diff_shape.json",
    "INT_OPTIONAL_JSONDATAFILE": "int_data_optional.json",
    "FLOAT_DIFFSHAPE_JSONDATAFILE": "float_data_with_shape.json",
    "STRING_JSONDATAFILE": "string_data.json",
    "STRING_WITHSHAPE_JSONDATAFILE": "string_data_with_shape.json",
    "SEQ_JSONDATAFILE": "seq_data.json",
    "SHAPETENSORADTAFILE": "shape_tensor_data.json",
    "OUTPUT_JSONDATAFILE": "output.json",
    "NON_ALIGNED_OUTPUT_JSONDATAFILE": "non_aligned_output.json",
    "WRONG_OUTPUT_JSONDATAFILE": "wrong_output.json",
    "WRONG_OUTPUT_2_JSONDATAFILE": "wrong_output_2.json",
}
_PA_COMPAT = {
    "SEQ_OUTPUT_JSONDATAFILE": "seq_output.json",
    "SEQ_WRONG_OUTPUT_JSONDATAFILE": "seq_wrong_output.json",
    "REPEAT_INT32_JSONDATAFILE": "repeat_int32_data.json",
}
_FIXED = {
    "STABILITY_THRESHOLD": "100",
    "TESTDATADIR": "{testdata}",
    "CUSTOM_SCHEDULE_FILE": "{testdata}/custom.schedule",
    "TRACE_FILE": "{work}/trace.json",
    "DATADIR": "{models}",
    "SERVER_LIBRARY_PATH": "{tritonserver_dir}",
    "INPUT_DATA_OPTION": " ".join(["--input-data {inputdata}/seq_data.json"] * 512),  # doubled 9 times
    **{k: "{inputdata}/" + v for k, v in _INPUTDATA.items()},
    **{k: "{pa_compat}/" + v for k, v in _PA_COMPAT.items()},
}
# loops around command lines of L0_perf_analyzer/test.sh: (first line, last line, variable, values)
_LOOPS = (
    (209, 678, "PROTOCOL", ("grpc", "http")),
    (212, 240, "SHARED_MEMORY_TYPE", ("none", "system", "cuda")),
    (245, 273, "SHARED_MEMORY_TYPE", ("none", "system", "cuda")),
    (276, 304, "SHARED_MEMORY_TYPE", ("none", "system", "cuda")),
    (307, 329, "MODEL", ("graphdef_nobatch_int32_int32_int32", "graphdef_int32_int32_int32")),
    (319, 328, "STATIC_BATCH", ("0", "10")),
    (442, 457, "SHARED_MEMORY_TYPE", ("none", "system", "cuda")),
    (460, 475, "SHARED_MEMORY_TYPE", ("none", "system", "cuda")),
    (477, 492, "SHARED_MEMORY_TYPE", ("none", "system", "cuda")),
    (495, 511, "SHARED_MEMORY_TYPE", ("none", "system", "cuda")),
    (513, 529, "SHARED_MEMORY_TYPE", ("none", "system", "cuda")),
    (547, 562, "SHARED_MEMORY_TYPE", ("none", "system", "cuda")),
    (565, 581, "SHARED_MEMORY_TYPE", ("none", "system")),
    (627, 643, "SHARED_MEMORY_TYPE", ("none", "system", "cuda")),
)
_CAPI_LOOPS = ((255, 271, "SHARED_MEMORY_TYPE", ("system", "cuda")),)
_PA = re.compile(r"\$\{?PERF_ANALYZER\}?")


def _commands(text: str) -> list[tuple[int, str]]:
    lines = text.split("\n")
    out = []
    i = 0
    while i < len(lines):
        if _PA.search(lines[i]) and not lines[i].lstrip().startswith(("echo", "#", "PERF_ANALYZER=")):
            start, cmd = i, lines[i].rstrip()
            while cmd.endswith("\\"):
                i += 1
                cmd = cmd[:-1] + " " + lines[i].strip()
            out.append((start + 1, " ".join(cmd.split())))
        i += 1
    return out


def _expectation(text: str, line: int) -> str:
    after = text.split("\n")[line:]
    for ln in after[:12]:
        s = ln.strip()
        if s.startswith("if [ $? -ne 0 ]") or s.startswith('if [ "$PA_PID" == "0" ]'):
            return "ok"
        if s.startswith(("if [ $? -eq 0 ]", "if [ $? -ne 99 ]")):
            return "error"
    raise ValueError(f"no exit-code check after line {line}")


def _expand(cmd: str, line: int, loops: tuple[tuple[int, int, str, tuple[str, ...]], ...]) -> list[dict[str, str]]:
    envs: list[dict[str, str]] = [{}]
    if loops is _LOOPS and line > 678 and "$PROTOCOL" in cmd:
        envs = [{"PROTOCOL": "http"}]  # bash keeps a loop variable's last value after the loop
    for lo, hi, var, values in loops:
        if lo <= line <= hi and re.search(rf"\$\{{?{var}\}}?", cmd):
            envs = [{**e, var: v} for e in envs for v in values]
    return envs


def _substitute(cmd: str, env: dict[str, str]) -> list[str]:
    cmd = re.sub(r"\s*(\||>|2>&1|&$).*$", "", cmd.split(" >", maxsplit=1)[0]).strip()
    values = {**_FIXED, **env}

    def var(m: re.Match[str]) -> str:
        return values.get(m.group(1) or m.group(2), "")  # an unset variable expands to nothing, as in bash

    text = re.sub(r"\$\{(\w+)\}|\$(\w+)", var, cmd)
    return shlex.split(text)


def _skip(argv: list[str]) -> str | None:
    text = " ".join(argv)
    if "--shared-memory=cuda" in text:
        return "needs a CUDA GPU (this machine has none)"
    if "plan_zero_1_float32_int32" in text:
        return "no stand-in model: shape tensors need TensorRT, which the bundled Triton lacks"
    if "custom_zero_1_float32" in text:
        return "no stand-in model (qa's custom backend; used by the MPI test only)"
    if "--ssl-" in text:
        return "needs the QA's TLS endpoints (a server with certificates, an nginx proxy)"
    return None


def extract(repo: Path) -> dict[str, object]:
    """The cases of every QA command line at COMMIT."""
    cases = []
    for script in SCRIPTS:
        text = subprocess.check_output(["git", "-C", str(repo), "show", f"{COMMIT}:{script}"], text=True)
        loops = _LOOPS if script.startswith("qa/L0_perf_analyzer/") else _CAPI_LOOPS
        for line, cmd in _commands(text):
            if "mpiexec" in cmd or cmd.startswith("-n 1"):
                continue
            expect = _expectation(text, line)
            parts = [p.strip() for p in re.split(r"\s:\s", cmd)]  # mpiexec's ':'-separated programs
            for env in _expand(cmd, line, loops):
                for k, part in enumerate(parts):
                    argv = _substitute(part[part.index("$") :] if "$" in part else part, env)
                    argv = argv[1:] if argv and argv[0] == "" else argv
                    argv = [a for a in argv if a]
                    if argv and ("PERF_ANALYZER" in argv[0] or argv[0].endswith("perf_analyzer")):
                        argv = argv[1:]
                    suffix = "".join(f"-{v}" for v in env.values()) + (f"-{k}" if len(parts) > 1 else "")
                    cases.append(
                        {
                            "id": f"{script.split('/')[1]}:{line}{suffix}",
                            "source": {"repository": "triton-inference-server/server", "commit": COMMIT},
                            "script": script,
                            "line": line,
                            "argv": argv,
                            "qa_expects": expect,
                        }
                    )
                    if reason := _skip(argv):
                        cases[-1]["skip"] = reason
    return {
        "about": "perf_analyzer command lines of Triton's QA scripts (expanded over their loops) and the "
        "outcome the script expects; `perf_analyzer` holds what the real perf_analyzer (tritonclient 2.41.0) did "
        "here, `perfkit` what perfkit's `perf_analyzer` command did, both against tests/pa_compat/models "
        "(record_qa.py). tests/server/cli/test_pa_conformance.py holds perfkit to these outcomes.",
        "cases": cases,
    }


def main() -> int:
    repo = Path(sys.argv[1])
    doc = extract(repo)
    old = json.loads(OUT.read_text()) if OUT.exists() else {"cases": []}
    recorded = {c["id"]: c for c in old["cases"]}
    for case in doc["cases"]:  # type: ignore[union-attr]  # extract() returns JSON whose "cases" is always a list of dicts
        for key in ("perf_analyzer", "perfkit", "stand_in", "perfkit_differs"):
            if key in recorded.get(case["id"], {}):
                case[key] = recorded[case["id"]][key]
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{len(doc['cases'])} cases -> {OUT}", file=sys.stderr)  # type: ignore[arg-type]  # "cases" is a list (JSON typed as object)
    return 0


if __name__ == "__main__":
    sys.exit(main())
