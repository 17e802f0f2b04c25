"""Safe sandbox defaults (issue 23 #10): a session container gets a pids limit, a memory limit without swap,
``no-new-privileges`` and only the capabilities the shipped harnesses need; the recipe's runtime section overrides
each; a grading container keeps Docker's defaults, as SWE-bench's do. Before, a session container had no pids limit,
no memory limit unless the recipe set one, Docker's default capabilities and could gain privileges."""

from __future__ import annotations

from typing import Any

import pytest

from polar_cli.config import parse_recipe
from polar_cli.harness import ADAPTERS
from polar_cli.harness.session import SessionSpec
from polar_cli.runtime.base import DOCKER_DEFAULTS, SESSION_CAPABILITIES, ContainerSpec, Sandbox
from polar_cli.runtime.docker import DockerRuntime, host_config_args
from tests.unit.generate.test_generate_rows import RECIPE
from tests.unit.runtime.test_runtime_docker import FakeAPI, fake  # noqa: F401  (the fixture)

# Docker's default capability set; what a session container must not keep of it
DOCKER_DEFAULT_CAPS = {
    "CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID", "SETUID", "SETFCAP", "SETPCAP",
    "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE",
}  # fmt: skip
DROPPED = {"NET_RAW", "MKNOD", "AUDIT_WRITE", "SYS_CHROOT", "SETFCAP", "SETPCAP"}


def session_spec(**fields: Any) -> SessionSpec:
    return SessionSpec("s1", ADAPTERS["pi"], "img", "fix it", "bundle-pi", **fields)


def test_a_session_container_is_created_confined(fake: tuple[DockerRuntime, FakeAPI]) -> None:  # noqa: F811
    runtime, api = fake
    runtime.start(session_spec(memory_bytes=1 << 30).container_spec())
    host = api.created["host_config"]
    assert host["pids_limit"] == 4096
    assert host["security_opt"] == ["no-new-privileges:true"]
    assert host["cap_drop"] == ["ALL"] and set(host["cap_add"]) == set(SESSION_CAPABILITIES)
    assert set(host["cap_add"]) == DOCKER_DEFAULT_CAPS - DROPPED
    assert host["mem_limit"] == host["memswap_limit"] == 1 << 30  # no swap beyond the limit
    assert host["init"] is True


def test_a_grading_container_keeps_dockers_defaults_as_swebenchs_do() -> None:
    host = host_config_args(ContainerSpec(image="img", role="eval", network="bridge"))
    assert host["pids_limit"] is None and host["security_opt"] is None
    assert "cap_drop" not in host and "cap_add" not in host
    assert ContainerSpec(image="img").sandbox == DOCKER_DEFAULTS


def test_a_recipe_runs_sessions_confined_by_default_with_a_memory_limit() -> None:
    runtime = parse_recipe(RECIPE, []).runtime
    assert runtime.sandbox() == Sandbox() and runtime.memory_mb == 16384


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["runtime.pids_limit=100"], {"pids_limit": 100}),
        (["runtime.pids_limit=null"], {"pids_limit": None}),
        (["runtime.no_new_privileges=false"], {"security_opt": None}),
        (["runtime.capabilities=[chown, CAP_KILL]"], {"cap_drop": ["ALL"], "cap_add": ["CHOWN", "KILL"]}),
        (["runtime.capabilities=[]"], {"cap_drop": ["ALL"], "cap_add": []}),
        (["runtime.capabilities=null"], {}),  # Docker's defaults: nothing dropped
    ],
)
def test_each_limit_is_overridable_in_the_recipes_runtime_section(
    overrides: list[str], expected: dict[str, Any]
) -> None:
    sandbox = parse_recipe(RECIPE, overrides).runtime.sandbox()
    host = host_config_args(session_spec(sandbox=sandbox).container_spec())
    for key, value in expected.items():
        assert host[key] == value, key
    if "capabilities=null" in overrides[0]:
        assert "cap_drop" not in host


def test_the_serve_plan_takes_the_services_sandbox_never_the_tasks() -> None:
    from polar_cli.serve.config import parse_serve_config
    from polar_cli.serve.models import TaskRequest
    from polar_cli.serve.tasks import Manifests, resolve

    config = parse_serve_config(
        {"harnesses": ["pi"], "engine": {"kind": "gold", "tokenizer": "qwen3"}, "runtime": {"pids_limit": 512}}
    )
    request = TaskRequest.model_validate(
        {"task_id": "t", "instruction": "x", "runtime": {"image": "img"}, "harness": "pi"}
    )
    plan = resolve(request, config, config.adapters(), Manifests())
    assert plan.sandbox.pids_limit == 512 and plan.sandbox.no_new_privileges
