"""The compiled sender's C sources under AddressSanitizer and UndefinedBehaviorSanitizer.

Built here, into a temporary folder (the extension in place is left alone), with
`-fsanitize=address,undefined -fno-sanitize-recover=all`:
- the extension, and the native tests' core cases run against it in a subprocess (libasan
  preloaded: the interpreter itself is not instrumented; CPython's own leaks are not ours, so
  leak detection is off);
- tests/native_fuzz.c, a seeded mutation fuzz of the response parsers (HTTP/1.1 heads, HPACK
  blocks, and whole HTTP/1.1, unary gRPC and ModelStreamInfer exchanges through the protocols'
  frame readers on a loopback socket), deterministic and bounded (PERFKIT_FUZZ_ITERATIONS and
  PERFKIT_FUZZ_SEED explore further);
and the objects' symbol tables show the sources as a tree: the core calls no protocol (it has
them through its table of functions), no protocol calls another.

Any sanitizer report fails the test. Under CI=true a missing compiler fails too.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.conftest import require

ROOT = Path(__file__).resolve().parents[3]
SOURCES = ROOT / "perfkit" / "loadgen"
# the extension's sources, as setup.py lists them (the CPython type first)
CORE = (
    "_native_core",
    "_native_conns",
    "_native_control",
    "_native_http1",
    "_native_h2",
    "_native_h2_write",
    "_native_h2_unary",
    "_native_h2_unary_flow",
    "_native_h2_stream",
    "_native_h2_stream_recv",
)
LEAF = ("_native_hpack", "_native_pb", "_native_http1_head")
PROTOCOLS = ("_native_http1", "_native_h2_unary", "_native_h2_stream")
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-g", "-O1"]
REPORT = re.compile(r"ERROR: AddressSanitizer|runtime error:|ERROR: LeakSanitizer|UndefinedBehaviorSanitizer")
FUZZ_ITERATIONS = int(os.environ.get("PERFKIT_FUZZ_ITERATIONS", "1000"))
FUZZ_SEED = int(os.environ.get("PERFKIT_FUZZ_SEED", "1"))

# The native tests' core cases: each protocol against the real server and against scripted peers
# (framing, HPACK, GOAWAY, stream ends, drops, unfinished requests).
CASES = [
    "tests/server/loadgen/test_native_sender.py::test_payloads_are_taken_in_turn_and_errors_keep_the_servers_message[native]",
    "tests/server/loadgen/test_native_sender.py::test_payloads_are_taken_in_turn_and_errors_keep_the_servers_message[native-grpc]",
    "tests/server/loadgen/test_native_sender.py::test_open_loop_drops_past_max_outstanding[native]",
    "tests/server/loadgen/test_native_sender.py::test_open_loop_drops_past_max_outstanding[native-grpc]",
    "tests/server/loadgen/test_native_sender.py::test_an_unframed_response_is_a_protocol_error[native]",
    "tests/server/loadgen/test_native_sender.py::test_large_response_bodies_keep_the_framing_and_a_cut_body_ends_closed[native]",
    "tests/server/loadgen/test_native_sender.py::test_the_hpack_decoder_keeps_the_servers_table_in_step",
    "tests/server/loadgen/test_native_sender.py::test_the_hpack_decoder_rejects_what_would_put_it_out_of_step",
    "tests/server/loadgen/test_native_sender.py::test_grpc_frames_the_server_scripts[native-grpc]",
    "tests/server/loadgen/test_native_sender.py::test_a_header_block_that_cannot_be_decoded_is_a_protocol_error[native-grpc]",
    "tests/server/loadgen/test_native_sender.py::test_a_goaway_below_the_last_stream_ends_only_the_streams_above_it[native-grpc]",
    "tests/server/loadgen/test_native_stream.py::test_every_token_of_the_streamer_is_timed_in_its_record",
    "tests/server/loadgen/test_native_stream.py::test_responses_across_frames_errors_and_unreadable_messages",
    "tests/server/loadgen/test_native_stream.py::test_a_stream_the_server_ends_fails_what_it_carried_and_is_replaced",
    "tests/server/loadgen/test_native_stream.py::test_open_loop_drops_past_max_outstanding_and_the_level_end_replaces_the_stream",
    "tests/server/loadgen/test_native_error_bodies.py::test_an_error_answer_announcing_a_huge_body_ends_its_request_unread",
    "tests/server/loadgen/test_native_error_bodies.py::test_a_stream_answered_other_than_200_ends_at_its_head",
]

# Loaded by the subprocess's pytest (-p) before perfkit: the sanitized build is found first when
# perfkit.loadgen._native is imported.
PLUGIN = """
import importlib.abc, importlib.util, os, sys


class SanitizedNative(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "perfkit.loadgen._native":
            return None
        return importlib.util.spec_from_file_location(name, os.environ["PERFKIT_SANITIZED_NATIVE"])


sys.meta_path.insert(0, SanitizedNative())
os.environ.pop("LD_PRELOAD", None)  # this process has libasan; the server it starts needs none
"""


def _compiler() -> str:
    cc = shutil.which(os.environ.get("CC", "gcc")) or shutil.which("cc")
    require("a C compiler", cc, "apt-get install gcc (scripts/system-deps.sh)")
    return str(cc)


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, check=False, **kw)


@pytest.fixture(scope="module")
def objects(tmp_path_factory) -> dict[str, Path]:
    """Every C source compiled with the sanitizers, in a temporary folder: name -> object."""
    cc = _compiler()
    out = tmp_path_factory.mktemp("sanitized")
    built = {}
    for name in ("_native", *CORE, *LEAF):
        obj = out / f"{name}.o"
        cmd = [cc, "-c", "-fPIC", "-std=gnu11", "-Wall", "-Wextra", "-Werror", *SANITIZE]
        cmd += ["-I", sysconfig.get_paths()["include"], str(SOURCES / f"{name}.c"), "-o", str(obj)]
        done = _run(cmd)
        assert done.returncode == 0, f"{name}.c does not build with the sanitizers:\n{done.stderr}"
        built[name] = obj
    return built


def _libasan(cc: str) -> str:
    path = _run([cc, "-print-file-name=libasan.so"]).stdout.strip()
    require("libasan (AddressSanitizer's runtime)", os.path.isabs(path) and os.path.exists(path), "apt-get install gcc")
    return path


def _clean(stream: str) -> str:
    """The sanitizer reports in a process's output ('' when there are none)."""
    lines = stream.splitlines()
    hits = [i for i, line in enumerate(lines) if REPORT.search(line)]
    return "\n".join(lines[hits[0] : hits[0] + 40]) if hits else ""


@pytest.mark.usefixtures("tritonserver")  # its subprocess starts a real server for the cases that need one
def test_the_native_tests_core_cases_pass_under_asan_and_ubsan(objects, tmp_path):
    cc = _compiler()
    so = tmp_path / f"_native{sysconfig.get_config_var('EXT_SUFFIX')}"
    link = _run([cc, "-shared", *SANITIZE, *map(str, objects.values()), "-lpthread", "-o", str(so)])
    assert link.returncode == 0, link.stderr
    (tmp_path / "sanitized_native.py").write_text(PLUGIN)
    env = {
        **os.environ,
        "LD_PRELOAD": _libasan(cc),
        "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1",
        "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
        "PERFKIT_SANITIZED_NATIVE": str(so),
    }
    # the sanitized build is what the native engine imports
    probe = _run(
        [sys.executable, "-c", "import sanitized_native; from perfkit.loadgen import _native_engine as e; "
         "print(e._native.__file__ if e._native else e.NATIVE_IMPORT_ERROR)"],
        env=env, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert probe.returncode == 0 and probe.stdout.strip() == str(so), probe.stdout + probe.stderr
    run = _run(
        [sys.executable, "-m", "pytest", "-p", "sanitized_native", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
         "-x", *CASES],
        env=env, cwd=ROOT, timeout=400,
    )  # fmt: skip
    output = run.stdout + run.stderr
    assert not _clean(output), _clean(output)
    assert run.returncode == 0, output[-4000:]
    assert re.search(r"\b\d+ passed\b", run.stdout) and " skipped" not in run.stdout, run.stdout[-2000:]


def test_a_seeded_fuzz_of_the_response_parsers_finds_nothing(objects, tmp_path):
    cc = _compiler()
    binary = tmp_path / "native_fuzz"
    harness = tmp_path / "native_fuzz.o"
    cmd = [cc, "-c", "-std=gnu11", "-Wall", "-Wextra", "-Werror", *SANITIZE, "-I", str(SOURCES)]
    built = _run([*cmd, str(ROOT / "tests" / "native_fuzz.c"), "-o", str(harness)])
    assert built.returncode == 0, built.stderr
    parts = [str(objects[name]) for name in (*CORE, *LEAF)]
    link = _run([cc, *SANITIZE, str(harness), *parts, "-lpthread", "-o", str(binary)])
    assert link.returncode == 0, link.stderr
    # allocator_may_return_null: a response announcing a body of terabytes meets malloc's NULL,
    # as it would without the sanitizer, and the sender's out-of-memory path runs
    env = {
        **os.environ,
        "ASAN_OPTIONS": "detect_leaks=1:allocator_may_return_null=1",
        "UBSAN_OPTIONS": "halt_on_error=1",
    }
    run = _run([str(binary), str(FUZZ_ITERATIONS), str(FUZZ_SEED)], env=env, timeout=300)
    assert not _clean(run.stderr), _clean(run.stderr)
    assert run.returncode == 0, run.stdout + run.stderr[-4000:]
    # every target ran its iterations, and the unmutated seeds reached the end of each exchange
    counts = dict(re.findall(r"^([\w-]+): (\d+) ", run.stdout, re.M))
    assert counts == {
        "http1-head": str(20 * FUZZ_ITERATIONS),
        "hpack": str(20 * FUZZ_ITERATIONS),
        "http1": str(FUZZ_ITERATIONS),
        "h2-unary": str(FUZZ_ITERATIONS),
        "h2-stream": str(FUZZ_ITERATIONS),
    }, run.stdout


def _symbols(nm: str, obj: Path) -> tuple[set[str], set[str]]:
    """The functions and data an object defines, and the symbols it needs from elsewhere."""
    out = _run([nm, str(obj)]).stdout
    defined, needed = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "TDBR":
            defined.add(parts[2])
        elif len(parts) == 2 and parts[0] == "U":
            needed.add(parts[1])
    return defined, needed


def test_the_sources_call_each_other_as_a_tree(objects):
    nm = shutil.which("nm")
    require("nm (binutils)", nm, "apt-get install binutils")
    symbols = {name: _symbols(str(nm), obj) for name, obj in objects.items()}
    owner = {sym: name for name, (defined, _) in symbols.items() for sym in defined}
    calls = {name: {owner[s] for s in needed if s in owner} - {name} for name, (_, needed) in symbols.items()}
    # the core (the loop, and below it the connections and ledger) reaches a protocol only through c->ops
    assert calls["_native_core"] <= {"_native_conns"}, calls
    assert calls["_native_conns"] == set(), calls
    assert calls["_native_control"] <= {"_native_core", "_native_conns"}, calls
    for leaf in LEAF:
        assert calls[leaf] == set(), calls
    for name in PROTOCOLS:
        assert not calls[name] & set(PROTOCOLS), (name, calls[name])
    assert calls["_native_h2"] <= {"_native_core", "_native_conns", "_native_h2_write", "_native_hpack"}, calls
    assert calls["_native_h2_write"] <= {"_native_core", "_native_conns"}, calls
    # a protocol's second file serves it alone, and never calls back into it
    assert calls["_native_h2_unary_flow"] <= {"_native_core", "_native_conns", "_native_h2_write"}, calls
    assert calls["_native_h2_stream_recv"] <= {"_native_core", "_native_conns", "_native_pb"}, calls
    for second, protocol in (
        ("_native_h2_unary_flow", "_native_h2_unary"),
        ("_native_h2_stream_recv", "_native_h2_stream"),
    ):
        assert not any(second in calls[n] for n in calls if n != protocol), calls

    # no circle anywhere: a depth-first walk never meets a file it is inside of
    def walk(name: str, inside: tuple[str, ...]) -> None:
        assert name not in inside, f"a circle: {' -> '.join((*inside, name))}"
        for callee in calls[name]:
            walk(callee, (*inside, name))

    walk("_native", ())
