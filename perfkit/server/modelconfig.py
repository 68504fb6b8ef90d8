"""config.pbtxt: the one module that reads, writes, hashes and guards Triton model configs.

Parsing and printing go through the protobuf definitions tritonclient ships
(ModelConfig + google.protobuf.text_format), so every field Triton knows round-trips;
perfkit has no config parser of its own.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from google.protobuf import json_format, text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from perfkit.errors import ConfigError, PerfkitError
from perfkit.server.base import Server

__all__ = [
    "ConfigGuard",
    "ModelConfig",
    "config_from_dict",
    "config_sha256",
    "config_to_dict",
    "format_config",
    "parse_config",
    "read_config",
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


def config_sha256(cfg: ModelConfig) -> str:
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


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


class ConfigGuard:
    """Snapshots a model's config.pbtxt and puts it back byte for byte on leaving the block,
    whatever ends it (normal end, exception, Ctrl-C, SIGTERM), then reloads the model.

    While active on the main thread it turns SIGTERM into KeyboardInterrupt (unless a
    handler is already installed), so a plain `kill` also restores. The restore itself
    runs with SIGINT/SIGTERM blocked so a second Ctrl-C cannot leave a half-written file.
    """

    def __init__(self, config_path: Path, server: Server | None = None, model: str | None = None) -> None:
        self.path = Path(config_path)
        self.server = server
        self.model = model
        self.original: bytes = b""
        self.restore_error: str | None = None
        self._old_sigterm: Any = None

    def __enter__(self) -> ConfigGuard:
        try:
            self.original = self.path.read_bytes()
        except OSError as err:
            raise ConfigError(f"{self.path}: cannot read model config: {err.strerror}") from None
        if threading.current_thread() is threading.main_thread():
            current = signal.getsignal(signal.SIGTERM)
            if current in (signal.SIG_DFL, None):
                self._old_sigterm = current
                signal.signal(signal.SIGTERM, _raise_interrupt)
        return self

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
        with _signals_blocked():
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
                        print(
                            f"perfkit: warning: {self.path} restored, reload failed: {self.restore_error}",
                            file=sys.stderr,
                        )
        finally:
            if self._old_sigterm is not None:
                signal.signal(signal.SIGTERM, self._old_sigterm)
                self._old_sigterm = None


@contextlib.contextmanager
def _signals_blocked() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    sigs = {signal.SIGINT, signal.SIGTERM}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
