"""Recipes: what `polar generate` runs, as validated pydantic models loaded from YAML and overridden with ``a.b=value``.

A recipe names the manifest and its selection, the harnesses, the attempts per instance, the engine (SGLang launched
from the recipe, a running SGLang or vLLM by URL, or the scripted gold / noop policies), the runtime, the stage pools,
the timeouts, the trajectory builder and the outputs. Unknown keys are refused everywhere, with the dotted path of the
key in the message, so a typo never silently falls back to a default.

Overrides are ``dotted.key=value``; the value is read as YAML (``4`` is an int, ``true`` a bool, ``[pi, codex]`` a
list, ``null`` None), then the whole recipe is validated again, so an override gets the same checks as the file.
Relative paths in a recipe (manifest, tokenizer, model path) are resolved against the recipe file's directory when
something exists there, so a recipe works from any working directory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from polar_cli import overrides
from polar_cli.config.base import Strict
from polar_cli.config.cluster import ClusterConfig
from polar_cli.config.engine import EngineConfig
from polar_cli.egress.config import EgressConfig
from polar_cli.errors import ConfigError
from polar_cli.harbor.config import HarborConfig
from polar_cli.harness.base import HarnessAdapter
from polar_cli.harness.custom import CustomHarnessConfig, check_custom_names
from polar_cli.judge.config import JudgeConfig
from polar_cli.overrides import errors_text, plain
from polar_cli.runtime.base import SESSION_CAPABILITIES, SESSION_PIDS_LIMIT, Sandbox
from polar_cli.swe.tamper import TamperMode

Strategy = Literal["prefix_merging", "per_request"]
Format = Literal["jsonl", "parquet"]


class ManifestConfig(Strict):
    source: str
    """Manifest file (.json/.jsonl/.parquet; relative to the recipe file), a datasets name ``owner/name[:split]``, or
    Harbor tasks: a task folder or a folder of task folders (`polar_cli.harbor`, docs/harbor.md)."""
    instance_ids: list[str] | None = None
    """Only these instances (None: all)."""
    repos: list[str] | None = None
    """Only instances of these repositories (None: all)."""
    limit: int | None = Field(default=None, ge=0)
    """Only the first N selected instances."""
    shard: str | None = None
    """Only shard ``i/N`` of the selection (every N-th instance from i), to split a manifest across machines."""
    image_template: str | None = None
    """Image for rows without ``image``: ``swe-gym``, ``swe-bench`` or a format string over ``{instance_id}``."""


class RuntimeConfig(Strict):
    network: str = Field(default="gateway-only", min_length=1)
    """Network of the session containers: ``gateway-only`` (Docker's ``none``: the container reaches the gateway, over
    a Unix socket and an in-container relay, and nothing else: no internet, no host port, no inference server, no
    Docker socket; needs a local Docker engine), ``host`` (they reach the gateway on 127.0.0.1, and everything the
    host reaches), ``bridge``, or any Docker network name (then set ``gateway_url`` to an address the containers
    reach; ``gateway_url`` is unused with ``gateway-only``)."""
    cpus: float | None = Field(default=None, gt=0)
    """CPU limit per session container."""
    memory_mb: int | None = Field(default=16384, ge=64)
    """Memory limit per session container (MiB, no swap beyond it); a harness killed at it ends with reason ``oom``
    (None: no limit, the host's memory is the agent's)."""
    pids_limit: int | None = Field(default=SESSION_PIDS_LIMIT, ge=16)
    """Processes and threads a session container may hold (a fork bomb stops there; None: no limit)."""
    no_new_privileges: bool = True
    """Session containers run with ``no-new-privileges``: a setuid binary gains nothing (docs/security.md)."""
    capabilities: list[str] | None = Field(default_factory=lambda: list(SESSION_CAPABILITIES))
    """The Linux capabilities a session container keeps, every other one dropped (None: Docker's defaults)."""
    output_limit_mb: int | None = Field(default=1024, ge=1)
    """Output a harness may write before it is killed (reason ``output_limit``; None: no limit, the first 8 MiB are
    kept either way)."""
    workdir: str = "/testbed"
    """Where the repository is in the instance image; the harness works there."""
    gateway_host: str = "127.0.0.1"
    """Address the gateway listens on."""
    gateway_url: str | None = None
    """URL the harnesses reach the gateway at (None: ``http://{gateway_host}:{port}``; set it for bridge networks)."""
    build_images: bool = True
    """Build missing harness bundles and the manifest's buildable instance images before the run."""
    strip_history: bool = True
    """At INIT, leave the repository nothing from after the base commit (later commits, tags, branches, remotes,
    reflogs, stashes, unreachable objects): agents have found the gold fix with ``git log --all``."""
    docker_wait: float = Field(default=600.0, gt=0)
    """The Docker engine stops answering: seconds to wait for it to answer again before the run exits 1."""
    outage_retries: int = Field(default=2, ge=0)
    """A session an outage (engine or Docker down) cut short is run again in the same run, at most this many times;
    what is still unfinished after that is retried by the next run."""
    min_free_gb: float = Field(default=5.0, ge=0)
    """Free disk the run directory must have before the run starts (0: no check)."""
    egress: EgressConfig = Field(default_factory=EgressConfig)
    """Hosts the session containers may reach through Polar's logging egress proxy (``gateway-only`` sandboxes only;
    docs/security.md "Egress allowlist"); none by default."""

    @model_validator(mode="after")
    def _egress_needs_gateway_only(self) -> RuntimeConfig:
        if self.egress.allow and self.network != "gateway-only":
            raise ValueError("egress.allow needs network: gateway-only (other networks are not confined at all)")
        return self

    def sandbox(self) -> Sandbox:
        caps = None if self.capabilities is None else tuple(c.upper().removeprefix("CAP_") for c in self.capabilities)
        return Sandbox(self.pids_limit, self.no_new_privileges, caps)


class ConcurrencyConfig(Strict):
    init: int = Field(default=2, ge=1)
    """Sessions being initialised at once (container start, git base, harness config)."""
    run: int = Field(default=2, ge=1)
    """Harnesses running at once (RUN slots: what keeps the GPUs busy)."""
    postrun: int = Field(default=2, ge=1)
    """Sessions in POSTRUN at once (patch, trajectories, grading in a fresh container)."""
    ready: int = Field(default=2, ge=0)
    """READY buffer: initialised sessions waiting for a RUN slot (0: a RUN slot waits for INIT, no buffer)."""


class TimeoutsConfig(Strict):
    session: float = Field(default=1800.0, gt=0)
    """Seconds for a session from the start of its INIT to the end of its RUN (READY waiting counts)."""
    agent: float | None = Field(default=None, gt=0)
    """Seconds the harness process may run (None: whatever is left of the session timeout)."""
    eval: float = Field(default=1800.0, gt=0)
    """Seconds for the instance's tests when grading."""


class EvalConfig(Strict):
    network: str = "bridge"
    """Docker network of the grading containers. SWE-bench 5.0.2 creates its evaluation containers without a network
    setting, so they get Docker's default ``bridge``; ``none`` cuts the tests off from the network."""
    tamper: TamperMode = "reject"
    """The patch's changes to test infrastructure the test patch does not own (conftest.py, pytest/tox config, test
    files; `swe.tamper`): reject grades such an attempt unresolved (reason ``tamper: <paths>``), revert drops those
    files' changes and grades the rest, off grades it as SWE-bench does (a planted conftest.py can pass any test)."""


class BuilderConfig(Strict):
    strategy: Strategy = "prefix_merging"
    """prefix_merging: one trace per conversation chain; per_request: one trace per model call."""
    eot_token_id: int | None = Field(default=None, ge=0)
    """End-of-turn id for prefix_merging (None: the engine's, else detected per session)."""
    drift: Literal["strict", "tolerant"] = "tolerant"
    """prefix_merging, when the template rendered an answer other than it was sampled: tolerant merges and keeps the
    sampled ids (counted in drift_tokens); strict starts a new trace there, so prompt + response is always exactly
    what the last call saw and sampled."""


class OutputConfig(Strict):
    dir: str | None = None
    """Run directory (None: runs/<recipe name>); ``--out`` overrides it. The same directory resumes a run."""
    formats: list[Format] = Field(default_factory=lambda: list[Format](["jsonl", "parquet"]))
    """Corpus files written: corpus.jsonl always (appended row by row); parquet derived from it at the end."""
    keep_artifacts: bool = True
    """Keep each session's harness logs and transcripts under artifacts/<session>."""
    collect_capture: bool = False
    """On a cluster (``cluster.ray.address``): ship each session's capture records back into the run directory's
    capture/ (otherwise they stay on the node's disk and the row names where: ``node_id``, ``capture_path``)."""
    fsync: bool = False
    """fsync every row (survives power loss, not just a killed process; slower)."""


class MetricsConfig(Strict):
    port: int | None = Field(default=None, ge=0, le=65535)
    """Serve Prometheus metrics on this port (None: none; 0: any free port, logged); docs/metrics.md."""
    host: str = "127.0.0.1"
    """Address of the metrics port: loopback unless told otherwise."""


class SessionsConfig(Strict):
    """The sections a batch run (`Recipe`) and the rollout service (`serve.config.ServeConfig`) share: the harnesses,
    the engine, the containers, the stage pools, the time limits, grading, trajectory building and the cluster."""

    custom_harnesses: dict[str, CustomHarnessConfig] = Field(default_factory=dict)
    """Harnesses defined here, without code (`harness.custom`): NAME -> argv, env, files, api, bundle, ...; run the
    ones named in ``harnesses``."""
    harnesses: list[str] = Field(min_length=1)
    """Harnesses to run: claude-code, codex, qwen-code, gemini-cli, pi, or a custom one (a recipe runs every instance
    with each; the service lets a task name any of them, their bundles made ready when it starts)."""
    engine: EngineConfig
    """Where the model answers come from."""
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)
    """Containers and the gateway's address."""
    concurrency: ConcurrencyConfig = Field(default_factory=ConcurrencyConfig)
    """Stage pools and the READY buffer."""
    timeouts: TimeoutsConfig = Field(default_factory=TimeoutsConfig)
    """Session, agent and evaluation time limits (the service's ``session``: a task's default ``timeout_seconds``)."""
    eval: EvalConfig = Field(default_factory=EvalConfig)
    """How sessions are graded (their time limit is ``timeouts.eval``)."""
    builder: BuilderConfig = Field(default_factory=BuilderConfig)
    """How capture records become trajectories."""
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    """A Ray cluster to run the sessions on, one gateway node per machine (unset: this process, as before)."""

    @field_validator("custom_harnesses")
    @classmethod
    def _custom_names(cls, custom: dict[str, CustomHarnessConfig]) -> dict[str, CustomHarnessConfig]:
        check_custom_names(custom)
        return custom


class Recipe(SessionsConfig):
    name: str | None = None
    """A name for the run (default: the recipe file's stem)."""
    manifest: ManifestConfig
    """Which instances."""
    attempts: int = Field(default=1, ge=1)
    """Sessions per (instance, harness)."""
    instruction: str = "{problem_statement}"
    """What the harness is asked: a format string over {problem_statement}, {repo}, {instance_id}, {workdir}."""
    harbor: HarborConfig = Field(default_factory=HarborConfig)
    """Harbor tasks: the reward a session must reach to be accepted, the FROM mapping table of their images."""
    output: OutputConfig = Field(default_factory=OutputConfig)
    """Where and how the corpus is written."""
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    """Prometheus metrics of the run and its gateway, on a port of their own."""
    judge: JudgeConfig | None = None
    """A judge model that scores each session against a rubric, combined with the tests' reward (docs/judge.md)."""

    @field_validator("instruction")
    @classmethod
    def _instruction_fields(cls, text: str) -> str:
        try:
            text.format(problem_statement="", repo="", instance_id="", workdir="")
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(
                f"{text!r}: {exc!r}; it may use {{problem_statement}}, {{repo}}, {{instance_id}}, {{workdir}}"
            ) from exc
        return text

    @field_validator("harnesses")
    @classmethod
    def _known_harnesses(cls, names: list[str], info: ValidationInfo) -> list[str]:
        from polar_cli.harness.custom import resolve_adapter

        # a custom_harnesses error is already reported; checking names against a half-read section would repeat it
        custom = info.data.get("custom_harnesses")
        if custom is None:
            return names
        try:
            canonical = [resolve_adapter(n, custom).name for n in names]
        except ConfigError as exc:
            raise ValueError(str(exc)) from exc
        if len(set(canonical)) != len(canonical):
            raise ValueError(f"a harness is listed twice: {names}")
        return canonical

    def adapters(self) -> list[HarnessAdapter]:
        """The adapters of ``harnesses``, custom ones built from ``custom_harnesses``."""
        from polar_cli.harness.custom import resolve_adapter

        return [resolve_adapter(n, self.custom_harnesses) for n in self.harnesses]


# ---- loading -----------------------------------------------------------------------------------------------------


def apply_override(data: dict[str, Any], text: str) -> None:
    """Set ``dotted.key=value`` in a raw recipe dict (`overrides.apply_override` against `Recipe`)."""
    overrides.apply_override(data, text, Recipe)


def _resolve(base: Path, value: str | None) -> str | None:
    """A recipe-relative path made absolute when it exists there; anything else (names, absolute paths) unchanged."""
    if not value or Path(value).is_absolute():
        return value
    candidate = base / value
    return str(candidate.resolve()) if candidate.exists() else value


def resolve_paths(data: dict[str, Any], base: Path) -> None:
    manifest = data.get("manifest")
    if isinstance(manifest, dict) and isinstance(manifest.get("source"), str):
        manifest["source"] = _resolve(base, manifest["source"])
    judge = data.get("judge")
    if isinstance(judge, dict) and isinstance(judge.get("rubric"), str):
        judge["rubric"] = _resolve(base, judge["rubric"])
    engine = data.get("engine")
    if isinstance(engine, dict):
        if isinstance(engine.get("tokenizer"), str):
            engine["tokenizer"] = _resolve(base, engine["tokenizer"])
        if isinstance(engine.get("chat_template"), str):
            engine["chat_template"] = _resolve(base, engine["chat_template"])
        sglang = engine.get("sglang")
        if isinstance(sglang, dict) and isinstance(sglang.get("model_path"), str):
            sglang["model_path"] = _resolve(base, sglang["model_path"])


def parse_recipe(
    data: Any, overrides: Sequence[str] = (), *, source: str = "recipe", base: Path | None = None
) -> Recipe:
    """Validate a raw recipe mapping after applying ``overrides``; ConfigError naming the keys otherwise."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: expected a mapping of recipe keys, got {type(data).__name__}")
    raw: dict[str, Any] = plain(data)
    for text in overrides:
        apply_override(raw, text)
    if base is not None:
        resolve_paths(raw, base)
    try:
        return Recipe.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {errors_text(exc)}") from exc


def load_recipe(path: Path, overrides: Sequence[str] = ()) -> Recipe:
    """Read, override and validate a recipe file."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"recipe {path}: {exc.strerror or exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"recipe {path}: not valid YAML: {exc}") from exc
    recipe = parse_recipe(data or {}, overrides, source=f"recipe {path}", base=path.resolve().parent)
    if recipe.name is None:
        recipe = recipe.model_copy(update={"name": path.stem})
    return recipe


def recipe_yaml(recipe: Recipe) -> str:
    """The recipe as YAML (every default spelled out), for the run directory."""
    return yaml.safe_dump(recipe.model_dump(mode="json"), sort_keys=False)
