"""Gateway-only sandboxes (`runtime.network: gateway-only`) without an engine: the container spec a session asks for,
how DockerRuntime hands it to Docker, the relay probe at INIT, the gateway's Unix socket, and the recipe setting.

What these cannot show: that Docker's ``none`` network really cuts a container off, that the relay forwards, that a
harness works through it; tests/integration/harness/test_gateway_only_sandbox.py runs those on a real engine.
"""

from __future__ import annotations

import asyncio
import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from polar_cli.config import load_recipe
from polar_cli.errors import ConfigError, RuntimeFailure
from polar_cli.generate.stages import GenerateStages, SessionPlan
from polar_cli.harness import ADAPTERS, Wiring
from polar_cli.harness.session import SessionSpec, run_session
from polar_cli.node.session_steps import SessionSteps
from polar_cli.runtime.base import (
    GATEWAY_ONLY,
    GATEWAY_SOCKET_DIR,
    GATEWAY_SOCKET_NAME,
    RELAY_BIN,
    RELAY_URL,
    ContainerSpec,
    network_mode,
    relay_argv,
)
from polar_cli.runtime.docker import DockerRuntime, bind_list
from polar_cli.swe.manifest import Instance
from tests.support.fake_runtime import FakeRuntime, result
from tests.support.gateway import running_gateway
from tests.support.models import QWEN3_TINY_DIR

REPO = Path(__file__).resolve().parents[3]
WIRING = Wiring("http://127.0.0.1:1234", "sk-1")


def gateway_only_spec(**kw: Any) -> SessionSpec:
    values: dict[str, Any] = {
        "session_id": "s1",
        "harness": ADAPTERS["pi"],
        "image": "img",
        "instruction": "do it",
        "bundle": "bundle-pi",
        "network": GATEWAY_ONLY,
        "gateway_socket": "/tmp/polar-gateway-x",
        "relay": "bundle-relay",
    }
    values.update(kw)
    return SessionSpec(**values)


def test_network_names_map_to_docker_modes() -> None:
    assert network_mode(GATEWAY_ONLY) == "none"
    assert network_mode("host") == "host" and network_mode("bridge") == "bridge"
    assert network_mode("my-net") == "my-net"
    assert relay_argv("probe") == (RELAY_BIN, "probe", RELAY_URL.rsplit(":", 1)[1], "/run/polar-gateway/gateway.sock")


def test_session_spec_mounts_the_relay_and_only_the_socket_directory() -> None:
    spec = gateway_only_spec().container_spec()
    assert spec.network == GATEWAY_ONLY
    assert spec.volumes_from == ("bundle-pi", "bundle-relay")
    assert dict(spec.binds) == {"/tmp/polar-gateway-x": GATEWAY_SOCKET_DIR}
    assert tuple(spec.command) == relay_argv("serve")
    # the other modes are as before: no binds, no relay, `sleep infinity`
    host = gateway_only_spec(network="host", gateway_socket=None, relay=None).container_spec()
    assert host.binds == {} and tuple(host.command) == () and host.volumes_from == ("bundle-pi",)


def test_session_is_wired_to_the_relay_and_waits_for_it(tmp_path: Path) -> None:
    runtime = FakeRuntime()
    outcome = run_session(runtime, gateway_only_spec(), WIRING, tmp_path / "art")
    (container,) = runtime.started
    assert outcome.status == "ok", outcome.error
    # the relay is probed in INIT (at once with stripping git and writing the harness's files), before the run
    probes = [argv for argv, _, _ in container.execs if argv == list(relay_argv("probe"))]
    assert len(probes) == 1 and container.scripts.index("polar-relay") < container.scripts.index("harness")
    models = container.files["/root/.pi/agent/models.json"].decode()
    assert RELAY_URL in models and "127.0.0.1:1234" not in models


def test_a_relay_that_does_not_answer_is_an_init_error_with_nothing_left() -> None:
    runtime = FakeRuntime()
    real_start = runtime.start

    def start(spec: ContainerSpec) -> Any:
        container = real_start(spec)
        container.relay_probe = result("polar-relay: no gateway socket at /run/polar-gateway/gateway.sock\n", 1)
        return container

    runtime.start = start  # type: ignore[method-assign]
    outcome = run_session(runtime, gateway_only_spec(), WIRING)
    assert outcome.status == "init_error"
    assert outcome.error is not None and "cannot reach the gateway: polar-relay: no gateway socket" in outcome.error
    # the container is removed and the harness never ran
    assert runtime.started[0].removed >= 1 and "harness" not in runtime.started[0].scripts


def test_a_gateway_only_spec_without_socket_or_relay_fails_before_any_container() -> None:
    runtime = FakeRuntime()
    outcome = run_session(runtime, gateway_only_spec(relay=None), WIRING)
    assert outcome.status == "init_error" and "socket directory and the relay" in (outcome.error or "")
    assert runtime.started == []


class HostConfigAPI:
    def __init__(self) -> None:
        self.created: dict[str, Any] = {}

    def create_host_config(self, **kw: Any) -> dict[str, Any]:
        return kw

    def create_container(self, image: str, **kw: Any) -> dict[str, str]:
        self.created = {"image": image, **kw}
        return {"Id": "c1"}

    def start(self, cid: str) -> None:
        pass

    def remove_container(self, cid: str, **kw: Any) -> None:
        pass


def test_docker_runtime_passes_network_none_binds_and_the_relay_as_main_process() -> None:
    api = HostConfigAPI()
    with DockerRuntime(SimpleNamespace(api=api)) as runtime:
        runtime.start(gateway_only_spec().container_spec())
        host = api.created["host_config"]
        assert host["network_mode"] == "none"
        assert host["binds"] == [f"/tmp/polar-gateway-x:{GATEWAY_SOCKET_DIR}:ro"]
        assert host["volumes_from"] == ["bundle-pi:ro", "bundle-relay:ro"]
        assert [*api.created["entrypoint"], *api.created["command"]] == list(relay_argv("serve"))
        runtime.start(ContainerSpec(image="img"))
        assert api.created["host_config"]["binds"] is None and api.created["host_config"]["network_mode"] == "host"
        assert (api.created["entrypoint"], api.created["command"]) == (["sleep"], ["infinity"])


def test_bind_mounts_must_be_absolute() -> None:
    assert bind_list({"/a": "/b"}) == ["/a:/b:ro"]
    for bad in ({"a": "/b"}, {"/a": "b"}, {"/a:x": "/b"}):
        with pytest.raises(RuntimeFailure, match="absolute paths"):
            bind_list(bad)


def test_gateway_answers_on_its_unix_socket_and_removes_it_on_stop(tmp_path: Path) -> None:
    socket_dir = tmp_path / "sock"
    with running_gateway("http://127.0.0.1:9", tmp_path / "capture", socket_dir=socket_dir) as gateway:
        path = socket_dir / GATEWAY_SOCKET_NAME
        assert path.is_socket() and (path.stat().st_mode & 0o777) == 0o666
        assert gateway.socket_dir == socket_dir
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(10)
            sock.connect(str(path))
            sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            answer = b""
            while chunk := sock.recv(4096):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b'{"status":"ok"}')
    assert not path.exists()


def test_node_gateway_opens_one_socket_directory_and_removes_it(tmp_path: Path) -> None:
    from polar_cli.config import EngineConfig
    from polar_cli.inference.engines import open_engine
    from polar_cli.node.gateway import NodeGateway

    async def scenario() -> Path:
        engine = await open_engine(EngineConfig(kind="noop", tokenizer=str(QWEN3_TINY_DIR)), tmp_path)
        node = NodeGateway(engine, tmp_path / "capture")
        await node.start()
        try:
            first, second = await asyncio.gather(node.listen_unix(), node.listen_unix())
            assert first == second and [p.name for p in first.iterdir()] == [GATEWAY_SOCKET_NAME]
            assert len(str(first / GATEWAY_SOCKET_NAME)) < 108
            return first
        finally:
            await node.stop()
            await engine.close()

    directory = asyncio.run(scenario())
    assert not directory.exists()


def test_recipe_network_setting() -> None:
    recipe = load_recipe(REPO / "recipes/demo.yaml", ["runtime.network=gateway-only"])
    assert recipe.runtime.network == GATEWAY_ONLY
    assert load_recipe(REPO / "recipes/demo.yaml", ["runtime.network=my-net"]).runtime.network == "my-net"
    with pytest.raises(ConfigError, match="network"):
        load_recipe(REPO / "recipes/demo.yaml", ["runtime.network="])


def test_generate_stages_open_the_socket_and_find_the_relay_once(tmp_path: Path) -> None:
    recipe = load_recipe(REPO / "recipes/demo.yaml", ["runtime.network=gateway-only"])
    runtime = FakeRuntime()
    calls: list[str] = []

    async def listen_unix() -> Path:
        calls.append("listen")
        return tmp_path / "sock"

    gateway = SimpleNamespace(engine=SimpleNamespace(model="m"), listen_unix=listen_unix)
    instance = Instance("i-1", "o/r", "", "fix it", "", "", (), ())
    plan = SessionPlan("k", instance, ADAPTERS["pi"], 1, "img", "bundle-pi")
    with ThreadPoolExecutor(2) as executor:
        stages = GenerateStages(recipe, SessionSteps(runtime, executor), gateway, tmp_path, None)  # type: ignore[arg-type]

        async def both() -> list[tuple[str, str]]:
            return list(await asyncio.gather(stages.sandbox(), stages.sandbox()))

        first, second = asyncio.run(both())
    assert first == second == (str(tmp_path / "sock"), "bundle-relay")
    assert calls == ["listen"] and runtime.relays == 1
    spec = stages._spec(plan, "sid", first)
    assert (spec.network, spec.gateway_socket, spec.relay) == (GATEWAY_ONLY, str(tmp_path / "sock"), "bundle-relay")
    assert spec.container_spec().binds == {str(tmp_path / "sock"): GATEWAY_SOCKET_DIR}
