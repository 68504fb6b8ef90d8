"""An OpenAI-compatible server (Triton's OpenAI frontend, vLLM, SGLang, TGI, llama.cpp): what perfkit asks it.

The level loop asks a server whether it is ready and for its statistics; an OpenAI-compatible
server answers `GET /v1/models` (OpenAI's API reference) and keeps no statistics perfkit can read,
so its `model_stats` fails as an unreachable statistics endpoint does (the level then carries none).
"""

from __future__ import annotations

import socket
from typing import Any

from perfkit.errors import ServerError
from perfkit.server.base import Endpoints, Server


class OpenAIServer(Server):
    """A running OpenAI-compatible server at host:port (perfkit launches none)."""

    mode = "remote"

    def __init__(self, host: str, port: int, *, timeout_s: float = 30.0) -> None:
        super().__init__(Endpoints(host, port, None, None), timeout_s=timeout_s)

    def models(self) -> list[str]:
        """The model ids `/v1/models` lists; raises ServerError when the server is unreachable or answers
        something else."""
        status, payload = self._request("GET", "/v1/models", timeout_s=5.0)
        if status != 200:
            raise ServerError(
                f"OpenAI-compatible server at {self.endpoints.http_url}: GET /v1/models answered {status}",
                hint="check -u (host:port of the server) and that it serves the OpenAI API",
            )
        data = payload.get("data") if isinstance(payload, dict) else None
        return [str(m.get("id")) for m in data or [] if isinstance(m, dict)]

    def is_ready(self) -> bool:
        """True when `/v1/models` answers 200, or when it does not answer in time on a port that takes
        connections: a server that serves one request at a time can hold every route behind the
        generation in flight (llama-cpp-python's server takes one lock for each, /v1/models included),
        so under queued work its probe waits; busy is not gone. False on any other error."""
        try:
            status, _ = self._request("GET", "/v1/models", timeout_s=2.0)
        except ServerError as err:
            reason = getattr(err.__cause__, "reason", err.__cause__)
            return isinstance(reason, TimeoutError) and self._accepts_connections()
        return status == 200

    def _accepts_connections(self) -> bool:
        try:
            with socket.create_connection((self.endpoints.host, self.endpoints.http_port), timeout=2.0):
                return True
        except OSError:
            return False

    def version(self) -> str:
        """What the server says it is: an OpenAI-compatible server has no version endpoint."""
        return "openai-compatible"

    def model_stats(self, name: str = "") -> dict[str, Any]:
        """Raises ServerError: an OpenAI-compatible server keeps no statistics perfkit reads."""
        raise ServerError("an OpenAI-compatible server has no Triton statistics endpoint")

    def model_config(self, name: str) -> dict[str, Any]:
        """The model as the record keeps it: its name only (the server shows no configuration)."""
        return {"name": name, "backend": "openai"}
