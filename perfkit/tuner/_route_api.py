"""The API route: each candidate config is served by loading the model with Triton's config
override (the model repository extension's load request), nothing is written on any disk; the
guard puts every model back by loading it without an override (the repository's own config,
which perfkit never touched) on every ending. For servers whose repository perfkit cannot write
(a container's volume, object storage, a read-only mount); the server must run with
--model-control-mode=explicit. The server-side work is perfkit.server.api_route's.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from typing import Any

from perfkit.errors import ConfigError, PerfkitError, ServerError
from perfkit.server.api_route import ApiConfigRoute, check_explicit_model_control, served_config, served_config_text
from perfkit.server.base import Server
from perfkit.server.modelconfig import read_config

log = logging.getLogger(__name__)


class ApiRoute:
    """Serve candidates as config overrides through the server's API; never write a file.

    `config_path` is only named in messages (it may not exist). Within `guard`, each model's
    original is the config the server served on entering the block.
    """

    name = "api"

    def __init__(self) -> None:
        self._active: dict[str, ApiConfigRoute] = {}

    def serve(self, server: Server, model: str, config_path: Path, text: str) -> None:
        """Load model with text as its config override and verify the server applied it.
        Raises ConfigError, ModelLoadError, CandidateNotAppliedError (as ApiConfigRoute.apply)."""
        route = self._active.get(model)
        if route is None:  # outside a guard: compared with what the server serves now
            route = ApiConfigRoute(server, model)
            route.original = served_config(server, model)
        # A field the candidate dropped must be gone from what the server applies: dropped from the
        # config the candidate was made from, the repository's file where readable (the server fills
        # in defaults the file never had), else the served config.
        served = route.original
        try:
            route.original = read_config(config_path)
        except (ConfigError, OSError):
            route.original = served
        try:
            route.apply(text)
        finally:
            route.original = served

    def guard(
        self, server: Server, paths: Mapping[str, Path], *, reload_last: Sequence[str] = ()
    ) -> AbstractContextManager[Any]:
        """A block after which every model of `paths` is loaded without an override again (in
        reverse order of entry, `reload_last` last) and checked to serve its original; refuses,
        on entry, a server not in explicit model control mode (ServerError, exit 4)."""
        return self._guarded(server, [m for m in paths if m not in reload_last], list(reload_last))

    @contextmanager
    def _guarded(self, server: Server, models: list[str], last: list[str]) -> Iterator[None]:
        check_explicit_model_control(server)
        routes: list[ApiConfigRoute] = []
        with ExitStack() as stack:
            stack.callback(self._reload, server, last)  # after every model is back: the ensembles see their steps
            for model in (*last, *models):  # entered first, left last
                routes.append(stack.enter_context(ApiConfigRoute(server, model)))
                # A guard within a guard (the calibration's within the search's) hands the model back
                # to the outer one on leaving, which then serves the trials and puts the original back.
                stack.callback(self._activate, model, self._active.get(model))
                self._active[model] = routes[-1]
            yield
        failed = [f"{r.model}: {r.restore_error}" for r in routes if r.restore_error]
        if failed:  # reached only when the block ended normally (an exception in flight is not hidden)
            raise ServerError(
                "the original config was not restored on the server: " + "; ".join(failed),
                hint=self.restore_hint(server, [r.model for r in routes if r.restore_error]),
            )

    def _activate(self, model: str, route: ApiConfigRoute | None) -> None:
        """Serve model through `route` from now on (None: outside any guard)."""
        if route is None:
            self._active.pop(model, None)
        else:
            self._active[model] = route

    def restore_hint(self, server: Server, models: Sequence[str]) -> str:
        """Load each model again without an override (the server then reads its own config from its
        repository), as a command the user can run, then the server log."""
        url = server.endpoints.http_url.rstrip("/")
        loads = "; ".join(f"curl -X POST {url}/v2/repository/models/{m}/load" for m in models)
        return f"load the model again without a config override ({loads}) and check the server log"

    @staticmethod
    def _reload(server: Server, models: Sequence[str]) -> None:
        """Load each model again (without an override) where it was never sent one: an ensemble."""
        for model in models:
            try:
                server.load_model(model)
            except PerfkitError as err:
                log.warning("%s: not reloaded after its steps: %s", model, err.one_line())

    def original_text(self, server: Server, model: str) -> str:
        """model's config as the server serves it, as config.pbtxt text (where no repository is readable)."""
        return served_config_text(server, model)
