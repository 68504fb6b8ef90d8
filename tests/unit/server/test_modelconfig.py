# ruff: noqa: E501  (the configs below are data, kept one block per line as users write them)
"""config.pbtxt IO: lossless round-trips through tritonclient's protobuf, errors that name
file and line, stable hashing, atomic writes, and the guard that always restores."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from perfkit.errors import ConfigError
from perfkit.server.modelconfig import (
    ConfigGuard,
    ModelConfig,
    applied_differences,
    config_from_dict,
    config_pbtxt_sha256,
    config_to_dict,
    format_config,
    parse_config,
    read_config,
    render_config,
    write_config,
)
from tests.support.stand_in_server import StandInServer

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "models"

# Every top-level field of ModelConfig, with nested blocks users actually write.
WIDE_CONFIGS = {
    "everything": """
name: "wide"
platform: "onnxruntime_onnx"
backend: "onnxruntime"
runtime: "libtriton_onnxruntime.so"
version_policy { specific { versions: [1, 3] } }
max_batch_size: 16
input [
  { name: "IN" data_type: TYPE_FP16 format: FORMAT_NCHW dims: [3, -1, -1] allow_ragged_batch: true
    reshape { shape: [3, 224, 224] } optional: true },
  { name: "SHAPE" data_type: TYPE_INT32 dims: [2] is_shape_tensor: true }
]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [1000] label_filename: "labels.txt" reshape { shape: [1, 1000] } } ]
batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "N" data_type: TYPE_FP32 source_input: "IN" } ]
batch_output [ { target_name: "OUT" kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: "IN" } ]
optimization {
  graph { level: 1 }
  priority: PRIORITY_MAX
  cuda { graphs: true busy_wait_events: true graph_spec { batch_size: 4 input { key: "IN" value { dim: [3, 8, 8] } } } }
  execution_accelerators {
    gpu_execution_accelerator [
      { name: "tensorrt" parameters { key: "precision_mode" value: "FP16" } parameters { key: "max_workspace_size_bytes" value: "1073741824" } }
    ]
    cpu_execution_accelerator [ { name: "openvino" } ]
  }
  input_pinned_memory { enable: false }
  output_pinned_memory { enable: true }
  gather_kernel_buffer_threshold: 4
  eager_batching: true
}
dynamic_batching {
  preferred_batch_size: [4, 8]
  max_queue_delay_microseconds: 500
  preserve_ordering: true
  priority_levels: 2
  default_priority_level: 1
  default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 1000 allow_timeout_override: true max_queue_size: 10 }
  priority_queue_policy { key: 2 value { max_queue_size: 3 } }
}
instance_group [
  { name: "g0" kind: KIND_GPU count: 2 gpus: [0, 1] rate_limiter { resources [ { name: "R" count: 1 global: true } ] priority: 2 }
    secondary_devices [ { kind: KIND_NVDLA device_id: 0 } ] profile: ["0"] passive: false host_policy: "numa0" },
  { kind: KIND_CPU count: 1 }
]
default_model_filename: "model_fp16.onnx"
cc_model_filenames { key: "7.5" value: "model_sm75.onnx" }
metric_tags { key: "team" value: "vision" }
parameters { key: "precision" value: { string_value: "fp16" } }
parameters { key: "EXECUTION_ENV_PATH" value: { string_value: "$$TRITON_MODEL_DIRECTORY/env.tar.gz" } }
model_warmup [
  { name: "w" batch_size: 2 count: 3 inputs { key: "IN" value { data_type: TYPE_FP16 dims: [3, 8, 8] random_data: true } } }
]
model_operations { op_library_filename: ["libcustom.so"] }
model_transaction_policy { decoupled: true }
model_repository_agents { agents [ { name: "checksum" parameters { key: "MD5:model.onnx" value: "abc" } } ] }
response_cache { enable: true }
model_metrics {
  metric_control [ { metric_identifier { family: "nv_inference_request_duration" }
                     histogram_options { buckets: [0.1, 1, 10] } } ]
}
""",
    "sequence": """
name: "seq"
backend: "python"
max_batch_size: 4
version_policy { latest { num_versions: 2 } }
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [0, 1] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
  state [ { input_name: "S_IN" output_name: "S_OUT" data_type: TYPE_FP32 dims: [-1] initial_state { name: "zero" data_type: TYPE_FP32 dims: [1] zero_data: true } } ]
  oldest { max_candidate_sequences: 8 preferred_batch_size: [2, 4] max_queue_delay_microseconds: 100 }
}
input [ { name: "X" data_type: TYPE_FP32 dims: [1] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [1] } ]
""",
    "ensemble": """
name: "ens"
platform: "ensemble"
max_batch_size: 8
version_policy: { all { } }
input [ { name: "RAW" data_type: TYPE_STRING dims: [1] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [16] } ]
ensemble_scheduling {
  step [
    { model_name: "pre" model_version: -1 input_map { key: "TEXT" value: "RAW" } output_map { key: "V" value: "mid" } },
    { model_name: "batcher" model_version: 1 input_map { key: "INPUT0" value: "mid" } output_map { key: "OUTPUT0" value: "OUT" } }
  ]
}
""",
}


def _fixture_configs() -> list[Path]:
    return sorted(FIXTURES.glob("*/config.pbtxt"))


def test_wide_configs_cover_every_top_level_field():
    set_fields: set[str] = set()
    for text in WIDE_CONFIGS.values():
        set_fields |= {fd.name for fd, _ in parse_config(text).ListFields()}
    all_fields = {f.name for f in ModelConfig.DESCRIPTOR.fields}
    assert all_fields - set_fields == set(), "add these fields to WIDE_CONFIGS"


@pytest.mark.parametrize("name", sorted(WIDE_CONFIGS))
def test_text_round_trip_loses_nothing(name: str, tmp_path: Path):
    cfg = parse_config(WIDE_CONFIGS[name], source=name)
    path = tmp_path / "config.pbtxt"
    write_config(path, cfg)
    again = read_config(path)
    assert again == cfg
    assert config_pbtxt_sha256(again) == config_pbtxt_sha256(cfg)
    # Printing is a fixed point: a second write gives the same bytes.
    first = path.read_bytes()
    write_config(path, again)
    assert path.read_bytes() == first


@pytest.mark.parametrize("name", sorted(WIDE_CONFIGS))
def test_json_round_trip_loses_nothing(name: str):
    cfg = parse_config(WIDE_CONFIGS[name])
    data = config_to_dict(cfg)
    assert "max_queue_delay_microseconds" in str(data) or name != "everything"  # proto field names kept
    assert config_from_dict(data) == cfg


@pytest.mark.parametrize("path", _fixture_configs(), ids=lambda p: p.parent.name)
def test_fixture_configs_round_trip(path: Path):
    cfg = read_config(path)
    assert parse_config(format_config(cfg)) == cfg
    assert config_from_dict(config_to_dict(cfg)) == cfg


def test_sha256_ignores_layout_and_comments_but_not_content():
    a = parse_config('name: "m"\nmax_batch_size: 8\n')
    b = parse_config('# comment\nmax_batch_size: 8   name:"m"')
    c = parse_config('name: "m"\nmax_batch_size: 4\n')
    assert config_pbtxt_sha256(a) == config_pbtxt_sha256(b)
    assert config_pbtxt_sha256(a) != config_pbtxt_sha256(c)
    assert len(config_pbtxt_sha256(a)) == 64


def test_server_json_with_unknown_fields_and_string_int64_is_read():
    applied = {
        "name": "m",
        "max_batch_size": 8,
        "a_field_from_a_newer_triton": 1,
        "dynamic_batching": {"max_queue_delay_microseconds": "500", "preferred_batch_size": [4]},
    }
    cfg = config_from_dict(applied)
    assert cfg.dynamic_batching.max_queue_delay_microseconds == 500


@pytest.mark.parametrize(
    ("text", "line", "what"),
    [
        ('name: "m"\nmax_batch_size: "eight"\n', 2, "max_batch_size"),
        ('name: "m"\n\nno_such_field: 1\n', 3, "no_such_field"),
        ('name: "m"\ninput [ { name: "x" data_type: TYPE_NOPE } ]\n', 2, "TYPE_NOPE"),
        ('name: "m"\ninstance_group [ { count: 1 \n', 2, 'Expected "}"'),
    ],
)
def test_invalid_config_names_file_line_and_problem(tmp_path: Path, text: str, line: int, what: str):
    path = tmp_path / "config.pbtxt"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        read_config(path)
    msg = err.value.one_line()
    assert f"{path}:{line}:" in msg
    assert what in msg
    assert err.value.exit_code == 3


def test_missing_and_non_utf8_configs_are_config_errors(tmp_path: Path):
    with pytest.raises(ConfigError, match="no such model config"):
        read_config(tmp_path / "nope.pbtxt")
    bad = tmp_path / "config.pbtxt"
    bad.write_bytes(b'name: "\xff"')
    with pytest.raises(ConfigError, match="not UTF-8"):
        read_config(bad)


def test_atomic_write_keeps_mode_and_leaves_no_temp_files(tmp_path: Path):
    path = tmp_path / "config.pbtxt"
    path.write_text("old")
    os.chmod(path, 0o640)
    write_config(path, 'name: "m"\n')
    assert path.read_text() == 'name: "m"\n'
    assert (path.stat().st_mode & 0o777) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["config.pbtxt"]


class _FileReadingServer(StandInServer):
    """Reads the config file at each load, as a server reading its repository does: `loaded`
    holds the bytes each load found."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self.loaded: list[bytes] = []

    def load_model(self, name: str, *, config: dict[str, Any] | None = None) -> None:
        super().load_model(name, config=config)
        self.loaded.append(self.path.read_bytes())


@pytest.mark.parametrize("ending", ["normal", "exception", "keyboard"])
def test_guard_restores_bytes_and_reloads(tmp_path: Path, ending: str):
    path = tmp_path / "config.pbtxt"
    original = b'# my comments and odd   spacing\nname: "m"   \nmax_batch_size: 8\n'
    path.write_bytes(original)
    server = _FileReadingServer(path)
    with pytest.raises((RuntimeError, KeyboardInterrupt)) if ending != "normal" else _nullcontext():
        with ConfigGuard(path, server, "m"):
            write_config(path, 'name: "m"\nmax_batch_size: 2\n')
            if ending == "exception":
                raise RuntimeError("boom")
            if ending == "keyboard":
                raise KeyboardInterrupt
    assert path.read_bytes() == original
    assert server.loaded == [original]


def test_guard_does_not_reload_when_nothing_changed(tmp_path: Path):
    path = tmp_path / "config.pbtxt"
    path.write_bytes(b'name: "m"\n')
    server = _FileReadingServer(path)
    with ConfigGuard(path, server, "m"):
        pass
    assert server.loaded == []


def _guarded_child(path: Path, body: str) -> subprocess.Popen[bytes]:
    """A real Python process that enters ConfigGuard(path), rewrites the file, prints "changed",
    runs body (inside the guard) and then waits to be signalled."""
    script = (
        textwrap.dedent(
            f"""
        import signal, time
        from pathlib import Path
        from perfkit.server.modelconfig import ConfigGuard, write_config
        # Ctrl-C raises KeyboardInterrupt, as in a process started from a terminal: a suite run as a
        # background job hands its children SIGINT ignored, which the library guard keeps (the CLI's
        # handler is what takes an ignored SIGINT back: perfkit/cli/_signals.py).
        signal.signal(signal.SIGINT, signal.default_int_handler)
        p = Path({str(path)!r})
        with ConfigGuard(p):
            write_config(p, 'name: "changed"\\n')
        """
        )
        + textwrap.indent(textwrap.dedent(body), "    ")
        + textwrap.indent(
            # Short sleeps, not one long one: when the kernel hands the signal to another thread (the
            # process has OpenBLAS threads), the main thread runs the handler only when it next wakes.
            "for _ in range(600):\n    time.sleep(0.1)\n",
            "    ",
        )
    )
    return subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _wait_or_explain(proc: subprocess.Popen[bytes], timeout_s: float = 60.0) -> int:
    """The child's exit status; if it is still running after timeout_s, fail with what it was
    doing with signals (blocked, ignored, pending, per thread) and what it printed."""
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        states = []
        for task in sorted(Path(f"/proc/{proc.pid}/task").glob("*")):
            with contextlib.suppress(OSError):
                lines = task.joinpath("status").read_text().splitlines()
                states.append(
                    f"  thread {task.name}: "
                    + " ".join(ln for ln in lines if ln.startswith(("State", "Sig", "ShdPnd")))
                )
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(
            f"the child did not exit {timeout_s} s after the signal:\n"
            + "\n".join(states)
            + f"\nstderr:\n{err.decode(errors='replace')}"
        )


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_guard_restores_on_signal_in_a_real_process(tmp_path: Path, sig: int):
    path = tmp_path / "config.pbtxt"
    original = b'name: "m"  # keep me\n'
    path.write_bytes(original)
    proc = _guarded_child(path, 'print("changed", flush=True)\n')
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == b"changed"
    assert path.read_bytes() != original
    proc.send_signal(sig)
    assert _wait_or_explain(proc) != 0
    assert path.read_bytes() == original


def test_guard_restores_when_a_second_signal_follows_the_first(tmp_path: Path):
    # SIGTERM and Ctrl-C reach the process together (a supervisor stops it as the user presses
    # Ctrl-C; or Ctrl-C twice): the second handler runs as the block unwinds from the first,
    # before or during the guard's exit, and must not cut the restore short. The child holds both
    # signals blocked until both are pending, so both handlers run back to back, every time.
    path = tmp_path / "config.pbtxt"
    original = b'name: "m"  # keep me\n'
    path.write_bytes(original)
    body = """
        both = {signal.SIGINT, signal.SIGTERM}
        signal.pthread_sigmask(signal.SIG_BLOCK, both)
        print("changed", flush=True)
        while signal.sigpending() != both:
            time.sleep(0.01)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, both)
    """
    proc = _guarded_child(path, body)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == b"changed"
    proc.send_signal(signal.SIGTERM)
    proc.send_signal(signal.SIGINT)
    assert _wait_or_explain(proc) != 0
    assert path.read_bytes() == original


def test_blocking_signals_puts_the_mask_back_when_a_pending_handler_raises(monkeypatch: pytest.MonkeyPatch):
    # signal.pthread_sigmask runs the handlers of signals already received once it has changed
    # the mask; one that raises must not leave SIGINT/SIGTERM blocked for the rest of the process.
    from perfkit.server import _interrupts

    real = signal.pthread_sigmask
    before = real(signal.SIG_BLOCK, ())

    def mask_then_run_a_raising_handler(how: int, sigs: object) -> set[signal.Signals]:
        old = real(how, sigs)  # type: ignore[arg-type]  # passed through as the caller gave them
        if how == signal.SIG_BLOCK and sigs:
            raise KeyboardInterrupt("a signal received before the block")
        return old

    monkeypatch.setattr(_interrupts.signal, "pthread_sigmask", mask_then_run_a_raising_handler)
    with pytest.raises(KeyboardInterrupt), _interrupts.signals_blocked():
        pass
    monkeypatch.undo()
    assert real(signal.SIG_BLOCK, ()) == before


class _nullcontext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *a: object) -> None:
        return None


# -- render_config: the user's file edited, not reprinted ---------------------------------------

CORPUS_COMMENTS = Path(__file__).resolve().parents[2] / "corpus" / "comments"
COMMENTED = sorted(CORPUS_COMMENTS.glob("*.pbtxt")) + sorted(FIXTURES.glob("*/config.pbtxt"))


def _tuner_like_edits(cfg: ModelConfig) -> ModelConfig:
    """What a tuner changes: batch size, the batcher (dynamic, or sequence), instances, a parameter, an accelerator."""
    out = ModelConfig()
    out.CopyFrom(cfg)
    out.max_batch_size = 64 if cfg.max_batch_size else 0
    if cfg.HasField("sequence_batching"):  # its scheduler is the sequence batcher: the tuner edits that one
        out.sequence_batching.max_sequence_idle_microseconds = 2_000_000
    elif out.max_batch_size:
        out.dynamic_batching.max_queue_delay_microseconds = 750
        del out.dynamic_batching.preferred_batch_size[:]
        out.dynamic_batching.preferred_batch_size.extend([32, 64])
    if out.instance_group:
        out.instance_group[0].count = out.instance_group[0].count + 1
    else:
        out.instance_group.add(count=2, kind=out.instance_group.add().KIND_CPU)
        del out.instance_group[0]
    out.parameters["perfkit_test"].string_value = "1"
    out.optimization.execution_accelerators.gpu_execution_accelerator.add(name="tensorrt")
    return out


def _comment_lines(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.strip().startswith("#") or " #" in ln]


@pytest.mark.parametrize("path", COMMENTED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_render_keeps_every_comment_and_parses_to_the_candidate(path: Path):
    text = path.read_text()
    cfg = parse_config(text)
    want = _tuner_like_edits(cfg)
    out = render_config(text, want)
    assert parse_config(out) == want
    kept = _comment_lines(out)
    for line in _comment_lines(text):
        assert line in kept, f"lost comment {line!r}"
    # Untouched fields keep their bytes: every input/output block is still in the text verbatim.
    for line in text.splitlines():
        if "data_type" in line or "dims" in line or line.startswith("name"):
            assert line in out.splitlines()


@pytest.mark.parametrize("path", COMMENTED[:3], ids=lambda p: p.name)
def test_render_of_an_unchanged_config_is_the_original_byte_for_byte(path: Path):
    text = path.read_text()
    assert render_config(text, parse_config(text)) == text


def test_render_changes_only_the_changed_lines_and_keeps_comments_inside_blocks():
    text = textwrap.dedent("""\
        # header
        name: "m"   # trailing comment
        max_batch_size : 8
        dynamic_batching {
          # why 100 us: the client sends in bursts
          max_queue_delay_microseconds: 100
          preferred_batch_size: [ 4, 8 ]
        }
        instance_group [ { count: 1, kind: KIND_CPU } ]  # one is enough?
        parameters: { key: "a" value: { string_value: "x" } }
        parameters: { key: "b" value: { string_value: "y" } }
        # trailer
        """)
    cfg = parse_config(text)
    want = ModelConfig()
    want.CopyFrom(cfg)
    want.max_batch_size = 32
    want.dynamic_batching.max_queue_delay_microseconds = 400
    want.instance_group[0].count = 2
    del want.parameters["a"]
    want.parameters["b"].string_value = "z"
    out = render_config(text, want)
    assert parse_config(out) == want
    assert out == textwrap.dedent("""\
        # header
        name: "m"   # trailing comment
        max_batch_size : 32
        dynamic_batching {
          # why 100 us: the client sends in bursts
          max_queue_delay_microseconds: 400
          preferred_batch_size: [ 4, 8 ]
        }
        instance_group [ { count: 2, kind: KIND_CPU } ]  # one is enough?
        parameters: { key: "b" value: { string_value: "z" } }
        # trailer
        """)


def test_render_removes_a_dropped_block_and_appends_a_new_one():
    text = 'name: "m"\nmax_batch_size: 8\ndynamic_batching { max_queue_delay_microseconds: 100 }  # gone\n# end\n'
    cfg = parse_config(text)
    want = ModelConfig()
    want.CopyFrom(cfg)
    want.ClearField("dynamic_batching")
    want.instance_group.add(count=3)
    out = render_config(text, want)
    assert parse_config(out) == want
    assert out.startswith('name: "m"\nmax_batch_size: 8\n# end\n')
    assert "dynamic_batching" not in out and "count: 3" in out


def test_render_falls_back_loudly_when_the_edit_cannot_be_made(monkeypatch: pytest.MonkeyPatch, caplog):
    from perfkit.server import _render, modelconfig

    def refuse(*_: object) -> str:
        raise _render.RenderError("a shape this editor does not handle")

    monkeypatch.setattr(modelconfig, "render_edits", refuse)
    text = '# kept header\nname: "m"\nmax_batch_size: 8 # lost\n'
    want = parse_config(text)
    want.max_batch_size = 16
    with caplog.at_level("WARNING", logger="perfkit.server.modelconfig"):
        out = render_config(text, want)
    assert parse_config(out) == want and out.startswith("# kept header\n")
    assert "fell back to a full rewrite" in caplog.text and "does not handle" in caplog.text


def test_applied_differences_allow_server_defaults_but_not_other_values():
    written = parse_config('name: "m"\nmax_batch_size: 16\ninstance_group [{ count: 2 }]\n')
    served = parse_config(
        'name: "m"\nmax_batch_size: 16\ninstance_group [{ name: "m_0" count: 2 kind: KIND_CPU }]\nbackend: "python"\n'
    )
    assert applied_differences(written, served) == []
    stale = parse_config('name: "m"\nmax_batch_size: 8\ninstance_group [{ count: 1 kind: KIND_CPU }]\n')
    diffs = applied_differences(written, stale)
    assert any(d.startswith("max_batch_size: wrote 16") for d in diffs)
    assert any(d.startswith("instance_group[0].count: wrote 2") for d in diffs)
    # A field the candidate dropped must be gone from what the server applied.
    previous = parse_config('name: "m"\nmax_batch_size: 16\ndynamic_batching { }\n')
    kept = parse_config('name: "m"\nmax_batch_size: 16\ninstance_group [{ count: 2 }]\ndynamic_batching { }\n')
    assert applied_differences(written, kept, previous) == ["dynamic_batching: removed, server applied {}"]


def test_render_replaces_every_parameter_with_new_ones():
    text = 'name: "m"\nparameters: { key: "a" value: { string_value: "1" } }  # a\nparameters: { key: "b" value: { string_value: "2" } }\nmax_batch_size: 4\n'
    want = parse_config(text)
    want.parameters.clear()
    want.parameters["c"].string_value = "3"
    out = render_config(text, want)
    assert parse_config(out) == want
    assert out.startswith('name: "m"\nparameters {\n  key: "c"') and out.endswith("}\nmax_batch_size: 4\n")
