"""`--stop-rule`: which rule ends a level, perfkit's precision or perf_analyzer's window stability.

Unless given, a level ends by perf_analyzer's rule when one of perf_analyzer's stability flags
(-s/--stability-percentage, -r/--max-trials, -p/--measurement-interval) is on the command line: a
command line written for perf_analyzer then ends its levels as perf_analyzer would (and as fast). Without
them, perfkit's precision rule (the default of `perfkit profile`).
"""

from __future__ import annotations

from typing import Any, Literal

import click
from click.core import ParameterSource

# the parameters of perf_analyzer's stability flags, as `perfkit profile` names them
PA_STABILITY_PARAMS = ("stability_percentage", "max_trials", "measurement_interval")

stop_rule_option = click.option(
    "--stop-rule",
    type=click.Choice(["precision", "stability"]),
    default=None,
    help="How a level ends: precision (perfkit's: throughput's and latency's ~95%% CIs within -s) or stability"
    " (perf_analyzer's: the last 3 windows' throughput and latency within -s of each other). Default: stability"
    " when -s, -r or -p is given, else precision.",
)


def stop_rule_of(kw: dict[str, Any]) -> Literal["precision", "stability"]:
    """The stop rule the command line asks for (pops kw["stop_rule"]): given, or by perf_analyzer's flags."""
    asked = kw.pop("stop_rule", None)
    if asked in ("precision", "stability"):
        return asked
    ctx = click.get_current_context(silent=True)
    if ctx is not None and any(ctx.get_parameter_source(p) is ParameterSource.COMMANDLINE for p in PA_STABILITY_PARAMS):
        return "stability"
    return "precision"
