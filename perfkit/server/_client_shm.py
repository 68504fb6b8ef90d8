"""Client shared memory and a server's consent to it.

Triton 2.69.0 (container 26.05) and later start with client shared memory disabled: every
system or CUDA shared-memory registration is refused unless the server was started with
`--allow-client-shm=true` (server PR #8721: `src/command_line_parser.cc` declares the flag,
default false; `docs/protocol/extension_shared_memory.md`). Older servers accept registrations
without it, and refuse the flag itself as an unknown option at start-up, so a launcher passes it
only to a server that knows it.
"""

from __future__ import annotations

import re

from perfkit.errors import ServerRefusedError

ALLOW_CLIENT_SHM_FLAG = "--allow-client-shm=true"
# The server's refusal, word for word (`src/common.h`, kClientShmDisabledErrorStr): the error body
# of an HTTP registration (status 501) and the status message of a gRPC one (UNIMPLEMENTED).
CLIENT_SHM_DISABLED = "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."
# Its first sentence is what identifies it (Triton's own tests match it: qa/L0_shared_memory).
_REFUSAL_MARK = "client shared memory is disabled"
# The first release that has the flag: server version and container (NGC image tag) version.
FIRST_SERVER_VERSION = (2, 69, 0)
FIRST_CONTAINER_VERSION = (26, 5)

_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")
_CONTAINER_TAG = re.compile(r"^(\d{2})\.(\d{2})(?:\D|$)")


def consent_refusal(message: object, *, region: str) -> ServerRefusedError | None:
    """The error for a registration the server refused because it was not started with
    `--allow-client-shm=true`; None for any other message.

    `message` is the server's error text: an HTTP error body's `error`, a gRPC status message, or
    tritonclient's `InferenceServerException` over either protocol (its message() is the server's
    text; its str() puts the status in front). perfkit itself registers regions through the HTTP
    admin API, whatever protocol carries the load.
    """
    server_text = getattr(message, "message", None)
    text = " ".join(str(server_text() if callable(server_text) else message).split())
    if _REFUSAL_MARK not in text.lower():
        return None
    return ServerRefusedError(
        f"the server refused shared memory {region!r}: {text}",
        hint=f"start it with {ALLOW_CLIENT_SHM_FLAG} (Triton 2.69.0 / 26.05 and later), or drop --shared-memory",
    )


def _version_tuple(text: str) -> tuple[int, int, int] | None:
    m = _VERSION.search(text)
    if m is None:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def knows_allow_client_shm(
    *, server_version: str | None = None, image: str | None = None, help_text: str | None = None
) -> bool:
    """Whether a server takes `--allow-client-shm`: by its `tritonserver --help` text where given,
    else by its server version (>= 2.69.0), else by a Docker image's tag (NGC's YY.MM >= 26.05).

    False when none of them says so (an unknown version, a tag like `latest`): a server that does
    not know the flag refuses to start with it, while one that needs it refuses shared memory with
    a message naming it.
    """
    if help_text is not None:
        return "--allow-client-shm" in help_text
    if server_version:
        version = _version_tuple(server_version)
        if version is not None:
            return version >= FIRST_SERVER_VERSION
    if image:
        tag = image.rsplit("/", 1)[-1].partition("@")[0]
        if ":" in tag:
            m = _CONTAINER_TAG.match(tag.split(":", 1)[1])
            if m is not None:
                return (int(m.group(1)), int(m.group(2))) >= FIRST_CONTAINER_VERSION
    return False
