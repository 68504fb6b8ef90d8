"""Distributed stage: load workers on a Ray cluster, against one server or a fleet, merged exactly.

Public API:
- profile_distributed(servers, spec, address=..., client_hosts=...) -> RunRecord
- profile_fleet(server, spec, address=..., hosts=..., more_urls=...) -> RunRecord (`profile --ray`)
- connect(address) -> the ray module, joined to the cluster
- measure_offset / ClockOffset: a worker clock's offset to the coordinator's
- merge_summaries / merge_counts: the exact merge of workers' digests

Ray is an optional dependency (``pip install "perfkit[distributed]"``): it is imported only
when a distributed run starts.
"""

from perfkit.distributed._clock import ClockOffset, measure_offset
from perfkit.distributed._cluster import alive_nodes, connect
from perfkit.distributed._digest import (
    LevelDigest,
    MergedWindows,
    WindowDigest,
    level_digest,
    merge_counts,
    merge_summaries,
    window_digest,
)
from perfkit.distributed._fleet import attach_fleet, fleet_hosts, profile_fleet
from perfkit.distributed._run import profile_distributed

__all__ = [
    "attach_fleet",
    "fleet_hosts",
    "profile_fleet",
    "ClockOffset",
    "LevelDigest",
    "MergedWindows",
    "WindowDigest",
    "alive_nodes",
    "connect",
    "level_digest",
    "measure_offset",
    "merge_counts",
    "merge_summaries",
    "profile_distributed",
    "window_digest",
]
