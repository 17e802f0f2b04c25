"""`polar generate` on a real local Ray cluster: several raylets on this machine (`ray.cluster_utils.Cluster`), each
advertising the ``polar_node`` resource, each running a gateway node actor with its own gold engine, gateway and
Docker runtime; the driver is a `polar generate` process of its own, as a user runs it.

What one machine cannot show: machines with their own Docker engines and disks (every node here shares this host's
Docker, so the nodes' sweeps see each other's containers) and a network between them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from polar_cli.runtime.base import MANAGED_LABEL, OWNER_LABEL
from polar_cli.runtime.docker import connect

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
TIMEOUT = 900


@pytest.fixture
def cluster() -> Iterator[Any]:
    from ray.cluster_utils import Cluster

    ray_cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"polar_node": 1}})
    try:
        yield ray_cluster
    finally:
        ray_cluster.shutdown()


def add_nodes(ray_cluster: Any, n: int) -> list[Any]:
    nodes = [ray_cluster.add_node(num_cpus=1, resources={"polar_node": 1}) for _ in range(n)]
    ray_cluster.wait_for_nodes()
    return nodes


def start(ray_cluster: Any, out: Path, *overrides: str) -> subprocess.Popen[bytes]:
    argv = [
        sys.executable,
        "-m",
        "polar_cli",
        "generate",
        str(ROOT / "recipes" / "demo.yaml"),
        "--out",
        str(out),
        "--no-progress",
        "--json",
        f"cluster.ray.address={ray_cluster.address}",
        "runtime.min_free_gb=0",
        *overrides,
    ]
    return subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(proc: subprocess.Popen[bytes]) -> tuple[int, dict[str, Any], str]:
    stdout, stderr = proc.communicate(timeout=TIMEOUT)
    summary = json.loads(stdout) if stdout.strip() else {}
    return proc.returncode, summary, stderr.decode(errors="replace")


def lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def node_containers(out: Path) -> list[str]:
    """Containers owned by this run's node actors (any that ever started: each wrote its node.json), alive or not:
    scoped so that other Docker work on the machine does not count."""
    pids = {json.loads(p.read_text())["pid"] for p in out.glob("nodes/*/node.json")}
    assert pids, "no node started"
    client = connect()
    try:
        found = client.containers.list(all=True, filters={"label": [MANAGED_LABEL, "polar.role=session"]})
        return [c.name for c in found if int(c.labels.get(OWNER_LABEL, "::0").split(":")[1] or 0) in pids]
    finally:
        client.close()


def assert_every_key_once_accepted(out: Path, n: int) -> list[dict[str, Any]]:
    corpus = lines(out / "corpus.jsonl")
    keys = [r["key"] for r in corpus]
    assert len(keys) == len(set(keys)) == n, keys
    assert lines(out / "rejects.jsonl") == []
    assert all(r["accepted"] and r["reward"] == 1.0 for r in corpus)
    return corpus


def test_the_demo_on_three_nodes_accepts_every_gold_attempt_with_rows_from_every_node(
    cluster: Any, tmp_path: Path
) -> None:
    """Two nodes at the start, a third that joins mid-run and gets work: each node holds two sessions (one RUN slot,
    one POSTRUN worker), so the eighteen sessions (two attempts of each of nine instances) queue at the driver.

    The run is sized so that work is still queued when the third node's actor is up, even on a loaded two-core CI
    machine where a Ray worker takes tens of seconds to start: a node that joins after the queue has drained has
    nothing to take, and that would be no failure of the fleet (a run of nine sessions once drained first in CI)."""
    add_nodes(cluster, 1)
    out = tmp_path / "run"
    small = ("concurrency.run=1", "concurrency.ready=0", "concurrency.postrun=1", "concurrency.init=1")
    proc = start(
        cluster,
        out,
        "attempts=2",
        "output.collect_capture=true",
        "cluster.nodes.poll_interval=1",
        "engine.latency=2.0",
        *small,
    )
    wait_for_capture(out / "nodes", proc)
    add_nodes(cluster, 1)
    joined_at = time.monotonic()
    code, summary, stderr = finish(proc)
    assert code == 0, stderr[-4000:]
    corpus = assert_every_key_once_accepted(out, 18)
    nodes = {r["node_id"] for r in corpus}
    took = f"run went on {time.monotonic() - joined_at:.0f} s after the third raylet joined"
    assert len(nodes) == 3 and sum(summary["by_node"].values()) == 18, (summary["by_node"], took)
    assert [n["capacity"] for n in summary["cluster"]["nodes"]] == [2, 2, 2]
    for row in corpus:  # collected: the capture records are in the run directory, where the row says
        assert (out / row["capture_path"]).is_file()
    assert summary["cluster"]["retries"] == {} and not node_containers(out)


def wait_for_capture(node_dir: Path, proc: subprocess.Popen[bytes]) -> None:
    """Until a session on ``node_dir``'s node (or on any node under it) has called the model."""
    deadline = time.monotonic() + TIMEOUT
    while not any(p.stat().st_size for p in node_dir.glob("**/capture/*.jsonl")):
        assert proc.poll() is None, proc.communicate()[1][-4000:]
        assert time.monotonic() < deadline, f"no session started on {node_dir.name}"
        time.sleep(0.1)


def test_a_node_lost_mid_run_costs_no_row_and_leaves_no_container(cluster: Any, tmp_path: Path) -> None:
    doomed, _ = add_nodes(cluster, 2)
    out = tmp_path / "run"
    proc = start(cluster, out, "engine.latency=2.0")
    wait_for_capture(out / "nodes" / f"node-{doomed.node_id[:8]}", proc)
    cluster.remove_node(doomed)  # its raylet, its workers and the node actor die
    code, summary, stderr = finish(proc)
    assert code == 0, stderr[-4000:]
    assert_every_key_once_accepted(out, 9)
    lost = [e for e in lines(out / "errors.jsonl") if "node_lost" in (e.get("reason") or "")]
    assert lost and summary["retried_by_cause"].get("node_lost") == len(lost), summary
    assert summary["pending"] == 0 and summary["errors_last_segment"] == 0
    assert not node_containers(out)


def test_kill_9_of_the_driver_then_the_same_command_resumes(cluster: Any, tmp_path: Path) -> None:
    add_nodes(cluster, 1)
    out = tmp_path / "run"
    proc = start(cluster, out, "engine.latency=1.0")
    deadline = time.monotonic() + TIMEOUT
    while not lines(out / "corpus.jsonl"):
        assert proc.poll() is None, proc.communicate()[1][-4000:]
        assert time.monotonic() < deadline
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    written = len(lines(out / "corpus.jsonl"))
    assert 0 < written < 9
    code, summary, stderr = finish(start(cluster, out, "engine.latency=1.0"))
    assert code == 0, stderr[-4000:]
    assert_every_key_once_accepted(out, 9)
    assert summary["segments"] == 2
    assert not node_containers(out)
