"""Prometheus metrics of the gateway, `polar generate` and `polar serve`, on a port of their own (docs/metrics.md).

One registry for the process. The gateway's handler calls `gateway_call` and `upstream_seconds` (counters and
histograms: a lock and an add, safe on the hot path, counted whether or not anything serves them); `polar generate`
and `polar serve` add what they know through `generate.GenerateMetrics` and `serve.ServeCollector`. `start` serves
the registry over HTTP, on loopback unless told otherwise.
"""

from __future__ import annotations

import logging
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import start_http_server
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

log = logging.getLogger("polar.metrics")

REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)

_LATENCY = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900)

REQUESTS = Counter(
    "polar_gateway_requests",
    "Model calls the gateway answered, by provider API and outcome (ok, upstream_error, client_error).",
    ["api", "status"],
    registry=REGISTRY,
)
CALL_SECONDS = Histogram(
    "polar_gateway_call_seconds",
    "A model call from its arrival to its answer (decode, wait at the gate, upstream call, encode).",
    ["api"],
    buckets=_LATENCY,
    registry=REGISTRY,
)
UPSTREAM_SECONDS = Histogram(
    "polar_gateway_upstream_seconds",
    "The upstream inference server's part of a model call (the request sent until its answer read).",
    ["api"],
    buckets=_LATENCY,
    registry=REGISTRY,
)
TOKENS = Counter(
    "polar_gateway_tokens",
    "Token ids of answered calls: in = prompt ids, out = sampled ids.",
    ["direction"],
    registry=REGISTRY,
)
WEIGHT_VERSION = Gauge(
    "polar_weight_version_info",
    "The weights' version stamped on the last answered call (1 for that version's label).",
    ["version"],
    registry=REGISTRY,
)
_last_version: list[str | None] = [None]


def gateway_call(api: str, status: str, seconds: float, answer: Any = None, weight_version: str | None = None) -> None:
    """One finished model call (the handler's record point): outcome, latency, tokens, weight version."""
    REQUESTS.labels(api, status).inc()
    CALL_SECONDS.labels(api).observe(seconds)
    tokens = getattr(answer, "tokens", None)
    if tokens is not None:
        TOKENS.labels("in").inc(len(tokens.prompt_ids))
        TOKENS.labels("out").inc(len(tokens.response_ids))
    if weight_version is not None and weight_version != _last_version[0]:
        if _last_version[0] is not None:
            WEIGHT_VERSION.remove(_last_version[0])
        WEIGHT_VERSION.labels(weight_version).set(1)
        _last_version[0] = weight_version


def upstream_seconds(api: str, seconds: float) -> None:
    UPSTREAM_SECONDS.labels(api).observe(seconds)


def start(port: int, host: str = "127.0.0.1") -> tuple[Any, int]:
    """Serve the registry at http://host:port/metrics in a daemon thread; (the server, the port it bound)."""
    server, _thread = start_http_server(port, addr=host, registry=REGISTRY)
    bound = int(server.server_address[1])
    log.info("metrics on http://%s:%d/metrics", host, bound)
    return server, bound
