"""The egress allowlist on a real Docker engine: a gateway-only sandbox reaches an allowed host through Polar's
proxy, and nothing else.

Pi runs in a session container with Docker's ``none`` network and an allowlist naming ``registry.polar.test``
(the session's proxy socket mounted beside the gateway's, a second relay, the proxy variables in the container's
environment). The model's tool call clones a git repository over http from that host, with git's own proxy support
(``http_proxy``), while Pi's own model calls still go to the gateway (``NO_PROXY``). From the same container, a
host the allowlist does not name gets 403 (through git, and by a raw ``CONNECT``), an allowed ``CONNECT`` tunnels,
and the destination's port is not reachable directly. Every attempt is in the session's log, which lands in its
artifacts (``egress.jsonl``) as the row's ``egress`` does.

What this cannot show: real DNS and TLS. There is no internet here, so the allowed host is an HTTP server on the
host's loopback, its name resolved by a table given to the proxy (and ``private_addresses`` on, as for an internal
mirror); the CONNECT tunnel carries plain HTTP, not a TLS handshake. Refusing non-public addresses is shown by the
unit tests (tests/unit/egress).
"""

from __future__ import annotations

import asyncio
import functools
import http.server
import json
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from polar_cli.egress.policy import allowlist
from polar_cli.egress.proxy import EgressProxy
from polar_cli.egress.sessions import LOG_FILE, SessionEgress
from polar_cli.harness import ADAPTERS, Wiring
from polar_cli.harness.session import SessionSpec, run_session
from polar_cli.runtime.base import GATEWAY_ONLY, Container
from polar_cli.runtime.docker import DockerRuntime
from polar_cli.runtime.egress import EGRESS_PORT
from tests.integration.harness.shell_policy import ShellToolDouble
from tests.integration.harness.test_gateway_only_sandbox import connects
from tests.support.gateway import running_gateway

pytestmark = pytest.mark.integration

ALLOWED = "registry.polar.test"
REFUSED = "refused.polar.test"
PROBE = "/testbed/polar_egress_probe.txt"


def git(*args: str, cwd: Path) -> None:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env={"PATH": "/usr/bin:/bin", **env})


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[int]:
    """A git repository served over dumb http from the host's loopback (the "allowed registry"); its port."""
    root = tmp_path / "served"
    work = tmp_path / "work"
    work.mkdir()
    (work / "VERSION").write_text("tools 1.2.3\n")
    git("init", "-q", "-b", "main", cwd=work)
    git("add", "VERSION", cwd=work)
    git("commit", "-q", "-m", "v", cwd=work)
    git("clone", "-q", "--bare", str(work), str(root / "tools.git"), cwd=tmp_path)
    git("update-server-info", cwd=root / "tools.git")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


async def names(host: str, port: int) -> list[str]:
    """The proxy's resolver here: only the allowed name has an address (the host's loopback)."""
    if host == ALLOWED:
        return ["127.0.0.1"]
    raise OSError(f"no such host {host}")


def raw_connect(container: Container, host: str, port: int) -> str:
    """A CONNECT sent by hand to the egress relay; once tunnelled, a GET of the repository's HEAD through it."""
    script = (
        f"exec 3<>/dev/tcp/127.0.0.1/{EGRESS_PORT}; printf 'CONNECT {host}:{port} HTTP/1.1\\r\\n\\r\\n' >&3;"
        " read -r status <&3; echo \"$status\"; case $status in *' 200 '*) read -r _ <&3;"
        f" printf 'GET /tools.git/HEAD HTTP/1.0\\r\\nHost: {host}\\r\\n\\r\\n' >&3;; esac; cat <&3"
    )
    result = container.exec(["timeout", "20", "bash", "-c", script], timeout=60)
    return result.output.decode(errors="replace")


def test_an_allowed_host_is_reached_through_the_proxy_and_everything_is_logged(
    runtime: DockerRuntime, base_image: str, bundles: dict[str, str], registry: int, tmp_path: Path
) -> None:
    socket_dir = Path(tmp_path / "gw")
    socket_dir.mkdir()
    clone = f"git clone -q http://{ALLOWED}:{registry}/tools.git /tmp/tools && cat /tmp/tools/VERSION > {PROBE}"
    seen: dict[str, Any] = {}

    def inspect(container: Container) -> None:
        seen["probe"] = container.get_file(PROBE)
        env = container.exec(["sh", "-c", "echo $HTTPS_PROXY $http_proxy $NO_PROXY"], timeout=30)
        seen["env"] = env.output.decode().strip()
        url = f"http://{REFUSED}:{registry}/tools.git"
        refused = container.exec(["git", "ls-remote", url], timeout=60)
        seen["git refused"] = (refused.exit_code, refused.output.decode(errors="replace"))
        seen["connect allowed"] = raw_connect(container, ALLOWED, registry)
        seen["connect refused"] = raw_connect(container, REFUSED, 443)
        seen["direct"] = connects(container, "127.0.0.1", registry)

    with (
        ShellToolDouble(clone) as upstream,
        running_gateway(upstream.url, tmp_path / "capture", upstream_timeout=120.0, socket_dir=socket_dir) as gw,
    ):
        egress = SessionEgress(allowlist([ALLOWED], [registry], private_addresses=True), EgressProxy(resolve=names))
        spec = SessionSpec(
            session_id="egress-1",
            harness=ADAPTERS["pi"],
            image=base_image,
            instruction="Use the tool you are given.",
            bundle=bundles["pi"],
            timeout=240.0,
            network=GATEWAY_ONLY,
            gateway_socket=str(socket_dir),
            relay=runtime.relay(build=False),
        )
        spec = asyncio.run_coroutine_threadsafe(egress.open(spec), gw.loop).result(10)
        key = gw.open_session(spec.session_id)
        artifacts = tmp_path / "artifacts"
        outcome = run_session(runtime, spec, Wiring(gw.url, key), artifacts, after_run=inspect)
        log = asyncio.run_coroutine_threadsafe(egress.close(spec.session_id, artifacts), gw.loop).result(30)

    assert outcome.status == "ok", f"{outcome.status} ({outcome.error}):\n{outcome.output[-3000:]}"
    assert seen["probe"] == b"tools 1.2.3\n", "the agent's clone through the proxy"
    assert seen["env"] == f"http://127.0.0.1:{EGRESS_PORT} http://127.0.0.1:{EGRESS_PORT} 127.0.0.1,localhost"
    code, said = seen["git refused"]
    assert code != 0 and "403" in said, said
    assert seen["connect allowed"].startswith("HTTP/1.1 200 Connection established"), seen["connect allowed"]
    assert "ref: refs/heads/main" in seen["connect allowed"]
    assert seen["connect refused"].startswith("HTTP/1.1 403 Forbidden"), seen["connect refused"]
    assert seen["direct"] is False, "the registry's port is reachable only through the proxy"

    assert log is not None
    assert [json.loads(line) for line in (artifacts / LOG_FILE).read_text().splitlines()] == log
    clone_gets = [e for e in log if e["method"] == "GET" and e["host"] == ALLOWED]
    assert clone_gets and all(e["decision"] == "allowed" and e["port"] == registry for e in clone_gets)
    assert sum(e["bytes_down"] for e in clone_gets) > 0
    decided = {(e["method"], e["host"], e["decision"], e["status"]) for e in log if e not in clone_gets}
    assert decided == {
        ("GET", REFUSED, "refused", 403),
        ("CONNECT", ALLOWED, "allowed", 200),
        ("CONNECT", REFUSED, "refused", 403),
    }, json.dumps(log, indent=1)
    assert all(e["time"] and e["seconds"] >= 0 for e in log)


@pytest.mark.parametrize("harness", [h for h in ADAPTERS if h != "pi"])
def test_every_harness_reaches_the_gateway_with_the_proxy_variables_set(
    harness: str, runtime: DockerRuntime, base_image: str, bundles: dict[str, str], tmp_path: Path
) -> None:
    """A harness whose own HTTP client honoured ``HTTPS_PROXY`` but not ``NO_PROXY`` would send its model calls to
    the egress proxy (refused: 127.0.0.1 is not allowed) and fail here; each writes its probe file as in a plain
    gateway-only sandbox (aider from an edit block)."""
    from tests.integration.harness.shell_policy import SHELL_TOOLS

    socket_dir = tmp_path / "gw"
    socket_dir.mkdir()
    probe = "/testbed/polar_gateway_only_probe.txt"
    shell_tool = ADAPTERS[harness].shell_tool in SHELL_TOOLS
    edit = None if shell_tool else (Path(probe).name, harness)
    seen: dict[str, bytes] = {}
    with (
        ShellToolDouble(f"printf %s {harness} > {probe}", edit=edit) as upstream,
        running_gateway(upstream.url, tmp_path / "capture", upstream_timeout=120.0, socket_dir=socket_dir) as gw,
    ):
        egress = SessionEgress(allowlist([ALLOWED]), EgressProxy(resolve=names))
        spec = SessionSpec(
            session_id=f"egress-{harness}",
            harness=ADAPTERS[harness],
            image=base_image,
            instruction="Use the tool you are given.",
            bundle=bundles[harness],
            timeout=240.0,
            network=GATEWAY_ONLY,
            gateway_socket=str(socket_dir),
            relay=runtime.relay(build=False),
        )
        spec = asyncio.run_coroutine_threadsafe(egress.open(spec), gw.loop).result(10)
        key = gw.open_session(spec.session_id)

        def inspect(container: Container) -> None:
            seen["probe"] = container.get_file(probe)

        outcome = run_session(runtime, spec, Wiring(gw.url, key), tmp_path / "artifacts", after_run=inspect)
        log = asyncio.run_coroutine_threadsafe(egress.close(spec.session_id), gw.loop).result(30)
    assert outcome.status == "ok", f"{outcome.status} ({outcome.error}):\n{outcome.output[-3000:]}"
    assert seen["probe"] == harness.encode() + (b"" if shell_tool else b"\n")
    assert log is not None and all(e["host"] != "127.0.0.1" for e in log), log
