"""`polar proxy` as a user runs it: a subprocess in front of an upstream, stopped with SIGTERM."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import anthropic
import pytest

from polar_cli.capture import read_capture_dir
from tests.support.sglang_double import Reply, SGLangDouble


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_proxy(upstream: str, capture: Path, *extra: str) -> tuple[subprocess.Popen[str], int]:
    port = free_port()
    argv = [sys.executable, "-m", "polar_cli", "proxy", "--upstream", upstream, "--port", str(port)]
    proc = subprocess.Popen(
        [*argv, "--capture-dir", str(capture), *extra], stderr=subprocess.PIPE, text=True, stdout=subprocess.DEVNULL
    )
    deadline = time.time() + 30
    while time.time() < deadline and proc.poll() is None:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc, port
        time.sleep(0.05)
    return proc, port


@pytest.mark.parametrize("dialect", ["sglang", "sglang-legacy"])
def test_proxy_probes_the_token_fields_serves_and_flushes_on_sigterm(tmp_path: Path, dialect: str) -> None:
    with SGLangDouble(dialect=dialect, default=Reply("pong")) as upstream:
        proc, port = start_proxy(upstream.url + "/v1", tmp_path, "--session-key", "sk-a=session-a")
        try:
            client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{port}", api_key="sk-a", max_retries=0)
            for _ in range(3):
                reply = client.messages.create(model="m", max_tokens=8, messages=[{"role": "user", "content": "ping"}])
                assert reply.content[0].text == "pong"  # type: ignore[union-attr]
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=20)
        assert proc.returncode == 0, err
        assert f"({dialect}, model polar-test-model)" in err
        sessions = read_capture_dir(tmp_path)
        assert list(sessions) == ["session-a"] and len(sessions["session-a"]) == 3
        probe = upstream.chat_requests[0].body
        rids = [str(r.body.get("rid", "")) for r in upstream.chat_requests]
        dialect_probes = [r for r in rids if r.startswith("polar-probe-sglang")]
        # then the chat template's traits are probed (templates/traits.py), then the harness's three calls
        trait_probes = [r for r in rids if r.startswith("polar-probe-traits")]
        assert probe["max_tokens"] == 2 and len(dialect_probes) == (2 if dialect == "sglang-legacy" else 1)
        assert trait_probes and len(rids) == len(dialect_probes) + len(trait_probes) + 3


def test_proxy_refuses_to_start_on_an_upstream_without_token_ids(tmp_path: Path) -> None:
    with SGLangDouble(default=Reply("x", token_ids=False)) as upstream:
        proc, _ = start_proxy(upstream.url, tmp_path, "--allow-unknown-keys")
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 1
    assert "carries no prompt and response token ids" in err


def test_proxy_bad_usage_exits_2(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "polar_cli", "proxy", "--upstream", "http://127.0.0.1:1", "--capture-dir",
         str(tmp_path), "--chat-template-kwargs", "[1]"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert proc.returncode == 2 and "JSON object" in proc.stderr
