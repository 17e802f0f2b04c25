"""`polar serve` as a trainer meets it: a process of its own on loopback, a callback receiver, and the checks the
serve tests share (results token-exact against the capture, no container left)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from polar_cli.capture import read_session
from polar_cli.client import PolarClient
from polar_cli.runtime.base import MANAGED_LABEL
from polar_cli.runtime.docker import connect

ROOT = Path(__file__).resolve().parents[3]
MANIFEST = ROOT / "recipes" / "demo" / "instances.jsonl"
DEMO_IDS = [json.loads(line)["instance_id"] for line in MANIFEST.read_text().splitlines() if line.strip()]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_config(
    tmp: Path, engine: dict[str, Any], *, port: int, extra: dict[str, Any] | None = None, **service: Any
) -> Path:
    config: dict[str, Any] = {
        "name": "serve-test",
        "harnesses": ["pi"],
        "engine": {"tokenizer": "qwen3", "token_in": True, **engine},
        "runtime": {"min_free_gb": 0},  # gateway-only sandboxes, the default
        "concurrency": {"init": 2, "run": 2, "postrun": 2, "ready": 2},
        "timeouts": {"session": 600, "eval": 600},
        "service": {"port": port, "state_dir": str(tmp / "state"), "callback": {"backoff": 0.2}, **service},
        **(extra or {}),
    }
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / "serve.json"  # JSON is YAML
    path.write_text(json.dumps(config))
    return path


class Service:
    def __init__(self, config: Path, log: Path, port: int) -> None:
        self.config, self.log, self.url = config, log, f"http://127.0.0.1:{port}"
        argv = [sys.executable, "-m", "polar_cli", "serve", "--config", str(config), "--log-level", "info"]
        self.proc = subprocess.Popen(argv, cwd=ROOT, stdout=log.open("ab"), stderr=subprocess.STDOUT)
        self.client = PolarClient(self.url, timeout=60)
        deadline = time.monotonic() + 600  # the first start may build the pi bundle and the demo images
        while not self.client.health():
            assert self.proc.poll() is None, log.read_text()[-4000:]
            assert time.monotonic() < deadline, "polar serve did not answer"
            time.sleep(0.2)

    def stop(self) -> None:
        self.client.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(120)


@contextmanager
def service(
    tmp: Path, engine: dict[str, Any], *, extra: dict[str, Any] | None = None, **settings: Any
) -> Iterator[Service]:
    port = free_port()
    running = Service(write_config(tmp, engine, port=port, extra=extra, **settings), tmp / "serve.log", port)
    try:
        yield running
    finally:
        running.stop()


class Receiver:
    """Callback receiver on loopback: every POST recorded with its idempotency key."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, dict[str, Any]]] = []
        seen = self.posts

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                seen.append((self.headers.get("idempotency-key", ""), json.loads(body)))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/done"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def idempotency_keys(self) -> list[str]:
        return [k for k, _ in self.posts]

    def close(self) -> None:
        self.server.shutdown()


def instance_task(task_id: str, instance_id: str, n: int, **fields: Any) -> dict[str, Any]:
    return {
        "task_id": task_id,
        "instance": {"manifest": str(MANIFEST), "instance_id": instance_id},
        "num_samples": n,
        "harness": "pi",
        "sampling": {"seed_base": 7},
        **fields,
    }


def assert_token_exact(state_dir: Path, session: dict[str, Any]) -> None:
    """Every trace of the session is what the upstream answered: its prompt is the first call's prompt ids, and its
    trainable ids, in order, are the sampled ids of its calls, with their logprobs."""
    records = {r.seq: r for r in read_session(state_dir / "capture" / f"{session['session_id']}.jsonl")}
    assert session["traces"], session
    for trace in session["traces"]:
        calls = [records[s] for s in trace["seqs"]]
        assert trace["prompt_ids"] == list(calls[0].prompt_ids)
        sampled = [i for i, m in zip(trace["response_ids"], trace["loss_mask"], strict=True) if m == 1]
        assert sampled == [i for c in calls for i in c.response_ids]
        logprobs = [p for p, m in zip(trace["response_logprobs"], trace["loss_mask"], strict=True) if m == 1]
        assert logprobs == [p for c in calls for p in c.response_logprobs]


def containers_of(label: str) -> list[str]:
    client = connect()
    try:
        return [c.name for c in client.containers.list(all=True, filters={"label": [MANAGED_LABEL, label]})]
    finally:
        client.close()


def wait_for(predicate: Any, timeout: float, what: str, step: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(step)
