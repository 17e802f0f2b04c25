"""`polar serve`'s process: the journal, the node, the service and its HTTP API on one event loop, until a signal.

One service per state directory: a lock (``flock`` on STATE_DIR/.lock, `dirlock`) refuses a second one, which would
write the same journal. SIGTERM and SIGINT stop it cleanly: the listener closes, sessions in flight are discarded
(containers removed) and run again by the next start; nothing written is lost, and ``kill -9`` loses nothing either
(`journal`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from polar_cli.dirlock import directory_lock
from polar_cli.errors import ConfigError
from polar_cli.gateway.server import GatewayServer, ServerLimits
from polar_cli.metrics.serve import ServeMetrics, serve_metrics
from polar_cli.serve.api import ServiceApi
from polar_cli.serve.config import ServeConfig
from polar_cli.serve.journal import Journal
from polar_cli.serve.node import LocalNode, Node
from polar_cli.serve.service import RolloutService
from polar_cli.wire.http11 import Limits

log = logging.getLogger("polar.serve")


def state_lock(state_dir: Path) -> contextlib.AbstractContextManager[None]:
    """One service per state directory (`dirlock`): a second exits 1 naming the holder's pid."""
    return directory_lock(state_dir, "state directory")


@contextlib.contextmanager
def serve_logging(state_dir: Path, level: str) -> Iterator[None]:
    root = logging.getLogger("polar")
    (state_dir / "logs").mkdir(parents=True, exist_ok=True)
    handlers: list[logging.Handler] = [logging.FileHandler(state_dir / "logs" / "serve.log"), logging.StreamHandler()]
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    for handler in handlers:
        handler.setFormatter(fmt)
        root.addHandler(handler)
    previous = root.level
    root.setLevel(level.upper())
    try:
        yield
    finally:
        for handler in handlers:
            root.removeHandler(handler)
            handler.close()
        root.setLevel(previous)


async def serve(
    config: ServeConfig,
    *,
    node_factory: Callable[[ServeConfig, Path], Node] = LocalNode,
    announce: Callable[[str], None] = lambda line: print(line, flush=True),
    metrics_port: int | None = None,
    metrics_host: str = "127.0.0.1",
) -> int:
    """Run until SIGTERM/SIGINT (0) or a fatal fault such as a full disk (1)."""
    config.check_exposure()
    state_dir = Path(config.service.state_dir)
    journal = Journal(state_dir, fsync=config.service.fsync)
    if config.cluster.enabled and node_factory is LocalNode:
        raise ConfigError("cluster.ray.address is set, but no cluster node was given (polar serve gives one)")
    service = RolloutService(config, journal, node_factory(config, state_dir))
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server: GatewayServer | None = None
    metrics: ServeMetrics | None = None
    try:
        await service.start()
        metrics = serve_metrics(service, metrics_host, metrics_port)
        if metrics is not None:
            announce(f"polar serve: metrics on http://{metrics_host}:{metrics.port}/metrics")
        limits = ServerLimits(http=Limits(max_body_bytes=int(config.service.max_body_mb * 1024 * 1024)))
        server = GatewayServer(ServiceApi(service, config.auth_token()), limits)
        host, port = await server.start(config.service.host, config.service.port)
        counts = service.status()["tasks"]
        announce(f"polar serve: listening on http://{host}:{port} (state {state_dir}; tasks {counts or 'none'})")
        waiting = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(service.stopped.wait())]
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        for w in waiting:
            w.cancel()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        if server is not None:
            await server.stop()
        if metrics is not None:
            metrics.close()
        await service.stop()
    if service.fatal is not None:
        print(f"error: {service.fatal}", file=sys.stderr)
        return 1
    return 0
