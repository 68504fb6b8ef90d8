"""`perfkit serve`: a Triton server in the foreground until Ctrl-C."""

from __future__ import annotations

import time
from typing import Any

import click

from perfkit.cli._server_options import build_server_options, server_options
from perfkit.server.launch import open_server


@click.command(name="serve")
@server_options()
@click.option("--model", "models", multiple=True, help="Load only these models (repeatable). Default: all.")
def command(models: tuple[str, ...], **kwargs: Any) -> None:
    """Run a Triton server in the foreground, print its URLs, stop cleanly on Ctrl-C.

    Explicit model control, loopback and free ports unless given. Example:

        perfkit serve --model-repository fixtures/models
    """
    opts = build_server_options(kwargs, models=models or None)
    if opts.mode == "remote":
        raise click.UsageError("serve launches a server: use --launch-mode local or docker")
    click.echo(f"perfkit: starting {opts.mode} Triton server for {opts.model_repository} ...", err=True)
    with open_server(opts) as server:
        ep = server.endpoints
        click.echo(f"Triton {server.version()} ready ({opts.mode})")
        click.echo(f"  HTTP     {ep.http_url}")
        click.echo(f"  gRPC     {ep.grpc_url}")
        click.echo(f"  metrics  {ep.metrics_url}")
        if server.log_path:
            click.echo(f"  log      {server.log_path}")
        ready = [m["name"] for m in server.repository_index() if m.get("state") == "READY"]
        click.echo(f"  models   {', '.join(sorted(ready)) or '(none loaded)'}")
        click.echo("Press Ctrl-C to stop.", err=True)
        try:
            while server.alive():
                time.sleep(0.5)
        except KeyboardInterrupt:
            click.echo("perfkit: stopping server ...", err=True)
            raise
    raise click.ClickException("the server exited unexpectedly; see its log")
