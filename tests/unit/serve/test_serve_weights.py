"""A weight sync with a checkpoint (`serve.weights`) against fake vLLM servers: each loads it inside the pause, is
checked (version endpoint, probe moved), the version is stamped and the service resumes; a server that fails leaves
the rotation and is named; when none is left the service stays paused."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from polar_cli.inference.servers import SERVERS
from polar_cli.serve import weights
from polar_cli.serve.journal import Journal
from polar_cli.serve.models import WeightsRequest
from polar_cli.serve.service import RolloutService
from polar_cli.serve.simulated import SimulatedNode, Simulation
from polar_cli.serve.weights import SyncFailed, WeightTargets
from tests.unit.serve.test_serve_service import LIMITS, config


class FakeVLLM:
    """Dev-mode vLLM routes; ``fail``: the reload answers 500; ``stuck``: it answers 200 and loads nothing."""

    def __init__(self, service: RolloutService, fail: bool = False, stuck: bool = False) -> None:
        self.service, self.fail, self.stuck = service, fail, stuck
        self.weights, self.version, self.paused = "base", "default", False
        self.calls: list[str] = []
        self.gate_closed_during_load: bool | None = None

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.calls.append(path)
        body = orjson.loads(request.content) if request.content else None
        if path == "/v1/completions":
            shift = 0.0 if self.weights == "base" else 0.5
            rows = [None] + [{str(i): {"logprob": -3.0 - shift}} for i in body["prompt"][1:]]
            return httpx.Response(200, json={"choices": [{"prompt_logprobs": rows}]})
        if path == "/collective_rpc":
            self.gate_closed_during_load = self.service.paused is not None
            if self.fail:
                return httpx.Response(500, json={"error": "reload_weights failed: shape mismatch"})
            if not self.stuck:
                self.weights = body["kwargs"]["weights_path"]
            return httpx.Response(200, json={"results": [None]})
        if path == "/update_weight_version":
            self.version = body["new_version"]
            return httpx.Response(200, json={"success": True})
        if path == "/weight_info":
            return httpx.Response(200, json={"weight_version": self.version})
        if path in ("/pause", "/resume", "/reset_prefix_cache"):
            self.paused = path == "/pause"
            return httpx.Response(200, json={"status": "ok"})
        return httpx.Response(404)


class FleetNode(SimulatedNode):
    def __init__(self) -> None:
        super().__init__(LIMITS, Simulation(init=0.01, run=0.01, postrun=0.01))
        self.servers: dict[str, FakeVLLM] = {}
        self.retired: dict[str, str] = {}

    def weight_targets(self) -> WeightTargets:
        urls = [u for u in self.servers if u not in self.retired]
        return WeightTargets(SERVERS["vllm"], "policy", urls, self.retired.__setitem__)

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(lambda r: self.servers[f"http://{r.url.host}"].handle(r))


def sync(tmp: Path, flags: list[dict[str, bool]], request: dict[str, Any]) -> tuple[Any, FleetNode, RolloutService]:
    async def main() -> tuple[Any, FleetNode, RolloutService]:
        node = FleetNode()
        svc = RolloutService(config(tmp), Journal(tmp / "state"), node)
        await svc.start()
        node.servers = {f"http://e{i}": FakeVLLM(svc, **f) for i, f in enumerate(flags)}
        try:
            try:
                out: Any = await weights.sync(svc, WeightsRequest.model_validate(request), transport=node.transport())
            except SyncFailed as exc:
                out = exc
            return out, node, svc
        finally:
            await svc.stop()

    return asyncio.run(main())


REQUEST = {"weight_version": "step-1", "weights_path": "/ckpt/step-1"}


def test_every_engine_loads_the_checkpoint_inside_the_pause_and_the_version_is_stamped(tmp_path: Path) -> None:
    report, node, svc = sync(tmp_path, [{}, {}], REQUEST)
    assert report["retired"] == [] and [e["error"] for e in report["engines"]] == [None, None]
    for server in node.servers.values():
        assert server.weights == "/ckpt/step-1" and server.version == "step-1" and server.gate_closed_during_load
        assert server.calls[1:6] == [
            "/pause",
            "/collective_rpc",
            "/reset_prefix_cache",
            "/update_weight_version",
            "/resume",
        ]
    engine = report["engines"][0]
    assert engine["served_version"] == "step-1" and engine["moved"] == pytest.approx(0.5)
    assert len(engine["probe_before"]) == len(engine["probe_after"]) == 23
    assert set(report["seconds"]) == {"pause", "load", "total"}
    assert svc.paused is None and node.gate.paused is None and node.gate.weight_version == "step-1"
    assert svc.journal.weight_version == "step-1"


def test_a_failed_load_takes_that_engine_out_of_rotation_and_says_so(tmp_path: Path) -> None:
    report, node, svc = sync(tmp_path, [{"fail": True}, {}, {"stuck": True}], REQUEST)
    assert report["retired"] == ["http://e0", "http://e2"]
    assert "HTTP 500" in report["engines"][0]["error"] and "did not move" in report["engines"][2]["error"]
    assert set(node.retired) == {"http://e0", "http://e2"}
    assert svc.paused is None and node.gate.weight_version == "step-1"


def test_when_no_engine_loads_the_service_stays_paused_and_the_version_is_not_stamped(tmp_path: Path) -> None:
    failed, node, svc = sync(tmp_path, [{"fail": True}], {**REQUEST, "mode": "abort"})
    assert isinstance(failed, SyncFailed) and "stays paused" in str(failed)
    assert failed.report["retired"] == ["http://e0"]
    assert svc.paused == "abort" and node.gate.weight_version is None and svc.journal.weight_version is None


def test_without_a_path_only_the_version_is_stamped(tmp_path: Path) -> None:
    report, node, _ = sync(tmp_path, [{}], {"weight_version": "step-2"})
    assert report == {"weight_version": "step-2"} and node.servers["http://e0"].calls == []


def test_a_server_whose_probe_is_not_the_trainers_leaves_the_rotation(tmp_path: Path) -> None:
    right = {**REQUEST, "expect_probe": [-3.5] * 23}
    report, _, _ = sync(tmp_path / "right", [{}], right)
    assert report["retired"] == [] and report["engines"][0]["off_trainer"] == pytest.approx(0.0)
    wrong = {**REQUEST, "expect_probe": [-3.2] * 23}
    failed, _, svc = sync(tmp_path / "wrong", [{}], wrong)
    assert isinstance(failed, SyncFailed) and svc.paused == "drain"
    assert "differs from the trainer's by up to 0.3" in failed.report["engines"][0]["error"]
