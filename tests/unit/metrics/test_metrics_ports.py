"""Prometheus metrics: the gateway's seam counts calls, tokens and latency; the run's and the service's collectors
read their state on scrape; every port is served on loopback."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from polar_cli import metrics
from polar_cli.config import parse_recipe
from polar_cli.metrics.generate import attach_hooks
from polar_cli.metrics.serve import serve_metrics
from polar_cli.node.pools import Snapshot


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_the_gateway_seam_counts_calls_tokens_and_latency() -> None:
    server, port = metrics.start(0)
    try:
        assert server.server_address[0] == "127.0.0.1"
        before = scrape(port)
        tokens = SimpleNamespace(prompt_ids=[1, 2, 3], response_ids=[4, 5])
        metrics.gateway_call("anthropic_messages", "ok", 0.2, SimpleNamespace(tokens=tokens), "v7")
        metrics.gateway_call("anthropic_messages", "upstream_error", 0.1)
        metrics.upstream_seconds("anthropic_messages", 0.15)
        after = scrape(port)
    finally:
        server.shutdown()
    d = lambda name, **lb: value(after, name, **lb) - value(before, name, **lb)  # noqa: E731
    assert d("polar_gateway_requests_total", api="anthropic_messages", status="ok") == 1
    assert d("polar_gateway_requests_total", api="anthropic_messages", status="upstream_error") == 1
    assert d("polar_gateway_tokens_total", direction="in") == 3
    assert d("polar_gateway_tokens_total", direction="out") == 2
    assert d("polar_gateway_upstream_seconds_count", api="anthropic_messages") == 1
    assert d("polar_gateway_call_seconds_count", api="anthropic_messages") == 2
    assert value(after, "polar_weight_version_info", version="v7") == 1


@dataclass
class FakeProgress:
    total: int = 10
    already: int = 2
    done_now: int = 3
    errors: int = 1
    snapshot: Snapshot = field(default_factory=lambda: Snapshot(False, 1, 1, 2, 0, 3, 0, 4))


def test_a_run_with_metrics_port_serves_stages_queue_and_rejects(tmp_path: Any) -> None:
    recipe = parse_recipe({"manifest": {"source": "m.jsonl"}, "harnesses": ["pi"],
                           "engine": {"kind": "gold", "tokenizer": "qwen3"}, "metrics": {"port": 0}})  # fmt: skip
    hooks = attach_hooks(recipe, FakeProgress())
    try:
        port = hooks.server.server_address[1]
        before = scrape(port)
        hooks.on_result("rejected", {"reason": "unresolved: tests failed", "status": "OK"})
        hooks.on_result("accepted", {"reason": None, "status": "OK"})
        after = scrape(port)
    finally:
        hooks.close()
    assert value(after, "polar_sessions", stage="running") == 2
    assert value(after, "polar_queue_depth", queue="sessions") == 10 - 2 - 3 - 1 - 4
    assert (
        value(after, "polar_rejects_total", reason="unresolved")
        - value(before, "polar_rejects_total", reason="unresolved")
        == 1
    )
    assert (
        value(after, "polar_sessions_finished_total", verdict="accepted")
        - value(before, "polar_sessions_finished_total", verdict="accepted")
        == 1
    )


def test_the_service_s_status_is_read_on_its_loop() -> None:
    status = {
        "pools": {"init": 1, "ready": 2, "running": 3, "postrun": 0},
        "queue": {"depth": 5, "by_priority": {}},
        "deliveries": {"pending": 1, "delivered": 0, "retrying": {}, "failed": {}},
        "tasks": {"running": 2, "done": 1},
        "sessions": {"running": 3},
        "paused": False,
        "weight_version": "step-12",
    }

    async def main() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        served = serve_metrics(SimpleNamespace(status=lambda: status), "127.0.0.1", 0)
        assert served is not None
        try:
            return await asyncio.get_running_loop().run_in_executor(None, scrape, served.port)
        finally:
            served.close()

    got = asyncio.run(main())
    assert value(got, "polar_sessions", stage="running") == 3
    assert value(got, "polar_queue_depth", queue="sessions") == 5
    assert value(got, "polar_serve_tasks", state="running") == 2
    assert value(got, "polar_serve_weights_info", version="step-12") == 1
    assert serve_metrics(SimpleNamespace(status=dict), "127.0.0.1", None) is None
