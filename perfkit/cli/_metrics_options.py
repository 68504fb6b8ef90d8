"""--metrics-port/--metrics-host/--metrics-linger for profile, tune and run: live Prometheus metrics.

One decorator adds the options and runs the command with an exporter (perfkit.live) serving while
it runs; the commands' progress printers hand each event to publish(), which does nothing when
no exporter is serving.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import click

_active: Any = None  # the LiveMetrics serving now, if any (one command runs per process)


def publish(event: object) -> None:
    """Give a progress event (or a finished run record) to the exporter, when one is serving."""
    if _active is not None:
        _active.handle(event)


def metrics_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Add the live-metrics options to a click command and serve metrics while it runs."""

    @functools.wraps(fn)
    def wrapper(*args: Any, metrics_port: int | None, metrics_host: str, metrics_linger: float, **kwargs: Any) -> Any:
        global _active
        if metrics_port is None:
            return fn(*args, **kwargs)
        from perfkit.live import LiveMetrics  # noqa: PLC0415  (prometheus_client only when asked for)

        ctx = click.get_current_context()
        model = kwargs.get("model") or ""
        if isinstance(model, (tuple, list)):  # profile's -m repeats (a traffic mix): one label for the run
            model = "+".join(str(m) for m in model)
        exporter = LiveMetrics(model=str(model), command=ctx.info_name or "")
        port = exporter.serve(metrics_host, metrics_port)
        click.echo(f"perfkit: metrics on http://{metrics_host}:{port}/metrics", err=True)
        _active = exporter
        try:
            return fn(*args, **kwargs)
        finally:
            _active = None
            try:
                if metrics_linger > 0:
                    # the last values stay up for one more scrape; an interrupt here ends it early
                    threading.Event().wait(metrics_linger)
            finally:
                exporter.close()

    for option in reversed(
        (
            click.option(
                "--metrics-port",
                type=click.IntRange(0, 65535),
                metavar="PORT",
                help="Serve live Prometheus metrics on this port while running (0: any free port).",
            ),
            click.option(
                "--metrics-host",
                default="127.0.0.1",
                show_default=True,
                help="Address the metrics endpoint listens on (loopback unless you say otherwise).",
            ),
            click.option(
                "--metrics-linger",
                type=click.FloatRange(min=0),
                default=0.0,
                show_default=True,
                metavar="SECONDS",
                help="Keep the metrics endpoint up this long after the run, for a last scrape.",
            ),
        )
    ):
        wrapper = option(wrapper)
    return wrapper
