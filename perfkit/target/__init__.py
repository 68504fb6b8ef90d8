"""Target stage: the Triton server perfkit talks to.

Launches one (local binary or docker) or attaches to a remote one, and exposes a
small admin API (readiness, model load/unload, applied config, statistics).
"""

from perfkit.target.local import LocalLaunch, find_tritonserver, launch_local
from perfkit.target.remote import attach_remote
from perfkit.target.server import Endpoints, Server

__all__ = [
    "Endpoints",
    "LocalLaunch",
    "Server",
    "attach_remote",
    "find_tritonserver",
    "launch_local",
]
