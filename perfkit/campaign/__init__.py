"""Campaign stage: a sweep file (TOML) drives a whole campaign.

load_sweep() reads and checks a sweep file; run_campaign() launches the server, profiles
every model, optionally tunes, saves the run records to the store and an output
folder, writes the report, and gates against a baseline. Progress reaches the caller as CampaignProgress events
(on_progress) and the "perfkit.campaign" logger; the library prints nothing.
"""

from perfkit.campaign.run import (
    CampaignProgress,
    CampaignResult,
    default_output_dir,
    gate_campaign,
    run_campaign,
    server_options,
)
from perfkit.campaign.sweep import GatePlan, ModelPlan, Sweep, load_sweep, parse_sweep

__all__ = [
    "CampaignProgress",
    "CampaignResult",
    "GatePlan",
    "ModelPlan",
    "Sweep",
    "default_output_dir",
    "gate_campaign",
    "load_sweep",
    "parse_sweep",
    "run_campaign",
    "server_options",
]
