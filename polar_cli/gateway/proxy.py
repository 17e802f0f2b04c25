"""The gateway on its own (`polar proxy`): one running SGLang or vLLM upstream, probed, served until a signal.

`serve` is the whole life of a standalone gateway: ask the server its model (unless given), probe its token fields
(`probe.probe_dialect`), listen, and on SIGINT/SIGTERM stop listening and flush every capture record.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from polar_cli.capture import CaptureWriter
from polar_cli.errors import ConfigError
from polar_cli.gateway.continuation import TokenIn
from polar_cli.gateway.handler import Gateway
from polar_cli.gateway.probe import probe_dialect, probe_traits, served_model, with_server_rules
from polar_cli.gateway.server import GatewayServer
from polar_cli.gateway.sessions import SessionRegistry
from polar_cli.gateway.upstream_client import UpstreamClient, upstream_root
from polar_cli.templates import detect_traits
from polar_cli.translate.dialects import Dialect
from polar_cli.translate.upstream import ReasoningMode, UpstreamOptions

log = logging.getLogger("polar.proxy")


# A call makes thousands of container objects (the parsed bodies, the IR, the upstream answer) that reference counting
# frees when the call ends. At Python's default threshold (700) the cyclic collector ran every call or two: it found
# nothing, but moved the objects of the calls then in flight into the older generations, whose full collections
# (~20 ms each, walking every object the imports made) followed every few hundred calls; ~130 us per call in all at
# 16 connections (scripts/bench_proxy.py). While the gateway serves, what start-up built is frozen out of the
# collector's sight and a young collection waits for this many allocations; a reference cycle is still collected.
GC_THRESHOLD = 10_000


@contextlib.contextmanager
def _serving_gc() -> Iterator[None]:
    thresholds = gc.get_threshold()
    gc.collect()  # start-up's garbage goes now, not frozen for good
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD, *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


def parse_session_keys(values: list[str]) -> list[tuple[str, str]]:
    pairs = []
    for value in values:
        key, sep, session_id = value.partition("=")
        if not key:
            raise ConfigError(f"--session-key {value!r}: expected KEY or KEY=SESSION_ID")
        pairs.append((key, session_id if sep and session_id else key))
    return pairs


async def serve(
    *,
    upstream: str,
    dialect: Dialect,
    host: str,
    port: int,
    capture_dir: Path,
    model: str | None,
    sessions: SessionRegistry,
    chat_template_kwargs: dict[str, Any] | None,
    max_tokens_cap: int | None,
    upstream_timeout: float,
    extra_body: dict[str, Any] | None = None,
    ready: asyncio.Event | None = None,
    reasoning: ReasoningMode = "reinject",
    token_in: TokenIn | None = None,
) -> None:
    """Run the gateway until SIGINT/SIGTERM; every capture record is flushed before it returns."""
    client = UpstreamClient(upstream_root(upstream), timeout=upstream_timeout)
    if model is None:
        model = await served_model(client)
    options = UpstreamOptions(
        dialect=dialect,
        model=model,
        chat_template_kwargs=chat_template_kwargs,
        max_tokens_cap=max_tokens_cap,
        extra_body=extra_body,
        reasoning=reasoning,
    )
    options = replace(options, dialect=await probe_dialect(client, options))
    traits = detect_traits(token_in.template) if token_in is not None else await probe_traits(client, options)
    traits = with_server_rules(traits, options.dialect)
    log.info("chat template traits: %s", ", ".join(traits.held) or "none")
    writer = CaptureWriter(capture_dir)
    gateway = Gateway(
        upstream=client, options=options, sessions=sessions, capture=writer, token_in=token_in, traits=traits
    )
    server = GatewayServer(gateway)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    with _serving_gc():
        try:
            bound = await server.start(host, port)
            log.info(
                "gateway on http://%s:%d -> %s (%s, model %s), capture in %s",
                *bound,
                upstream,
                options.dialect.name,
                model,
                capture_dir,
            )
            if ready is not None:
                ready.set()
            await stop.wait()
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
            await server.stop()
            writer.close()
