"""How a candidate config reaches the server and how the user's configs are put back: the
route. The file route (the only one today) rewrites each model's config.pbtxt, reloads it
(explicit model control) and verifies what the server applied, under a guard that puts every
file back byte for byte whatever ends the search. Another route (loading a model with a config
override through Triton's load API, writing no file) implements the same two methods.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

from perfkit.server.base import Server
from perfkit.server.modelconfig import ConfigGuard, apply_config
from perfkit.tuner._repo_guard import RepoGuard


class ConfigRoute(Protocol):
    """The way candidate configs are served and the originals put back."""

    name: str  # recorded in the tune record: "file" or "api"

    def serve(self, server: Server, model: str, config_path: Path, text: str) -> None:
        """Make the server serve `text` as `model`'s config (config_path: where the repository
        holds it). Raises ModelLoadError (the server refused it), CandidateNotAppliedError (the
        server serves something else) or ConfigError."""
        ...

    def guard(
        self, server: Server, paths: Mapping[str, Path], *, reload_last: Sequence[str] = ()
    ) -> AbstractContextManager[Any]:
        """A block that leaves every model of `paths` served with its original config, whatever
        ends it (an exception, Ctrl-C, SIGTERM); `reload_last` are reloaded after the others
        (an ensemble after its steps)."""
        ...

    def restore_hint(self, server: Server, models: Sequence[str]) -> str:
        """What the user should do when the server does not serve the originals of `models` again."""
        ...


class FileRoute:
    """Rewrite config.pbtxt in the model repository and reload (the server must read that folder)."""

    name = "file"

    def serve(self, server: Server, model: str, config_path: Path, text: str) -> None:
        """Write, reload, verify (see perfkit.server.modelconfig.apply_config)."""
        apply_config(server, model, config_path, text)

    def guard(
        self, server: Server, paths: Mapping[str, Path], *, reload_last: Sequence[str] = ()
    ) -> AbstractContextManager[Any]:
        """One ConfigGuard for a single model, one RepoGuard holding every file for several."""
        if len(paths) == 1 and not reload_last:
            model, path = next(iter(paths.items()))
            return ConfigGuard(path, server, model)
        return RepoGuard(paths, server, reload_last=reload_last)

    def restore_hint(self, server: Server, models: Sequence[str]) -> str:
        """The files are back: the server must be reading them."""
        return "check the server log; --model-repository must be the folder the server reads"
