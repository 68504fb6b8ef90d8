"""Server stage: the Triton server perfkit talks to.

Launches one (local binary or docker) or attaches to a remote one, and exposes a
small admin API (readiness, model load/unload, applied config, statistics).
"""

from perfkit.server.base import Endpoints, Server
from perfkit.server.local import LocalLaunch, find_tritonserver, launch_local
from perfkit.server.remote import attach_remote

__all__ = [
    "Endpoints",
    "LocalLaunch",
    "Server",
    "attach_remote",
    "find_tritonserver",
    "launch_local",
]
