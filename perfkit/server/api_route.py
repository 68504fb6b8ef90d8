"""Apply and restore a model's config through Triton's API alone: nothing is written on any disk.

Triton's model repository extension takes a whole model config with a load request
(`POST /v2/repository/models/M/load` with `{"parameters": {"config": "<JSON>"}}`, the model
configuration override), and `GET /v2/models/M/config` returns the config the server runs. A server
in explicit model control mode can so be given each candidate config and, at the end, its own
again: a load without an override reads the model's config from the repository, which perfkit
never touched. This serves servers whose repository perfkit cannot write (a container's volume,
object storage, a read-only mount).

`ApiConfigRoute` is the route's whole surface, shaped like the file route (`modelconfig.ConfigGuard`):
enter (read the original, check the server lets clients load models), `apply(candidate)` (load with
the override, verify what the server applied), leave (load without an override, whatever ends the
block: normal end, an exception, Ctrl-C, SIGTERM). `served_config_text` and `best_config_text`
render configs back to config.pbtxt text through `modelconfig`, the one module that knows pbtxt.
"""

from __future__ import annotations

import logging
import uuid
from pathlib import Path
from types import TracebackType

from perfkit.errors import CandidateNotAppliedError, ConfigError, ModelLoadError, PerfkitError
from perfkit.server._interrupts import Interrupts, holds_signals
from perfkit.server.base import Server
from perfkit.server.modelconfig import (
    ModelConfig,
    applied_differences,
    config_from_dict,
    config_to_dict,
    format_config,
    parse_config,
    render_config,
)

log = logging.getLogger(__name__)

__all__ = ["ApiConfigRoute", "best_config_text", "check_explicit_model_control", "served_config", "served_config_text"]


def check_explicit_model_control(server: Server) -> None:
    """Refuse a server that does not let clients load models (not in explicit model control mode).

    Probes with an unload of a model name no repository holds: a server in explicit mode answers it
    (nothing to unload), any other refuses every load and unload with the same words, which
    `Server.unload_model` turns into a ServerError (exit 4). Nothing on the server changes.
    """
    probe = f"perfkit-probe-{uuid.uuid4().hex[:12]}"
    try:
        server.unload_model(probe)
    except ModelLoadError:
        pass  # an explicit-mode server may refuse to unload an unknown model: it still lets clients load


def served_config(server: Server, model: str) -> ModelConfig:
    """The config the server runs for model (GET /v2/models/M/config); raises ModelNotFoundError, ConfigError."""
    return config_from_dict(
        server.model_config(model), source=f"config {model!r} served by {server.endpoints.http_url}"
    )


def served_config_text(server: Server, model: str) -> str:
    """The served config as config.pbtxt text (every field the server reports, its defaults included)."""
    return format_config(served_config(server, model))


def best_config_text(cfg: ModelConfig, repository_config: Path | None) -> tuple[str, str]:
    """cfg as config.pbtxt text, and where the text came from: "repository" when the model's own
    config.pbtxt is readable (cfg is rendered as edits of that text, comments and order kept), "served"
    otherwise (the served config's fields, in protobuf order)."""
    if repository_config is not None:
        try:
            original = repository_config.read_bytes().decode("utf-8")
            parse_config(original, source=str(repository_config))
        except (OSError, UnicodeDecodeError, ConfigError) as err:
            log.info("%s not usable for rendering (%s): rendering from the served config", repository_config, err)
        else:
            return render_config(original, cfg), "repository"
    return format_config(cfg), "served"


class ApiConfigRoute:
    """A model's config applied through the server's API and put back on leaving the block.

    Entering reads the original (the served config) and refuses, with a ServerError (exit 4), a server
    not in explicit model control mode. `apply` loads a candidate as a config override and verifies it.
    Leaving loads the model without an override (the repository's own config) whenever a candidate was
    sent, on every ending, and checks the server serves the original again; a restore that fails is
    logged and kept in `restore_error`. While active on the main thread SIGTERM ends the block like
    Ctrl-C, and a second signal waits until the restore is done (as ConfigGuard).
    """

    route = "api"

    def __init__(self, server: Server, model: str) -> None:
        self.server = server
        self.model = model
        self.original: ModelConfig = ModelConfig()
        self.restore_error: str | None = None
        self._sent = False
        self._interrupts: Interrupts | None = None

    def __enter__(self) -> ApiConfigRoute:
        check_explicit_model_control(self.server)
        self.original = served_config(self.server, self.model)
        interrupts = Interrupts()
        if interrupts.install():
            self._interrupts = interrupts
        return self

    @property
    def original_text(self) -> str:
        """The original served config as config.pbtxt text."""
        return format_config(self.original)

    def apply(self, candidate: str | ModelConfig) -> ModelConfig:
        """Load the model with candidate as its config override; returns the config the server applied.

        Raises ConfigError (candidate text invalid), ModelLoadError (the server refused it; Triton then
        keeps serving what it served), CandidateNotAppliedError (the server serves something else).
        """
        cfg = parse_config(candidate, source="candidate config") if isinstance(candidate, str) else candidate
        body = config_to_dict(cfg)
        body.setdefault("name", self.model)
        self._sent = True
        self.server.load_model(self.model, config=body)
        applied = served_config(self.server, self.model)
        diffs = applied_differences(cfg, applied, self.original)
        if diffs:
            shown = "; ".join(diffs[:5]) + (f" (+{len(diffs) - 5} more)" if len(diffs) > 5 else "")
            raise CandidateNotAppliedError(f"the server did not apply the candidate config of {self.model!r}: {shown}")
        return applied

    def restore(self) -> None:
        """Load the model without an override and check the original is served again; a failure is kept in
        restore_error (and logged), not raised: it must not hide what ended the block.

        Where the repository's own config is not what the server served on entry (someone had loaded the
        model with an override before), the original is loaded back as an override, and logged so."""
        try:
            self.server.load_model(self.model)
            if self._differences():
                # Triton keeps serving an override when the model's files did not change (seen with 2.51):
                # unloaded first, the model is loaded afresh from the repository
                self.server.unload_model(self.model)
                self.server.load_model(self.model)
            if self._differences():
                log.info(
                    "%s: the repository's config is not the one served on entry: loaded back as an override", self.model
                )
                self.server.load_model(self.model, config=config_to_dict(self.original))
            diffs = self._differences()
            self.restore_error = (
                None if not diffs else "the server serves another config than the original: " + "; ".join(diffs[:3])
            )
        except PerfkitError as err:
            self.restore_error = err.one_line()
        except KeyboardInterrupt:
            self.restore_error = "interrupted while reloading the original config"
        if self.restore_error:
            log.warning("%s: original config not restored: %s", self.model, self.restore_error)

    def _differences(self) -> list[str]:
        """How the served config differs from the original, both ways (a field the original lacks counts)."""
        now = served_config(self.server, self.model)
        return applied_differences(self.original, now, previous=now)

    @holds_signals
    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if self._sent and self.server.alive():
                self.restore()
        finally:
            interrupts, self._interrupts = self._interrupts, None
            if interrupts is not None:
                interrupts.uninstall()  # raises KeyboardInterrupt for a signal held while restoring
