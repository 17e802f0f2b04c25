"""`polar serve` on a real local Ray cluster (several raylets on this machine, each with a gateway node actor: gold
engine, gateway, Docker, Pi): groups come back whole with rewards from both nodes, and a task survives the loss of
the node its samples ran on (they run again on the other). What one machine cannot show is in
test_cluster_generate.py's docstring."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.integration.cluster.test_cluster_generate import add_nodes, cluster, node_containers  # noqa: F401
from tests.integration.serve.serve_process import DEMO_IDS, instance_task, service, wait_for

pytestmark = pytest.mark.integration
TIMEOUT = 900


def test_serve_on_the_cluster_survives_the_loss_of_a_node(cluster: Any, tmp_path: Path) -> None:  # noqa: F811
    (doomed,) = add_nodes(cluster, 1)
    engine = {"kind": "gold", "latency": 2.0}
    on_the_cluster = {"cluster": {"ray": {"address": cluster.address}}}
    with service(tmp_path, engine, extra=on_the_cluster, session_retries=2) as svc:
        nodes = svc.client.status()["node"]["nodes"]
        assert len(nodes) == 2 and all(n["alive"] for n in nodes)
        svc.client.submit(instance_task("c-0", DEMO_IDS[0], 4))
        svc.client.submit(instance_task("c-1", DEMO_IDS[1], 4))
        doomed_name = f"node-{doomed.node_id[:8]}"
        wait_for(
            lambda: any(n["name"] == doomed_name and n["in_flight"] for n in svc.client.status()["node"]["nodes"]),
            TIMEOUT,
            "a session on the doomed node",
        )
        cluster.remove_node(doomed)
        results = [svc.client.wait(t, timeout=TIMEOUT) for t in ("c-0", "c-1")]
        status = svc.client.status()
    for result in results:
        assert result.rewards == [1.0] * 4, [s["reason"] for s in result.sessions]
        assert all(s["status"] == "completed" for s in result.sessions)
    assert status["node"]["retries"].get("node_lost", 0) >= 1
    assert [n["alive"] for n in status["node"]["nodes"] if n["name"] == doomed_name] == [False]
    assert any(s["attempts"] > 1 for r in results for s in r.sessions)
    assert not node_containers(tmp_path / "state")
