"""Harnesses in gateway-only sandboxes (`runtime.network: gateway-only`) on a real Docker engine.

For Pi, in full: the session container runs with Docker's ``none`` network; the gateway listens on a Unix socket
as well, its directory mounted read-only; the relay (the container's main process) forwards 127.0.0.1:RELAY_PORT to
it. The harness creates its probe file through the gateway (the model's tool call), its calls are captured, and from
inside the same container nothing else answers: not the inference server's port (the double's, by 127.0.0.1; and a
listener on all host interfaces, as a server bound to 0.0.0.0 is, by 127.0.0.1 and by the host's bridge address),
not the gateway's own TCP port, not an outside address (1.1.1.1:443, and the Debian mirror the images are built
from, by IP); there is no Docker socket and the socket directory is read-only. A host-network container running the
same probe reaches every one of those addresses, so a failure inside means the sandbox, not the probe. Every other
harness (aider by an edit block) writes its probe file through the relay too.

What this cannot show: other escape routes than TCP connects (IPv6 is off with ``none`` too, but raw sockets, a
kernel exploit or a writable host mount are out of its scope), or a harness whose own sandboxing needs a network.
"""

from __future__ import annotations

import shlex
import shutil
import socket
import tempfile
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from polar_cli.capture import CaptureRecord, read_capture_dir
from polar_cli.harness import ADAPTERS, Wiring
from polar_cli.harness.session import SessionOutcome, SessionSpec, run_session
from polar_cli.runtime.base import GATEWAY_ONLY, GATEWAY_SOCKET_DIR, Container, ContainerSpec
from polar_cli.runtime.bootstrap import debian_mirror
from polar_cli.runtime.docker import DockerRuntime
from tests.integration.harness.shell_policy import SHELL_TOOLS, ShellToolDouble
from tests.support.gateway import RunningGateway, running_gateway

pytestmark = pytest.mark.integration

PROBE = "/testbed/polar_gateway_only_probe.txt"


def connects(container: Container, host: str, port: int) -> bool:
    """Whether a TCP connect from inside the container succeeds (bash's /dev/tcp, 5 s at most)."""
    script = f"exec 3<>/dev/tcp/{host}/{port}"
    result = container.exec(["timeout", "5", "bash", "-c", script], timeout=30)
    return result.exit_code == 0


@pytest.fixture
def all_interfaces_listener() -> Iterator[int]:
    """A TCP listener on every host interface (as an inference server bound to 0.0.0.0 is); its port."""
    server = socket.create_server(("0.0.0.0", 0))
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                conn.close()
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        server.close()


def bridge_gateway(runtime: DockerRuntime) -> str:
    """The host's address on Docker's default bridge (docker0): the IPAM's Gateway, which an engine started afresh
    may leave out of the config; Docker then gives the bridge the subnet's first address."""
    import ipaddress

    network: dict[str, Any] = runtime.client.api.inspect_network("bridge")
    config = network["IPAM"]["Config"][0]
    if config.get("Gateway"):
        return str(config["Gateway"])
    return str(next(ipaddress.ip_network(config["Subnet"]).hosts()))


def mirror_address() -> tuple[str, int]:
    """The Debian mirror the images are built from (the host reaches it), by IP."""
    url = urllib.parse.urlsplit(debian_mirror("bookworm"))
    port = url.port or (443 if url.scheme == "https" else 80)
    info = socket.getaddrinfo(url.hostname or "", port, socket.AF_INET, socket.SOCK_STREAM)
    return str(info[0][4][0]), port


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    """A private directory for the gateway's Unix socket (short: a socket's path is limited to 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="polar-gateway-test-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def gateway_only_session(
    runtime: DockerRuntime,
    harness: str,
    image: str,
    bundle: str,
    upstream_url: str,
    socket_dir: Path,
    tmp_path: Path,
    after_run: Callable[[Container], None] | None = None,
    on_gateway: Callable[[RunningGateway], None] | None = None,
) -> tuple[SessionOutcome, list[CaptureRecord]]:
    session_id = f"gwonly-{tmp_path.name}"
    with running_gateway(upstream_url, tmp_path / "capture", upstream_timeout=120.0, socket_dir=socket_dir) as gateway:
        if on_gateway is not None:
            on_gateway(gateway)
        spec = SessionSpec(
            session_id=session_id,
            harness=ADAPTERS[harness],
            image=image,
            instruction="Use the tool you are given.",
            bundle=bundle,
            timeout=240.0,
            network=GATEWAY_ONLY,
            gateway_socket=str(socket_dir),
            relay=runtime.relay(build=False),
        )
        key = gateway.open_session(session_id)
        # the gateway's own URL: the session wires the harness to the relay instead
        outcome = run_session(runtime, spec, Wiring(gateway.url, key), tmp_path / "artifacts", after_run=after_run)
        gateway.flush()
    return outcome, read_capture_dir(tmp_path / "capture").get(session_id, [])


def test_pi_works_through_the_gateway_and_reaches_nothing_else(
    runtime: DockerRuntime,
    base_image: str,
    bundles: dict[str, str],
    all_interfaces_listener: int,
    socket_dir: Path,
    tmp_path: Path,
) -> None:
    bridge = bridge_gateway(runtime)
    mirror = mirror_address()
    seen: dict[str, Any] = {}
    targets: dict[str, tuple[str, int]] = {}
    command = f"printf %s {shlex.quote('through the relay')} > {PROBE}"
    with ShellToolDouble(command) as upstream:
        double_port = int(urllib.parse.urlsplit(upstream.url).port or 0)

        def aim(gateway: RunningGateway) -> None:
            targets.update(
                {
                    "double by 127.0.0.1": ("127.0.0.1", double_port),
                    "gateway tcp by 127.0.0.1": ("127.0.0.1", gateway.port),
                    "0.0.0.0 listener by 127.0.0.1": ("127.0.0.1", all_interfaces_listener),
                    "0.0.0.0 listener by the bridge address": (bridge, all_interfaces_listener),
                    "1.1.1.1:443": ("1.1.1.1", 443),
                    "the Debian mirror by IP": mirror,
                }
            )

        def inspect(container: Container) -> None:
            seen["probe"] = container.get_file(PROBE)
            seen["reached"] = {name: connects(container, *where) for name, where in targets.items()}
            docker_sock = container.exec(["test", "-e", "/var/run/docker.sock"], timeout=30)
            seen["docker socket"] = docker_sock.exit_code == 0
            touch = container.exec(["touch", f"{GATEWAY_SOCKET_DIR}/x"], timeout=30)
            seen["socket dir writable"] = touch.exit_code == 0
            # control: the same probe from a host-network container reaches every one of them (while all listen)
            control = runtime.start(ContainerSpec(image=base_image, role="probe", network="host"))
            try:
                seen["reached from host"] = {name: connects(control, *where) for name, where in targets.items()}
            finally:
                control.remove()

        outcome, records = gateway_only_session(
            runtime, "pi", base_image, bundles["pi"], upstream.url, socket_dir, tmp_path, inspect, aim
        )

    assert outcome.status == "ok", f"{outcome.status} ({outcome.error}):\n{outcome.output[-3000:]}"
    assert seen["probe"] == b"through the relay"
    assert len(records) >= 2, "the harness's calls did not go through the gateway"
    assert seen["reached"] == dict.fromkeys(targets, False), seen["reached"]
    assert seen["docker socket"] is False and seen["socket dir writable"] is False
    assert seen["reached from host"] == dict.fromkeys(targets, True), seen["reached from host"]


@pytest.mark.parametrize("harness", [h for h in ADAPTERS if h != "pi"])
def test_every_harness_works_in_a_gateway_only_sandbox(
    harness: str, runtime: DockerRuntime, base_image: str, bundles: dict[str, str], socket_dir: Path, tmp_path: Path
) -> None:
    seen: dict[str, bytes] = {}

    def inspect(container: Container) -> None:
        seen["probe"] = container.get_file(PROBE)

    command = f"printf %s {shlex.quote(harness)} > {PROBE}"
    # a harness without a shell tool (aider) writes the file from an edit block in its reply, ending in a newline
    shell_tool = ADAPTERS[harness].shell_tool in SHELL_TOOLS
    edit = None if shell_tool else (Path(PROBE).name, harness)
    with ShellToolDouble(command, edit=edit) as upstream:
        outcome, records = gateway_only_session(
            runtime, harness, base_image, bundles[harness], upstream.url, socket_dir, tmp_path, inspect
        )
    assert outcome.status == "ok", f"{outcome.status} ({outcome.error}):\n{outcome.output[-3000:]}"
    assert seen["probe"] == harness.encode() + (b"" if shell_tool else b"\n")
    assert len(records) >= (2 if shell_tool else 1)
