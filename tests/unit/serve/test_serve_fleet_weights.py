"""A weight sync on a fleet (`cluster.fleet_weights` behind `serve.weights.sync`), with node actors stood in for by
objects that answer as `NodeWorker` does (no Ray): every node is paused, loads what it drives and is resumed; an
engine several nodes list is loaded once; a node left without an engine leaves the fleet (lost, so its sessions run
again elsewhere) and is named; with no engine loaded nothing is killed and the fleet stays paused; a node that joins
later loads the last checkpoint before it gets work, or is left out. The real actors, vLLM and Ray:
tests/integration/cluster/test_cluster_weights.py."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from polar_cli.cluster.fleet import Member
from polar_cli.cluster.serve import ClusterNode
from polar_cli.serve import weights
from polar_cli.serve.config import parse_serve_config
from polar_cli.serve.models import WeightsRequest
from polar_cli.serve.weights import SyncFailed


class FakeWorker:
    """`NodeWorker`'s weight routes over engine servers that load or fail (``bad``)."""

    def __init__(self, name: str, urls: list[str], bad: set[str]) -> None:
        self.name, self.urls, self.bad = name, urls, bad
        self.retired: dict[str, str] = {}
        self.loaded: list[tuple[str, str]] = []
        self.paused: str | None = None
        self.version: str | None = None
        self.calls: list[str] = []

    async def engines(self) -> list[dict[str, Any]]:
        return [
            {"url": u, "in_rotation": u not in self.retired, "retired": self.retired.get(u), "weight_version": None}
            for u in self.urls
        ]

    async def load_weights(self, request: WeightsRequest, urls: list[str] | None) -> list[dict[str, Any]]:
        self.calls.append("load")
        assert self.paused is not None or urls is None, "a sync loads inside the fleet's pause"
        rows = []
        for u in self.urls if urls is None else urls:
            error = f"{u} refused {request.weights_path}" if u in self.bad else None
            if error:
                self.retired[u] = error
            else:
                self.loaded.append((u, request.weight_version))
            rows.append({"node": self.name, "url": u, "error": error, "served_version": request.weight_version})
        return rows

    async def retire_engines(self, reasons: dict[str, str]) -> list[dict[str, Any]]:
        self.retired |= {u: why for u, why in reasons.items() if u in self.urls}
        return await self.engines()

    async def pause(self, mode: str) -> int:
        self.paused = mode
        return 0

    async def resume(self) -> None:
        self.paused = None

    async def set_weight_version(self, version: str | None) -> None:
        self.version = version

    async def sweep(self) -> int:
        return 0


class Handle:
    """What a Ray actor handle looks like to the driver: ``handle.method.remote(*args)`` is awaitable."""

    def __init__(self, worker: FakeWorker) -> None:
        self.worker = worker

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.worker, name)
        return type("Remote", (), {"remote": staticmethod(method)})


class Service:
    """The control half of `RolloutService` that `serve.weights.sync` drives."""

    def __init__(self, node: ClusterNode) -> None:
        self.node, self.paused, self.version = node, None, None

    async def pause(self, mode: str) -> None:
        self.paused = mode
        await self.node.gate.pause(mode)

    async def resume(self) -> None:
        await self.node.gate.resume()
        self.paused = None

    async def set_weights(self, version: str) -> dict[str, Any]:
        self.version = version
        await self.node.gate.set_weight_version(version)
        return {"weight_version": version}


def fleet(tmp: Path, nodes: dict[str, list[str]], bad: set[str] = frozenset()) -> tuple[ClusterNode, list[FakeWorker]]:  # type: ignore[assignment]
    config = parse_serve_config(
        {
            "harnesses": ["pi"],
            "engine": {"kind": "vllm", "url": "http://e0", "tokenizer": "qwen3"},
            "cluster": {"ray": {"address": "auto"}},
        }
    )
    node = ClusterNode(config, tmp)
    workers = [FakeWorker(name, urls, set(bad)) for name, urls in nodes.items()]
    for w in workers:
        node.fleet.members.append(Member(w.name, Handle(w), name=w.name, info={"engines": asyncio.run(w.engines())}))
    return node, workers


REQUEST = WeightsRequest(weight_version="step-1", weights_path="/ckpt/step-1")


def run_sync(node: ClusterNode, request: WeightsRequest = REQUEST) -> tuple[Any, Service]:
    service = Service(node)

    async def main() -> Any:
        try:
            return await weights.sync(service, request)  # type: ignore[arg-type]
        except SyncFailed as exc:
            return exc

    return asyncio.run(main()), service


def test_every_node_loads_what_it_drives_inside_the_fleets_pause_and_a_shared_engine_once(tmp_path: Path) -> None:
    node, (a, b, c) = fleet(tmp_path, {"a": ["http://e0", "http://e1"], "b": ["http://e2"], "c": ["http://e1"]})
    report, service = run_sync(node)
    assert sorted((e["node"], e["url"]) for e in report["engines"]) == [
        ("a", "http://e0"),
        ("a", "http://e1"),
        ("b", "http://e2"),
    ]
    assert a.loaded == [("http://e0", "step-1"), ("http://e1", "step-1")] and b.loaded == [("http://e2", "step-1")]
    assert c.calls == [] and report["retired"] == [] and report["nodes_retired"] == {}
    assert [w.paused for w in (a, b, c)] == [None] * 3 and [w.version for w in (a, b, c)] == ["step-1"] * 3
    assert service.paused is None and service.version == "step-1"
    rows = node.engines()
    assert len(rows) == 4 and {r["weight_version"] for r in rows} == {"step-1"} and all(r["in_rotation"] for r in rows)


def test_a_node_left_without_an_engine_leaves_the_fleet_and_says_so(tmp_path: Path) -> None:
    node, (a, b, c) = fleet(
        tmp_path, {"a": ["http://e0"], "b": ["http://e1"], "c": ["http://e1", "http://e2"]}, {"http://e1"}
    )
    report, service = run_sync(node)
    assert report["retired"] == ["http://e1"] and "refused" in report["nodes_retired"]["b"]
    assert set(report["nodes_retired"]) == {"b"}  # c keeps e2, with e1 out of its rotation too
    assert c.retired.keys() == {"http://e1"} and a.version == c.version == "step-1" and a.paused is None
    assert [m.alive for m in node.fleet.members] == [True, False, True]
    assert b.version is None and b.paused == "drain"  # never resumed, never stamped: it serves nothing more
    assert node.info()["retired_nodes"] == {"b": report["nodes_retired"]["b"]}
    assert service.paused is None and service.version == "step-1"
    out = [r for r in node.engines() if not r["in_rotation"]]
    assert sorted((r["node"], r["url"]) for r in out) == [("b", "http://e1"), ("c", "http://e1")]


def test_when_no_engine_loads_no_node_is_killed_and_the_fleet_stays_paused(tmp_path: Path) -> None:
    node, (a, b) = fleet(tmp_path, {"a": ["http://e0"], "b": ["http://e0"]}, {"http://e0"})
    failed, service = run_sync(node)
    assert isinstance(failed, SyncFailed) and "stays paused" in str(failed)
    assert failed.report["nodes_retired"] == {} and all(m.alive for m in node.fleet.members)
    assert a.paused == b.paused == "drain" and service.version is None and a.version is None
    assert not any(r["in_rotation"] for r in node.engines())


def test_a_late_node_loads_the_last_checkpoint_before_it_gets_work_or_is_left_out(tmp_path: Path) -> None:
    node, _ = fleet(tmp_path, {"a": ["http://e0"]})
    run_sync(node, REQUEST.model_copy(update={"expect_probe": [-1.0] * 23}))
    late, bad = FakeWorker("late", ["http://e9"], set()), FakeWorker("bad", ["http://e8"], {"http://e8"})
    members = [Member(w.name, Handle(w), name=w.name) for w in (late, bad)]
    for m in members:
        asyncio.run(node.weights.joined(m))
    assert late.loaded == [("http://e9", "step-1")] and late.version == "step-1" and members[0].alive
    assert not members[1].alive and bad.version is None
    assert "does not serve step-1" in node.weights.retired_nodes["bad"]


@pytest.mark.parametrize("paused", ["drain", None])
def test_a_node_that_joins_while_the_fleet_is_paused_is_paused_too(tmp_path: Path, paused: str | None) -> None:
    node, _ = fleet(tmp_path, {"a": ["http://e0"]})
    node.gate.paused = paused
    late = FakeWorker("late", ["http://e9"], set())
    asyncio.run(node.weights.joined(Member("late", Handle(late), name="late")))
    assert late.paused == paused and late.loaded == []  # no checkpoint synced yet: nothing to load
