"""Harbor task folders (harbor 0.26.0's layout, `harbor.models.task`) read into `HarborTask`s.

A task folder holds ``task.toml`` (metadata, timeouts, resources), ``instruction.md`` (what the agent is told, byte for
byte, after Harbor's own canary strip), ``environment/Dockerfile`` (or ``[environment].docker_image``),
``tests/test.sh`` (the verifier, copied in only after the agent finishes) and ``solution/solve.sh`` (the oracle;
optional, a task without one cannot be validated).
A manifest source that is a folder holding ``task.toml`` is one task; a folder of such folders is a task set.

Polar reads the fields it honours and ignores the rest, so a task written for a later Harbor still loads; the tests
check the bundled tasks against harbor's own `TaskConfig` and these readings against its values.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from polar_cli.errors import ConfigError
from polar_cli.swe.manifest import BuildSpec, Instance

TASK_KIND = "harbor"
# where Harbor puts the verifier's files and reads its reward (`harbor.models.trial.paths.EnvironmentPaths`)
TESTS_DIR = "/tests"
SOLUTION_DIR = "/solution"
VERIFIER_DIR = "/logs/verifier"
# harbor 0.26.0's defaults (`VerifierConfig.timeout_sec`, `EnvironmentConfig.build_timeout_sec`)
VERIFIER_TIMEOUT = 600.0
BUILD_TIMEOUT = 600.0
# where the agent works when neither task.toml nor the Dockerfile says (Harbor's own tasks use /app)
DEFAULT_WORKDIR = "/app"
_WORKDIR = re.compile(r"^\s*WORKDIR\s+(\S+)\s*$", re.IGNORECASE | re.MULTILINE)
# harbor 0.26.0's `harbor.models.task.task._CANARY_LINE_RE`: data-provenance lines the agent is never shown
_CANARY_LINE = re.compile(r"^(<!--.*canary.*-->|#.*canary.*)$", re.IGNORECASE)


def strip_canary(text: str) -> str:
    """instruction.md as Harbor tells it (its `strip_canary`): leading canary comment lines and the blank lines after
    them removed, every other byte kept."""
    lines = text.split("\n")
    idx = 0
    while idx < len(lines) and _CANARY_LINE.match(lines[idx].strip()):
        idx += 1
    while idx < len(lines) and lines[idx].strip() == "":
        idx += 1
    return "\n".join(lines[idx:])


@dataclass(frozen=True, slots=True)
class HarborTask:
    """One Harbor task: where it is and the parts of task.toml Polar honours."""

    name: str
    path: Path
    instruction: str
    workdir: str
    agent_timeout: float | None = None
    verifier_timeout: float = VERIFIER_TIMEOUT
    build_timeout: float = BUILD_TIMEOUT
    cpus: float | None = None
    memory_mb: int | None = None
    docker_image: str | None = None
    verifier_env: Mapping[str, str] = field(default_factory=dict)
    solution_env: Mapping[str, str] = field(default_factory=dict)
    metadata: Mapping[str, Any] = field(default_factory=dict)
    # hostnames task.toml allows (``network_mode = "allowlist"`` in [environment], [agent] or [verifier]): they join
    # the recipe's egress allowlist for this task's sessions (`egress.SessionEgress.open`)
    allowed_hosts: tuple[str, ...] = ()

    @property
    def environment(self) -> Path:
        return self.path / "environment"

    @property
    def has_oracle(self) -> bool:
        return (self.path / "solution" / "solve.sh").is_file()

    def test_files(self) -> dict[str, bytes]:
        """tests/ as the container receives it: absolute paths under /tests."""
        return _tree(self.path / "tests", TESTS_DIR)

    def solution_files(self) -> dict[str, bytes]:
        """solution/ as Harbor's oracle agent copies it in: absolute paths under /solution."""
        return _tree(self.path / "solution", SOLUTION_DIR)

    def instance(self, image: str) -> Instance:
        """The task as the pipeline's `Instance`: its name, its instruction as the problem statement, its image; no
        patch and no SWE tests (a Harbor task is graded by its verifier)."""
        build = BuildSpec(self.environment) if (self.environment / "Dockerfile").is_file() else None
        return Instance(
            instance_id=self.name,
            repo=f"{TASK_KIND}/{self.name}",
            base_commit="",
            problem_statement=self.instruction,
            patch="",
            test_patch="",
            fail_to_pass=(),
            pass_to_pass=(),
            image=image,
            build=build,
        )


def _tree(root: Path, target: str) -> dict[str, bytes]:
    if not root.is_dir():
        return {}
    return {
        f"{target}/{p.relative_to(root).as_posix()}": p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def is_task_dir(path: Path) -> bool:
    return (path / "task.toml").is_file()


def is_task_source(source: str) -> bool:
    """Whether a manifest source names Harbor tasks: a task folder, or a folder holding task folders."""
    path = Path(source)
    return path.is_dir() and (is_task_dir(path) or any(is_task_dir(p) for p in path.iterdir() if p.is_dir()))


def _section(data: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: [{key}]: expected a table")
    return value


def _number(section: Mapping[str, Any], key: str, where: str) -> float | None:
    value = section.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfigError(f"{where}: {key}: expected a positive number, got {value!r}")
    return float(value)


def _env(section: Mapping[str, Any], where: str) -> dict[str, str]:
    env = section.get("env", {})
    if not isinstance(env, Mapping) or not all(isinstance(v, str) for v in env.values()):
        raise ConfigError(f"{where}: env: expected a table of strings")
    return {str(k): v for k, v in env.items()}


def _allowed_hosts(config: Mapping[str, Any], where: str) -> tuple[str, ...]:
    """The hostnames of every section whose network_mode is ``allowlist`` (Harbor's IP and CIDR entries are refused:
    Polar's egress proxy allows names only). Harbor's default mode, ``public``, gives a Polar session no network."""
    hosts: list[str] = []
    for name in ("environment", "agent", "verifier"):
        section = _section(config, name, where)
        listed = section.get("allowed_hosts") or []
        if section.get("network_mode") != "allowlist":
            if listed:  # as harbor's own validator says
                raise ConfigError(f"{where}: [{name}].allowed_hosts: only valid with network_mode = 'allowlist'")
            continue
        if not isinstance(listed, list) or not all(isinstance(h, str) for h in listed):
            raise ConfigError(f"{where}: [{name}].allowed_hosts: expected a list of strings")
        for host in listed:
            if "/" in host or ":" in host or not any(c.isalpha() for c in host):
                raise ConfigError(f"{where}: [{name}].allowed_hosts: {host!r}: only host names are allowed here")
            if host not in hosts:
                hosts.append(host)
    return tuple(hosts)


def dockerfile_workdir(dockerfile: Path) -> str | None:
    """The last WORKDIR of a Dockerfile (where its container starts), if it sets one."""
    if not dockerfile.is_file():
        return None
    found = _WORKDIR.findall(dockerfile.read_text(errors="replace"))
    return found[-1] if found else None


def load_task(path: Path) -> HarborTask:
    """One task folder; `ConfigError` naming the folder and what is wrong."""
    where = f"harbor task {path}"
    try:
        config = tomllib.loads((path / "task.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{where}: task.toml: {exc}") from exc
    try:
        instruction = strip_canary((path / "instruction.md").read_bytes().decode())
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where}: instruction.md: {exc}") from exc
    agent = _section(config, "agent", where)
    verifier = _section(config, "verifier", where)
    environment = _section(config, "environment", where)
    docker_image = environment.get("docker_image")
    if not (path / "environment" / "Dockerfile").is_file() and not docker_image:
        raise ConfigError(f"{where}: neither environment/Dockerfile nor [environment].docker_image")
    if not (path / "tests" / "test.sh").is_file():
        raise ConfigError(f"{where}: tests/test.sh: missing (the verifier)")
    if config.get("steps"):
        raise ConfigError(f"{where}: multi-step tasks ([[steps]]) are not supported")
    workdir = environment.get("workdir") or dockerfile_workdir(path / "environment" / "Dockerfile")
    memory = environment.get("memory_mb")
    if memory is not None and (isinstance(memory, bool) or not isinstance(memory, int) or memory < 64):
        raise ConfigError(f"{where}: memory_mb: expected an integer of at least 64, got {memory!r}")
    metadata = config.get("metadata", {})
    return HarborTask(
        name=path.resolve().name,
        path=path.resolve(),
        instruction=instruction,
        workdir=str(workdir or DEFAULT_WORKDIR),
        agent_timeout=_number(agent, "timeout_sec", where),
        verifier_timeout=_number(verifier, "timeout_sec", where) or VERIFIER_TIMEOUT,
        build_timeout=_number(environment, "build_timeout_sec", where) or BUILD_TIMEOUT,
        cpus=_number(environment, "cpus", where),
        memory_mb=memory,
        docker_image=str(docker_image) if docker_image else None,
        verifier_env=_env(verifier, where),
        solution_env=_env(_section(config, "solution", where), where),
        metadata=dict(metadata) if isinstance(metadata, Mapping) else {},
        allowed_hosts=_allowed_hosts(config, where),
    )


def load_tasks(source: str | Path) -> list[HarborTask]:
    """The tasks of a task folder, or of every task folder in a folder (sorted by name)."""
    root = Path(source)
    if is_task_dir(root):
        return [load_task(root)]
    if not root.is_dir():
        raise ConfigError(f"harbor tasks {root}: not a folder")
    tasks = [load_task(p) for p in sorted(root.iterdir()) if p.is_dir() and is_task_dir(p)]
    if not tasks:
        raise ConfigError(f"harbor tasks {root}: no folder with a task.toml")
    return tasks
