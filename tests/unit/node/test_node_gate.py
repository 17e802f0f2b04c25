"""The node's gateway exposes the model-call gate and opens sessions with their own sampling."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from polar_cli.inference.engines import EngineHandle
from polar_cli.node.gateway import NodeGateway
from polar_cli.translate.upstream import UpstreamOptions
from tests.unit.gateway.test_handler import FakeUpstream


def test_the_node_gateway_exposes_its_gate_and_opens_sessions_with_sampling(tmp_path: Path) -> None:
    async def run() -> None:
        engine = EngineHandle("server", FakeUpstream(), UpstreamOptions(model="m"), 0)  # type: ignore[arg-type]
        node = NodeGateway(engine, tmp_path)
        try:
            assert node.gate is node.gateway.gate
            node.gate.set_weight_version("step-3")
            assert node.gate.status()["weight_version"] == "step-3"
            key = node.open_session("s", None, sampling={"temperature": 0.7, "seed": 11})
            assert node.sessions.lookup(key).sampling == {"temperature": 0.7, "seed": 11}
            assert node.sessions.lookup(node.open_session("t", None)).sampling is None
            with pytest.raises(ValueError, match="messages"):
                node.open_session("u", None, sampling={"messages": []})
        finally:
            node.capture.close()

    asyncio.run(run())
