"""The service's HTTP API on the project's own server over loopback, with a simulated node: errors in one shape with
their status and field, auth beyond loopback, server-sent events in order, long-poll, and callbacks delivered at least
once (with retries) to a local receiver that fails, hangs or refuses. The service keeps serving through all of it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from polar_cli.gateway.server import GatewayServer, ServerLimits
from polar_cli.node.pools import PoolLimits
from polar_cli.serve.api import ServiceApi
from polar_cli.serve.config import ServeConfig, parse_serve_config
from polar_cli.serve.journal import Journal
from polar_cli.serve.service import RolloutService
from polar_cli.serve.simulated import SimulatedNode, Simulation
from polar_cli.wire.http11 import Limits

TASK = {"task_id": "t1", "instruction": "fix it", "runtime": {"image": "img"}, "harness": "pi", "num_samples": 2}


def settings(tmp: Path, **service: Any) -> ServeConfig:
    callback = {"attempts": 3, "backoff": 0.05, "timeout": 0.5}
    return parse_serve_config(
        {
            "harnesses": ["pi"],
            "engine": {"kind": "gold", "tokenizer": "qwen3"},
            "service": {"state_dir": str(tmp / "state"), "callback": callback, "max_body_mb": 0.01, **service},
        }
    )


@contextlib.asynccontextmanager
async def served(
    tmp: Path, token: str | None = None, **service: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, RolloutService]]:
    cfg = settings(tmp, **service)
    node = SimulatedNode(PoolLimits(init=2, run=2, postrun=2, ready=2), Simulation(init=0.01, run=0.05, postrun=0.01))
    service_ = RolloutService(cfg, Journal(tmp / "state"), node)
    await service_.start()
    limits = ServerLimits(http=Limits(max_body_bytes=int(cfg.service.max_body_mb * 1024 * 1024)))
    server = GatewayServer(ServiceApi(service_, token), limits)
    host, port = await server.start("127.0.0.1", 0)
    try:
        async with httpx.AsyncClient(base_url=f"http://{host}:{port}", timeout=30) as client:
            yield client, service_
    finally:
        await server.stop()
        await service_.stop()


def run(tmp: Path, body: Callable[[httpx.AsyncClient, RolloutService], Awaitable[Any]], **kw: Any) -> Any:
    async def main() -> Any:
        async with served(tmp, **kw) as (client, service):
            return await body(client, service)

    return asyncio.run(main())


def error_of(response: httpx.Response) -> dict[str, Any]:
    err = response.json()["error"]
    assert err["status"] == response.status_code
    return dict(err)


def test_bad_requests_get_clear_errors_and_the_service_keeps_serving(tmp_path: Path) -> None:
    async def body(client: httpx.AsyncClient, service: RolloutService) -> None:
        r = await client.post("/v1/tasks", content=b"{not json")
        assert r.status_code == 400 and "not valid JSON" in error_of(r)["message"]
        r = await client.post("/v1/tasks", json=[1, 2])
        assert r.status_code == 400 and "JSON object" in error_of(r)["message"]
        r = await client.post("/v1/tasks", json={**TASK, "num_sampels": 4})
        assert r.status_code == 400 and error_of(r)["field"] == "num_sampels" and "unknown key" in r.text
        r = await client.post("/v1/tasks", json={**TASK, "num_samples": 0})
        assert r.status_code == 400 and error_of(r)["field"] == "num_samples"
        r = await client.post("/v1/tasks", json={k: v for k, v in TASK.items() if k != "harness"})
        assert r.status_code == 400 and error_of(r)["field"] == "harness"
        r = await client.post("/v1/tasks", json={**TASK, "harness": "nope"})
        assert r.status_code == 400 and error_of(r)["field"] == "harness" and "not offered" in r.text
        r = await client.post("/v1/tasks", json={**TASK, "task_id": "../etc"})
        assert r.status_code == 400 and error_of(r)["field"] == "task_id"
        r = await client.post("/v1/tasks", json={**TASK, "metadata": {"blob": "x" * 20000}})
        assert r.status_code == 413
        r = await client.get("/v1/tasks/ghost")
        assert r.status_code == 404 and error_of(r)["type"] == "not_found"
        r = await client.put("/v1/tasks")
        assert r.status_code == 405
        r = await client.post("/v1/admin/pause?mode=sideways")
        assert r.status_code == 400 and error_of(r)["field"] == "mode"
        r = await client.get("/v1/tasks/t1/results?wait=forever")
        assert r.status_code in (400, 404)
        # still serving, and nothing was created by any of it
        assert (await client.get("/health")).status_code == 200
        assert service.tasks == {}
        r = await client.post("/v1/tasks", json=TASK)
        assert r.status_code == 202 and r.json()["created"] is True
        r = await client.post("/v1/tasks", json={**TASK, "num_samples": 3})
        assert r.status_code == 409 and error_of(r)["type"] == "conflict"
        r = await client.get("/v1/tasks/t1/results", params={"wait": "30"})
        assert r.status_code == 200 and r.json()["done"] and len(r.json()["sessions"]) == 2

    run(tmp_path, body)


def test_a_token_is_required_when_configured_except_for_health(tmp_path: Path) -> None:
    async def body(client: httpx.AsyncClient, service: RolloutService) -> None:
        assert (await client.get("/health")).status_code == 200
        r = await client.get("/v1/status")
        assert r.status_code == 401 and error_of(r)["type"] == "unauthorized"
        r = await client.get("/v1/status", headers={"authorization": "Bearer wrong"})
        assert r.status_code == 401
        r = await client.get("/v1/status", headers={"authorization": "Bearer s3cret"})
        assert r.status_code == 200 and r.json()["queue"]["depth"] == 0

    run(tmp_path, body, token="s3cret")


def test_listening_beyond_loopback_without_a_token_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from polar_cli.errors import ConfigError

    monkeypatch.delenv("POLAR_SERVE_TOKEN", raising=False)
    with pytest.raises(ConfigError, match="auth_token"):
        settings(tmp_path, host="0.0.0.0").check_exposure()
    settings(tmp_path, host="0.0.0.0", auth_token="t").check_exposure()
    settings(tmp_path, host="::1").check_exposure()


async def sse_events(client: httpx.AsyncClient, task_id: str, after: int = 0) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    headers = {"last-event-id": str(after)} if after else {}
    async with client.stream("GET", f"/v1/tasks/{task_id}/events", headers=headers) as response:
        assert response.status_code == 200 and response.headers["content-type"] == "text/event-stream"
        kind = None
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: ") and kind == "session":
                events.append(orjson.loads(line[6:]))
            elif line.startswith("data: ") and kind == "end":
                break
    return events


def test_events_stream_every_session_state_change_in_order(tmp_path: Path) -> None:
    async def body(client: httpx.AsyncClient, service: RolloutService) -> tuple[list[Any], list[Any]]:
        await client.post("/v1/tasks", json={**TASK, "num_samples": 3})
        live = await sse_events(client, "t1")
        replayed = await sse_events(client, "t1", after=5)
        return live, replayed

    live, replayed = run(tmp_path, body)
    assert [e["id"] for e in live] == list(range(1, len(live) + 1))
    for sample in range(3):
        states = [e["state"] for e in live if e["sample"] == sample]
        assert states == ["queued", "init", "ready", "running", "postrun", "completed"], states
    assert live[-1]["state"] == "done" and live[-1]["outcome"] == "completed"
    assert replayed == live[5:]


class Receiver:
    """A callback receiver on loopback: answers from ``script`` (a status, or "hang"), records every POST."""

    def __init__(self, script: list[int | str]) -> None:
        self.script = script
        self.seen: list[tuple[dict[str, str], dict[str, Any]]] = []
        self.server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        self.seen.append((headers, orjson.loads(body)))
        answer = self.script[min(len(self.seen), len(self.script)) - 1]
        if answer == "hang":
            await asyncio.sleep(30)
        writer.write(b"HTTP/1.1 %d X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n" % int(answer))
        await writer.drain()
        writer.close()

    async def start(self) -> str:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/hook"


def test_callbacks_are_retried_until_acknowledged_with_the_task_id_as_idempotency_key(tmp_path: Path) -> None:
    async def body(client: httpx.AsyncClient, service: RolloutService) -> tuple[Receiver, dict[str, Any]]:
        receiver = Receiver([500, "hang", 200])
        url = await receiver.start()
        await client.post("/v1/tasks", json={**TASK, "callback_url": url})
        for _ in range(200):
            status = (await client.get("/v1/tasks/t1")).json()
            if status["callback"]["delivered"]:
                break
            await asyncio.sleep(0.05)
        return receiver, status

    receiver, status = run(tmp_path, body)
    assert len(receiver.seen) == 3 and status["callback"]["attempts"] == 3
    assert {h["idempotency-key"] for h, _ in receiver.seen} == {"t1"}
    payload = receiver.seen[-1][1]
    assert payload["task_id"] == "t1" and payload["done"] and len(payload["sessions"]) == 2


def test_a_callback_that_never_succeeds_is_visible_and_the_result_stays_served(tmp_path: Path) -> None:
    async def body(client: httpx.AsyncClient, service: RolloutService) -> dict[str, Any]:
        await client.post("/v1/tasks", json={**TASK, "callback_url": "http://127.0.0.1:9/refused"})
        for _ in range(200):
            status = (await client.get("/v1/status")).json()
            if status["deliveries"]["failed"]:
                break
            await asyncio.sleep(0.05)
        assert (await client.get("/v1/tasks/t1")).json()["done"]
        return status

    status = run(tmp_path, body)
    assert "t1" in status["deliveries"]["failed"] and status["deliveries"]["pending"] == 0
