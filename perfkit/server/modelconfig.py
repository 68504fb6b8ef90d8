"""config.pbtxt: the one module that reads, writes, hashes and guards Triton model configs.

Parsing and printing go through the protobuf definitions tritonclient ships
(ModelConfig + google.protobuf.text_format), so every field Triton knows round-trips;
perfkit has no config parser of its own.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

from google.protobuf import json_format, text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from perfkit.errors import CandidateNotAppliedError, ConfigError, ModelNotFoundError, PerfkitError
from perfkit.server._interrupts import Interrupts, holds_signals, signals_blocked
from perfkit.server._render import RenderError, render_edits
from perfkit.server.base import Server

log = logging.getLogger(__name__)

__all__ = [
    "ConfigGuard",
    "holds_signals",
    "ModelConfig",
    "apply_config",
    "applied_differences",
    "config_from_dict",
    "config_pbtxt_sha256",
    "config_to_dict",
    "format_config",
    "parse_config",
    "read_config",
    "render_config",
    "write_config",
    "write_bytes_atomic",
]


def parse_config(text: str, *, source: str = "<config>") -> ModelConfig:
    """Parse config.pbtxt text; raises ConfigError naming source, line and what is wrong."""
    cfg = ModelConfig()
    try:
        text_format.Parse(text, cfg)
    except text_format.ParseError as err:
        line, col = err.GetLine(), err.GetColumn()
        where = f"{source}:{line}:{col}" if line is not None else source
        # The library prefixes "line:col : " itself; keep only what is wrong.
        what = str(err)
        prefix = f"{line}:{col} : "
        what = what.removeprefix(prefix)
        raise ConfigError(f"{where}: invalid model config: {what}", hint="fix the config.pbtxt") from None
    return cfg


def read_config(path: Path) -> ModelConfig:
    """Read and parse a config.pbtxt; raises ConfigError (missing, unreadable or invalid)."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such model config", hint="check the model repository and -m") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    except OSError as err:
        raise ConfigError(f"{path}: cannot read model config: {err.strerror}") from None
    return parse_config(text, source=str(path))


def format_config(cfg: ModelConfig) -> str:
    """The config as config.pbtxt text (protobuf text format)."""
    return str(text_format.MessageToString(cfg))


@functools.lru_cache(maxsize=16)
def _parsed_original(original_text: str) -> ModelConfig:
    """The original config parsed once: a search renders every candidate from the same text
    (text-format parsing is pure Python and dominated the cost of a dry run's preview)."""
    return parse_config(original_text, source="original config")


def render_config(original_text: str, cfg: ModelConfig) -> str:
    """cfg as config.pbtxt text made by editing original_text: only the fields whose values
    differ change; comments, order and formatting of everything else are kept byte for byte.

    The result always parses to exactly cfg: when the text has a shape the editor does not
    handle (or the edit would not re-parse to cfg) it falls back to format_config(cfg) after
    the original's leading comment block, and logs a warning. Raises ConfigError when
    original_text itself does not parse.
    """
    original = ModelConfig()
    original.CopyFrom(_parsed_original(original_text))  # a copy: the cached message stays as parsed
    if original == cfg:
        return original_text
    try:
        text = render_edits(original_text, original, cfg)
        if parse_config(text, source="edited config") == cfg:
            return text
        why = "the edited text does not parse back to the candidate"
    except (RenderError, ConfigError, text_format.ParseError) as err:
        why = str(err)
    log.warning("config.pbtxt edit fell back to a full rewrite (comments inside may be lost): %s", why)
    header = []
    for line in original_text.splitlines(keepends=True):
        if not line.lstrip().startswith("#"):
            break
        header.append(line)
    return "".join(header) + format_config(cfg)


def config_to_dict(cfg: ModelConfig) -> dict[str, Any]:
    """The config as the JSON dict Triton's load API takes (proto field names)."""
    return dict(json_format.MessageToDict(cfg, preserving_proto_field_name=True))


def config_from_dict(data: dict[str, Any], *, source: str = "<config JSON>") -> ModelConfig:
    """A ModelConfig from JSON (e.g. GET /v2/models/M/config); fields unknown to this
    protobuf version are ignored. Raises ConfigError when the JSON does not fit the schema."""
    cfg = ModelConfig()
    try:
        json_format.ParseDict(data, cfg, ignore_unknown_fields=True)
    except json_format.ParseError as err:
        raise ConfigError(f"{source}: not a model config: {err}") from None
    return cfg


def config_pbtxt_sha256(cfg: ModelConfig) -> str:
    """A stable sha256 of a config's content: canonical JSON, independent of field order,
    whitespace and comments in the file."""
    canonical = json.dumps(config_to_dict(cfg), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Replace path with data atomically: temp file in the same folder, fsync, os.replace,
    fsync of the folder. Keeps the file's permission bits. Raises ConfigError."""
    path = Path(path)
    try:
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o644
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as err:
        raise ConfigError(f"{path}: cannot write: {err.strerror or err}") from None


def write_config(path: Path, cfg: ModelConfig | str) -> str:
    """Write a config (message or text) atomically; returns the text written. Raises ConfigError."""
    text = cfg if isinstance(cfg, str) else format_config(cfg)
    write_bytes_atomic(Path(path), text.encode("utf-8"))
    return text


def _subset_diffs(want: Any, got: Any, where: str) -> list[str]:
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return [f"{where}: wrote {want!r}, server applied {got!r}"]
        out: list[str] = []
        for key, value in want.items():
            out.extend(_subset_diffs(value, got.get(key), f"{where}.{key}" if where else key))
        return out
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return [f"{where}: wrote {want!r}, server applied {got!r}"]
        return [d for i, (w, g) in enumerate(zip(want, got, strict=True)) for d in _subset_diffs(w, g, f"{where}[{i}]")]
    return [] if want == got else [f"{where}: wrote {want!r}, server applied {got!r}"]


def applied_differences(candidate: ModelConfig, applied: ModelConfig, previous: ModelConfig | None = None) -> list[str]:
    """How the config a server applied differs from the candidate written: every field the
    candidate sets must hold the same value (the server may add defaults), and a top-level
    field the candidate dropped from `previous` must be gone. Empty when it was applied."""
    want, got = config_to_dict(candidate), config_to_dict(applied)
    diffs = _subset_diffs(want, got, "")
    if previous is not None:
        for key in config_to_dict(previous):
            if key not in want and key in got:
                diffs.append(f"{key}: removed, server applied {got[key]!r}")
    return diffs


def apply_config(server: Server, model: str, config_path: Path, candidate: str | ModelConfig) -> ModelConfig:
    """The one way to put a candidate config on a running server: write it atomically over
    config_path (fsync, file mode kept), reload the model, and verify that the config the
    server applied is the candidate. Returns the applied config.

    Call it inside a ConfigGuard, which puts the original back whatever happens. Raises
    ConfigError (candidate text invalid or file not writable), ModelLoadError (the server
    refused it), CandidateNotAppliedError (the server serves something else).
    """
    config_path = Path(config_path)
    text = candidate if isinstance(candidate, str) else format_config(candidate)
    cfg = parse_config(text, source="candidate config") if isinstance(candidate, str) else candidate
    try:
        previous: ModelConfig | None = read_config(config_path)
    except ConfigError:
        previous = None
    write_bytes_atomic(config_path, text.encode("utf-8"))
    server.load_model(model)
    try:
        applied = config_from_dict(server.model_config(model), source=f"applied config of {model}")
    except ModelNotFoundError as err:
        raise CandidateNotAppliedError(f"{model!r}: config not readable after load: {err.message}") from None
    diffs = applied_differences(cfg, applied, previous)
    if diffs:
        shown = "; ".join(diffs[:5]) + (f" (+{len(diffs) - 5} more)" if len(diffs) > 5 else "")
        raise CandidateNotAppliedError(
            f"the server did not apply the candidate config of {model!r}: {shown}",
            hint=f"check that the server reads the model repository holding {config_path}",
        )
    return applied


class ConfigGuard:
    """Snapshots a model's config.pbtxt and puts it back byte for byte on leaving the block,
    whatever ends it (normal end, exception, Ctrl-C, SIGTERM), then reloads the model.

    While active on the main thread it turns SIGTERM into KeyboardInterrupt (unless a
    handler is already installed), so a plain `kill` also restores, and it takes Python's
    default Ctrl-C handler: the first signal ends the block, and a signal that follows it
    (Ctrl-C twice, SIGTERM and Ctrl-C together) waits until the file is back instead of
    cutting the restore short (see _interrupts). The write itself runs with SIGINT/SIGTERM
    blocked, whoever handles them, so no signal can leave a half-written file.
    """

    def __init__(self, config_path: Path, server: Server | None = None, model: str | None = None) -> None:
        self.path = Path(config_path)
        self.server = server
        self.model = model
        self.original: bytes = b""
        self.restore_error: str | None = None
        self._interrupts: Interrupts | None = None

    def __enter__(self) -> ConfigGuard:
        try:
            self.original = self.path.read_bytes()
        except OSError as err:
            raise ConfigError(f"{self.path}: cannot read model config: {err.strerror}") from None
        interrupts = Interrupts()
        if interrupts.install():
            self._interrupts = interrupts
        return self

    def apply(self, candidate: str | ModelConfig) -> ModelConfig:
        """Put a candidate on the server under this guard (see apply_config); returns the
        config the server applied. Raises ConfigError, ModelLoadError, CandidateNotAppliedError."""
        if self.server is None or not self.model:
            raise PerfkitError("ConfigGuard.apply needs the guard's server and model")
        return apply_config(self.server, self.model, self.path, candidate)

    @property
    def original_text(self) -> str:
        return self.original.decode("utf-8", errors="replace")

    def changed(self) -> bool:
        """Whether the file on disk differs from the snapshot now."""
        try:
            return self.path.read_bytes() != self.original
        except OSError:
            return True

    def restore_file(self) -> bool:
        """Put the snapshot back if the file differs; returns whether it wrote."""
        with signals_blocked():
            if not self.changed():
                return False
            write_bytes_atomic(self.path, self.original)
            return True

    def restore(self, *, reload: bool = True) -> None:
        """Restore the file, then reload the model with it; a failed reload is kept in
        restore_error (the file is back either way). Raises ConfigError if the file can't be written."""
        self.restore_file()
        if reload and self.server is not None and self.model:
            try:
                self.server.load_model(self.model)
                self.restore_error = None
            except PerfkitError as err:
                self.restore_error = err.one_line()
            except KeyboardInterrupt:
                self.restore_error = "interrupted while reloading the original config"

    @holds_signals
    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            wrote = self.restore_file()
            # Reload only when the server may hold something else than the original: a write
            # happened, or we leave on an error mid-trial (the file may have been restored already).
            if self.server is not None and self.model and (wrote or exc_type is not None):
                server_alive = self.server.alive()
                if server_alive:
                    self.restore(reload=True)
                    if self.restore_error:
                        log.warning("%s restored, reload failed: %s", self.path, self.restore_error)
        finally:
            interrupts, self._interrupts = self._interrupts, None
            if interrupts is not None:
                interrupts.uninstall()  # raises KeyboardInterrupt for a signal held while restoring
