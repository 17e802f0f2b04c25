"""Weights on a fleet (issue 24): `polar serve` on a real local Ray cluster (raylets on this machine, a gateway node
actor on each) loads a checkpoint into a REAL vLLM CPU server (dev mode, the tiny Qwen3) from inside a node actor:
``POST /v1/admin/weights`` pauses every node, the node that drives the server loads it and checks it against the
trainer's probe, every node is stamped and resumed, and the sessions after it (Pi in Docker) carry the version. A
node that joins later loads the same checkpoint before it gets work. A checkpoint vLLM CPU reloads without serving
it (the tied embeddings changed) leaves no engine in rotation: no node is killed, the fleet stays paused, 502.

What one machine with one vLLM CPU cannot show: nodes with engines of their own (every node here lists the same
server, so the fleet loads it once, Rule 1 of `cluster.fleet_weights`), hence neither a node that loses all its
engines while others keep theirs and leaves the fleet (tests/unit/serve/test_serve_fleet_weights.py shows that on
stand-in actors), nor checkpoints on disks of their own (the path must exist on every machine). Needs .venv-vllm,
the models, Docker and the Pi bundle; a missing part fails, never skips.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from polar_cli.client import ServeError
from tests.integration.cluster.test_cluster_generate import add_nodes, cluster  # noqa: F401
from tests.integration.serve.serve_process import DEMO_IDS, instance_task, service, wait_for
from tests.integration.serve.test_serve_weights_vllm import checkpoint, trainer_probe, vllm_dev  # noqa: F401
from tests.support.models import QWEN3_TINY_DIR
from tests.support.vllm_server import VLLMServer

pytestmark = pytest.mark.integration
TIMEOUT = 900


def test_a_checkpoint_reaches_every_node_of_the_fleet_and_a_late_one(
    cluster: Any,  # noqa: F811
    vllm_dev: VLLMServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    add_nodes(cluster, 1)
    engine = {
        "kind": "vllm",
        "url": vllm_dev.url,
        "tokenizer": str(QWEN3_TINY_DIR),
        "token_in": False,
        "max_tokens_cap": 16,
    }
    extra = {
        "cluster": {"ray": {"address": cluster.address}, "nodes": {"poll_interval": 1}},
        "timeouts": {"session": 240, "eval": 600},
    }
    with service(tmp_path / "serve", engine, extra=extra) as svc:
        listed = svc.client.engines()
        assert [(e["url"], e["in_rotation"]) for e in listed] == [(vllm_dev.url, True)] * 2
        assert len({e["node"] for e in listed}) == 2

        step1 = checkpoint(tmp_path / "step-1", seed=1)
        report = svc.client.set_weights("step-1", str(step1), expect_probe=trainer_probe(step1))
        (loaded,) = report["engines"]  # one server, loaded once, by one node actor
        assert loaded["error"] is None and loaded["served_version"] == "step-1", loaded
        assert loaded["node"] in {e["node"] for e in listed}
        assert loaded["moved"] > 1e-2 and loaded["off_trainer"] < 1e-3, loaded
        assert report["retired"] == [] and report["nodes_retired"] == {}
        assert httpx.get(vllm_dev.url + "/weight_info").json()["weight_version"] == "step-1"
        assert [e["weight_version"] for e in svc.client.engines()] == ["step-1"] * 2
        status = svc.client.status()
        assert status["paused"] is None and status["gate"]["paused"] is False
        print(f"\nsync on a fleet of two nodes: {report['seconds']}")

        svc.client.submit(instance_task("after-sync", DEMO_IDS[0], 2, evaluator={"type": "session_completed"}))
        sessions = svc.client.wait("after-sync", timeout=TIMEOUT).sessions
        for session in sessions:
            assert session["status"] in ("completed", "timeout") and session["weight_versions"] == ["step-1"], session

        add_nodes(cluster, 1)
        wait_for(lambda: len(svc.client.engines()) == 3, TIMEOUT, "the third node's engine")
        joined = svc.client.engines()
        assert all(e["in_rotation"] and e["weight_version"] == "step-1" for e in joined), joined
        assert svc.client.status()["node"]["retired_nodes"] == {}

        step2 = checkpoint(tmp_path / "step-2", seed=2, embeddings=True)
        with pytest.raises(ServeError) as failed:
            svc.client.set_weights("step-2", str(step2), expect_probe=trainer_probe(step2))
        assert failed.value.status == 502 and "stays paused" in failed.value.message
        status = svc.client.status()
        assert status["paused"] == "drain" and status["gate"]["paused"] is True
        assert all(n["alive"] for n in status["node"]["nodes"]) and status["node"]["retired_nodes"] == {}
        after = svc.client.engines()
        assert len(after) == 3 and not any(e["in_rotation"] for e in after), after
        assert {e["weight_version"] for e in after} == {"step-1"}  # nothing was stamped
