"""`polar serve`: the RL rollout service (polar_cli/serve/README.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from polar_cli.commands.common import LogLevelOpt, MetricsHostOpt, MetricsPortOpt, exit_codes


def serve(
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="serve.yaml (default: gold engine, Pi, every default)")
    ] = None,
    overrides: Annotated[list[str] | None, typer.Argument(help="KEY=VALUE overrides, e.g. concurrency.run=8")] = None,
    host: Annotated[str | None, typer.Option(help="Address to listen on (service.host)")] = None,
    port: Annotated[int | None, typer.Option(help="Port to listen on, 0 for any (service.port)")] = None,
    state_dir: Annotated[
        Path | None,
        typer.Option(help="Journal, results, capture, logs; the same directory resumes (service.state_dir)"),
    ] = None,
    log_level: LogLevelOpt = "info",
    metrics_port: MetricsPortOpt = None,
    metrics_host: MetricsHostOpt = "127.0.0.1",
) -> None:
    """Serve rollouts: TaskRequests in, GRPO groups of token-exact trajectories with rewards out, durable."""
    from polar_cli.serve.config import ServeConfig, load_serve_config
    from polar_cli.serve.node import LocalNode, Node
    from polar_cli.serve.run import serve as run_service
    from polar_cli.serve.run import serve_logging, state_lock

    with exit_codes():
        extra = list(overrides or [])
        if host is not None:
            extra.append(f"service.host={host}")
        if port is not None:
            extra.append(f"service.port={port}")
        if state_dir is not None:
            extra.append(f"service.state_dir={state_dir}")
        settings = load_serve_config(config, extra)
        directory = Path(settings.service.state_dir)
        node: Callable[[ServeConfig, Path], Node] = LocalNode
        if settings.cluster.enabled:  # the cluster's nodes run the sessions (polar_cli/cluster/README.md)
            from polar_cli.cluster.serve import ClusterNode

            node = ClusterNode
        with state_lock(directory), serve_logging(directory, log_level):
            service = run_service(settings, node_factory=node, metrics_port=metrics_port, metrics_host=metrics_host)
            code = asyncio.run(service)
    raise typer.Exit(code)
