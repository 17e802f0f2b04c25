"""Harbor task folders as Polar reads them, checked against harbor 0.26.0's own models (pyproject's ``atif`` pin)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest
from harbor.models.task.config import TaskConfig
from harbor.models.task.paths import TaskPaths

from polar_cli.errors import ConfigError
from polar_cli.harbor.tasks import (
    BUILD_TIMEOUT,
    DEFAULT_WORKDIR,
    VERIFIER_TIMEOUT,
    is_task_source,
    load_task,
    load_tasks,
    strip_canary,
)

ROOT = Path(__file__).resolve().parents[3]
DEMO = ROOT / "recipes" / "demo-terminal"


def test_every_bundled_task_is_a_harbor_task_and_reads_as_harbor_reads_it() -> None:
    tasks = load_tasks(DEMO)
    assert [t.name for t in tasks] == sorted(p.name for p in DEMO.iterdir() if p.is_dir())
    assert len(tasks) >= 3
    for task in tasks:
        paths = TaskPaths(task.path)
        for part in (paths.config_path, paths.instruction_path, paths.test_path, paths.solve_path):
            assert part.is_file(), part
        assert (paths.environment_dir / "Dockerfile").is_file()
        config = TaskConfig.model_validate_toml(paths.config_path.read_text())
        assert task.agent_timeout == config.agent.timeout_sec
        assert task.verifier_timeout == config.verifier.timeout_sec
        assert task.build_timeout == config.environment.build_timeout_sec
        assert task.cpus == config.environment.cpus
        assert task.memory_mb == config.environment.memory_mb
        assert dict(task.verifier_env) == config.verifier.env
        assert dict(task.solution_env) == config.solution.env
        assert task.metadata == config.metadata
        assert task.instruction.encode() == paths.instruction_path.read_bytes()  # byte for byte
        assert task.has_oracle
        assert task.workdir == "/app"
        assert set(task.test_files()) == {f"/tests/{p.name}" for p in paths.tests_dir.iterdir()}


def write_task(
    root: Path, toml: str = "", *, tests: bool = True, dockerfile: str | None = "FROM debian:bookworm\n"
) -> Path:
    root.mkdir(parents=True)
    (root / "task.toml").write_text(toml)
    (root / "instruction.md").write_bytes("Do it.\r\n  with trailing spaces  \n\u00e9\n".encode())
    if dockerfile is not None:
        (root / "environment").mkdir()
        (root / "environment" / "Dockerfile").write_text(dockerfile)
    if tests:
        (root / "tests").mkdir()
        (root / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    return root


def test_defaults_are_harbors_defaults(tmp_path: Path) -> None:
    task = load_task(write_task(tmp_path / "t"))
    config = TaskConfig.model_validate_toml("")
    assert task.agent_timeout is None and config.agent.timeout_sec is None
    assert task.verifier_timeout == VERIFIER_TIMEOUT == config.verifier.timeout_sec
    assert task.build_timeout == BUILD_TIMEOUT == config.environment.build_timeout_sec
    assert task.workdir == DEFAULT_WORKDIR and not task.has_oracle
    assert task.instruction == "Do it.\r\n  with trailing spaces  \n\u00e9\n"


def test_the_workdir_is_task_tomls_else_the_dockerfiles_last(tmp_path: Path) -> None:
    dockerfile = "FROM debian:bookworm\nWORKDIR /src\nRUN true\nworkdir /srv/app\n"
    assert load_task(write_task(tmp_path / "a", dockerfile=dockerfile)).workdir == "/srv/app"
    toml = '[environment]\nworkdir = "/work"\n'
    assert load_task(write_task(tmp_path / "b", toml, dockerfile=dockerfile)).workdir == "/work"
    assert TaskConfig.model_validate_toml(toml).environment.workdir == "/work"


def test_one_task_folder_or_a_folder_of_them(tmp_path: Path) -> None:
    one = write_task(tmp_path / "set" / "b-task")
    write_task(tmp_path / "set" / "a-task")
    (tmp_path / "set" / "not-a-task").mkdir()
    assert is_task_source(str(one)) and is_task_source(str(tmp_path / "set"))
    assert not is_task_source(str(tmp_path / "set" / "not-a-task"))
    assert not is_task_source(str(ROOT / "recipes" / "demo" / "instances.jsonl"))
    assert [t.name for t in load_tasks(tmp_path / "set")] == ["a-task", "b-task"]
    assert [t.name for t in load_tasks(one)] == ["b-task"]


@pytest.mark.parametrize(
    ("toml", "tests", "dockerfile", "message"),
    [
        ("[agent\n", True, "FROM x\n", "task.toml"),
        ("", False, "FROM x\n", "tests/test.sh"),
        ("", True, None, "neither environment/Dockerfile"),
        ("[agent]\ntimeout_sec = -1\n", True, "FROM x\n", "timeout_sec"),
        ("[environment]\nmemory_mb = 'lots'\n", True, "FROM x\n", "memory_mb"),
        ('[[steps]]\nname = "one"\n', True, "FROM x\n", "multi-step"),
    ],
)
def test_a_broken_task_is_refused_by_name(
    tmp_path: Path, toml: str, tests: bool, dockerfile: str | None, message: str
) -> None:
    root = write_task(tmp_path / "broken", toml, tests=tests, dockerfile=dockerfile)
    with pytest.raises(ConfigError, match=message) as info:
        load_task(root)
    assert str(root) in str(info.value)


def test_a_prebuilt_image_stands_for_the_dockerfile(tmp_path: Path) -> None:
    root = write_task(tmp_path / "pre", '[environment]\ndocker_image = "registry.example/task:1"\n', dockerfile=None)
    task = load_task(root)
    assert task.docker_image == "registry.example/task:1"
    assert task.instance("registry.example/task:1").build is None


def test_the_instance_carries_the_instruction_and_no_swe_fields(tmp_path: Path) -> None:
    src = DEMO / "top-words"
    shutil.copytree(src, tmp_path / "top-words")
    task = load_task(tmp_path / "top-words")
    instance = task.instance("polar-harbor/top-words:polar-x")
    assert instance.instance_id == "top-words" and instance.repo == "harbor/top-words"
    assert instance.problem_statement == (src / "instruction.md").read_text()
    assert instance.patch == "" and instance.fail_to_pass == () and instance.image == "polar-harbor/top-words:polar-x"
    assert instance.build is not None and instance.build.context == task.environment


def harbor_strip_canary() -> Callable[[str], str]:
    """harbor 0.26.0's own `strip_canary`, read from its source (its module needs Python 3.12's typing.override)."""
    import ast
    import re

    import harbor.models.task.config as config

    source = (Path(config.__file__).parent / "task.py").read_text()
    tree = ast.parse(source)
    wanted = [
        n
        for n in tree.body
        if (isinstance(n, ast.FunctionDef) and n.name == "strip_canary")
        or (isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "_CANARY_LINE_RE" for t in n.targets))
    ]
    assert len(wanted) == 2
    namespace: dict[str, Any] = {"re": re}
    exec(compile(ast.Module(body=wanted, type_ignores=[]), "harbor-task", "exec"), namespace)
    return cast("Callable[[str], str]", namespace["strip_canary"])


@pytest.mark.parametrize(
    "text",
    [
        "plain\n",
        "<!-- harbor-canary GUID 1234 -->\n\n# Canary string, do not train\n\nThe task.\n\n  indented\r\n",
        "# not a marker\nThe task.",
        "\n\n<!-- canary -->\nx",
        "# CANARY\n",
    ],
)
def test_the_instruction_is_what_harbor_tells_the_agent(tmp_path: Path, text: str) -> None:
    root = write_task(tmp_path / "t")
    (root / "instruction.md").write_bytes(text.encode())
    assert load_task(root).instruction == strip_canary(text) == harbor_strip_canary()(text)


def test_allowlisted_hosts_are_read_as_harbor_reads_them(tmp_path: Path) -> None:
    toml = (
        '[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = ["pypi.org", "*.pythonhosted.org"]\n'
        '[verifier]\nnetwork_mode = "allowlist"\nallowed_hosts = ["pypi.org", "deb.debian.org"]\n'
    )
    config = TaskConfig.model_validate_toml(toml)
    assert config.environment.allowed_hosts == ["pypi.org", "*.pythonhosted.org"]
    task = load_task(write_task(tmp_path / "net", toml))
    assert task.allowed_hosts == ("pypi.org", "*.pythonhosted.org", "deb.debian.org")
    # Harbor's default (public) is no network here: nothing is allowed unless the task lists it
    assert load_task(write_task(tmp_path / "public")).allowed_hosts == ()
    stray = '[agent]\nallowed_hosts = ["pypi.org"]\n'
    with pytest.raises(ValueError, match="allowlist"):
        TaskConfig.model_validate_toml(stray)
    with pytest.raises(ConfigError, match="allowlist"):
        load_task(write_task(tmp_path / "stray", stray))
    cidr = '[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = ["192.0.2.0/24"]\n'
    with pytest.raises(ConfigError, match="only host names"):
        load_task(write_task(tmp_path / "cidr", cidr))
