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
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from polar_cli import overrides
from polar_cli.cluster.config import ClusterConfig
from polar_cli.egress.config import EgressConfig
from polar_cli.errors import ConfigError
from polar_cli.gateway.upstream_client import upstream_root
from polar_cli.harbor.config import HarborConfig
from polar_cli.harness.base import HarnessAdapter
from polar_cli.harness.custom import CustomHarnessConfig, check_custom_names
from polar_cli.judge.config import JudgeConfig
from polar_cli.overrides import errors_text, plain
from polar_cli.runtime.base import SESSION_CAPABILITIES, SESSION_PIDS_LIMIT, Sandbox
from polar_cli.swe.tamper import TamperMode
from polar_cli.translate.dialects import DialectName

EngineKind = Literal["gold", "noop", "sglang", "vllm", "server"]
Strategy = Literal["prefix_merging", "per_request"]
Format = Literal["jsonl", "parquet"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, frozen=True)


class ManifestConfig(_Strict):
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


class SGLangConfig(_Strict):
    model_path: str
    """``--model-path``: a local directory or a model name the server can load."""
    served_model_name: str | None = None
    """``--served-model-name`` (None: SGLang's default, the model path)."""
    tp_size: int = Field(default=1, ge=1)
    """Tensor-parallel GPUs per replica (``--tp-size``)."""
    dp_size: int = Field(default=1, ge=1)
    """Data-parallel replicas (``--dp-size``)."""
    mem_fraction_static: float | None = Field(default=None, gt=0, le=1)
    """``--mem-fraction-static``."""
    context_length: int | None = Field(default=None, ge=1)
    """``--context-length``."""
    reasoning_parser: str | None = "qwen3"
    """``--reasoning-parser`` (Qwen3/3.5: qwen3; None: no reasoning parsing)."""
    tool_call_parser: str | None = "qwen3_coder"
    """``--tool-call-parser`` (Qwen3.5: qwen3_coder; Qwen2.5/Qwen3-2507: qwen25)."""
    host: str = "127.0.0.1"
    """Address the server listens on."""
    port: int | None = Field(default=None, ge=1, le=65535)
    """Port the server listens on (None: a free one)."""
    extra_args: list[str] = Field(default_factory=list)
    """More ``launch_server`` arguments, passed as they are."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment added for the server process (e.g. CUDA_VISIBLE_DEVICES)."""
    python: str | None = None
    """Interpreter that has sglang installed (None: the one running Polar)."""
    launcher: list[str] | None = None
    """argv that replaces ``python -m sglang.launch_server`` (a wrapper script, a container run); flags follow it."""
    startup_timeout: float = Field(default=1200.0, gt=0)
    """Seconds to wait for ``/health`` to answer 200 (a 122B MoE on 8 GPUs takes up to ~15 minutes)."""


class EngineConfig(_Strict):
    kind: EngineKind
    """gold: scripted reference-patch policy (no GPU); noop: answers without acting (negative control);
    sglang: the running SGLang at ``url``, else one launched from ``sglang``; vllm: the running vLLM at ``url``;
    server: the running server at ``url`` speaking ``dialect``."""
    url: str | None = None
    """Base URL of a running server (with or without /v1). For sglang it wins over the launch section."""
    urls: list[str] | None = Field(default=None, min_length=1)
    """Base URLs of several running servers of one model (instead of ``url``; kinds sglang, vllm, server), called
    directly by the gateway: every call of a session goes to the same server (its prefix cache), a new session to the
    one with the fewest calls in flight (`gateway.upstream_pool`). Each is probed at start and must serve the same
    model with token ids."""
    dialect: DialectName = "sglang"
    """kind=server: which token fields to ask for (sglang | sglang-legacy | vllm); SGLang releases are probed."""
    model: str | None = None
    """Served model name sent upstream and written to the corpus (None: asked from the server, or the policy name)."""
    tokenizer: str | None = None
    """Tokenizer directory (transformers format; on a GPU box the model directory the server loads), or ``qwen3``
    for the bundled Qwen3 tokenizer. Needed by kind gold|noop, and by ``token_in`` (which defaults it to the launch
    section's local ``model_path``)."""
    chat_template: str | None = None
    """A chat template file to use instead of the tokenizer's own (the same file the server is given)."""
    token_in: bool = False
    """Send each call that continues an earlier call of its session as exact token ids (previous prompt + sampled
    ids + the rendering of only the new messages): the trajectory is then exactly what the model saw."""
    template_traits: dict[str, bool] | None = None
    """What the chat template refuses or drops (e.g. ``{single_leading_system: true}``), declared instead of
    detected: by default they are found by rendering probes with the local template, else by probing the server."""
    reasoning: Literal["reinject", "as-sent"] = "reinject"
    """reinject: assistant turns the harness sends back without their reasoning get it back; as-sent: untouched."""
    sglang: SGLangConfig | None = None
    """kind=sglang: how to launch the server."""
    gpus: int | None = Field(default=None, ge=0)
    """GPUs the engine occupies, for GPU-hours (None: tp_size x dp_size of the sglang section, else 0)."""
    chat_template_kwargs: dict[str, Any] | None = None
    """Merged into every call's ``chat_template_kwargs`` (e.g. ``{enable_thinking: false}``)."""
    max_tokens_cap: int | None = Field(default=None, ge=1)
    """Upper bound on the max tokens a harness asks for (Claude Code asks for 32k+)."""
    upstream_timeout: float = Field(default=1800.0, gt=0)
    """Seconds to wait for one upstream answer."""
    extra_body: dict[str, Any] | None = None
    """Engine fields added to every call (e.g. ``{repetition_penalty: 1.05}``)."""
    health_interval: float = Field(default=5.0, gt=0)
    """Seconds between two health checks of the server (``GET /health``; scripted engines are not checked), and of
    the Docker engine (a ping; two failed in a row make it down)."""
    health_failures: int = Field(default=3, ge=1)
    """Failed checks in a row that make the server down (a launched server whose process exited: at once)."""
    health_timeout: float = Field(default=30.0, gt=0)
    """Seconds one health check may take (SGLang's /health runs a one-token generation through the scheduler)."""
    restarts: int = Field(default=3, ge=0)
    """Restarts of a launched server per run when it goes down (0: none, the run exits 1)."""
    restart_backoff: float = Field(default=10.0, ge=0)
    """Seconds before the first restart; doubled after each failed one (at most 300)."""
    down_timeout: float = Field(default=900.0, gt=0)
    """A server given by URL that goes down: seconds to wait for it to answer again before the run exits 1."""
    latency: float = Field(default=0.0, ge=0)
    """kind=gold|noop: seconds each scripted answer takes, to stand in for a model's latency in tests and benchmarks
    (refused for other kinds)."""

    @model_validator(mode="after")
    def _kind_fields(self) -> EngineConfig:
        if self.urls is not None:
            self._check_urls(self.urls)
        if self.kind in ("vllm", "server") and not self.url and not self.urls:
            raise ValueError(f"kind {self.kind} needs url (the running server) or urls (several)")
        if self.kind == "sglang" and self.sglang is None and not self.url and not self.urls:
            raise ValueError("kind sglang needs url (a running server) or the sglang section (to launch one)")
        if self.kind in ("gold", "noop") and not self.tokenizer:
            raise ValueError(f"kind {self.kind} needs tokenizer (a tokenizer directory, or qwen3)")
        if self.latency and self.kind not in ("gold", "noop"):
            raise ValueError(f"latency is for the scripted engines (gold, noop), not kind {self.kind}")
        if self.token_in and self.tokenizer_source() is None:
            raise ValueError("token_in needs tokenizer (the model directory: its tokenizer and chat template)")
        return self

    def _check_urls(self, urls: list[str]) -> None:
        if self.url is not None:
            raise ValueError("url and urls exclude each other: one server in url, several in urls")
        if self.kind in ("gold", "noop"):
            raise ValueError(f"urls names running servers (kinds sglang, vllm, server), not kind {self.kind}")
        roots = [upstream_root(u) for u in urls]
        for url, root in zip(urls, roots, strict=True):
            parts = urlsplit(root)
            if parts.scheme != "http" or not parts.hostname:
                raise ValueError(f"urls: each must be http://host:port[/prefix], got {url!r}")
        if len(set(roots)) != len(roots):
            raise ValueError(f"urls: the same server is named twice in {urls}")

    @field_validator("template_traits")
    @classmethod
    def _known_traits(cls, value: dict[str, bool] | None) -> dict[str, bool] | None:
        from polar_cli.templates.traits import TemplateTraits

        if value is not None:
            try:
                TemplateTraits.from_mapping(value)
            except ConfigError as exc:
                raise ValueError(str(exc)) from exc
        return value

    def tokenizer_source(self) -> str | None:
        """``tokenizer``, else a launched server's local model directory (the same files the server loads)."""
        if self.tokenizer:
            return self.tokenizer
        if self.kind == "sglang" and self.sglang is not None and Path(self.sglang.model_path).is_dir():
            return self.sglang.model_path
        return None

    def upstream_dialect(self) -> DialectName:
        """The token fields to ask the server for (SGLang's current and legacy releases are told apart by a probe)."""
        return {"vllm": "vllm", "server": self.dialect}.get(self.kind, "sglang")

    def launches(self) -> bool:
        """Whether Polar starts the server itself (kind sglang without a url)."""
        return self.kind == "sglang" and self.url is None and self.urls is None

    def server_urls(self) -> list[str]:
        """The running servers' roots (``url``, or each of ``urls``, without a trailing /v1); empty when launched."""
        if self.urls is not None:
            return [upstream_root(u) for u in self.urls]
        return [upstream_root(self.url)] if self.url is not None else []

    def gpu_count(self) -> int:
        if self.gpus is not None:
            return self.gpus
        if self.kind == "sglang" and self.sglang is not None:
            return self.sglang.tp_size * self.sglang.dp_size
        return 0


class RuntimeConfig(_Strict):
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


class ConcurrencyConfig(_Strict):
    init: int = Field(default=2, ge=1)
    """Sessions being initialised at once (container start, git base, harness config)."""
    run: int = Field(default=2, ge=1)
    """Harnesses running at once (RUN slots: what keeps the GPUs busy)."""
    postrun: int = Field(default=2, ge=1)
    """Sessions in POSTRUN at once (patch, trajectories, grading in a fresh container)."""
    ready: int = Field(default=2, ge=0)
    """READY buffer: initialised sessions waiting for a RUN slot (0: a RUN slot waits for INIT, no buffer)."""


class TimeoutsConfig(_Strict):
    session: float = Field(default=1800.0, gt=0)
    """Seconds for a session from the start of its INIT to the end of its RUN (READY waiting counts)."""
    agent: float | None = Field(default=None, gt=0)
    """Seconds the harness process may run (None: whatever is left of the session timeout)."""
    eval: float = Field(default=1800.0, gt=0)
    """Seconds for the instance's tests when grading."""


class EvalConfig(_Strict):
    network: str = "bridge"
    """Docker network of the grading containers. SWE-bench 5.0.2 creates its evaluation containers without a network
    setting, so they get Docker's default ``bridge``; ``none`` cuts the tests off from the network."""
    tamper: TamperMode = "reject"
    """The patch's changes to test infrastructure the test patch does not own (conftest.py, pytest/tox config, test
    files; `swe.tamper`): reject grades such an attempt unresolved (reason ``tamper: <paths>``), revert drops those
    files' changes and grades the rest, off grades it as SWE-bench does (a planted conftest.py can pass any test)."""


class BuilderConfig(_Strict):
    strategy: Strategy = "prefix_merging"
    """prefix_merging: one trace per conversation chain; per_request: one trace per model call."""
    eot_token_id: int | None = Field(default=None, ge=0)
    """End-of-turn id for prefix_merging (None: the engine's, else detected per session)."""
    drift: Literal["strict", "tolerant"] = "tolerant"
    """prefix_merging, when the template rendered an answer other than it was sampled: tolerant merges and keeps the
    sampled ids (counted in drift_tokens); strict starts a new trace there, so prompt + response is always exactly
    what the last call saw and sampled."""


class OutputConfig(_Strict):
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


class MetricsConfig(_Strict):
    port: int | None = Field(default=None, ge=0, le=65535)
    """Serve Prometheus metrics on this port (None: none; 0: any free port, logged); docs/metrics.md."""
    host: str = "127.0.0.1"
    """Address of the metrics port: loopback unless told otherwise."""


class Recipe(_Strict):
    name: str | None = None
    """A name for the run (default: the recipe file's stem)."""
    manifest: ManifestConfig
    """Which instances."""
    custom_harnesses: dict[str, CustomHarnessConfig] = Field(default_factory=dict)
    """Harnesses defined here, without code (`harness.custom`): NAME -> argv, env, files, api, bundle, ...; run the
    ones named in ``harnesses``."""
    harnesses: list[str] = Field(min_length=1)
    """Harnesses to run every instance with: claude-code, codex, qwen-code, gemini-cli, pi, or a custom one."""
    attempts: int = Field(default=1, ge=1)
    """Sessions per (instance, harness)."""
    instruction: str = "{problem_statement}"
    """What the harness is asked: a format string over {problem_statement}, {repo}, {instance_id}, {workdir}."""
    engine: EngineConfig
    """Where the model answers come from."""
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)
    """Containers and the gateway's address."""
    concurrency: ConcurrencyConfig = Field(default_factory=ConcurrencyConfig)
    """Stage pools and the READY buffer."""
    timeouts: TimeoutsConfig = Field(default_factory=TimeoutsConfig)
    """Session, agent and evaluation time limits."""
    eval: EvalConfig = Field(default_factory=EvalConfig)
    """How sessions are graded (their time limit is ``timeouts.eval``)."""
    harbor: HarborConfig = Field(default_factory=HarborConfig)
    """Harbor tasks: the reward a session must reach to be accepted, the FROM mapping table of their images."""
    builder: BuilderConfig = Field(default_factory=BuilderConfig)
    """How capture records become trajectories."""
    output: OutputConfig = Field(default_factory=OutputConfig)
    """Where and how the corpus is written."""
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    """A Ray cluster to run the sessions on, one gateway node per machine (unset: this process, as before)."""
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

    @field_validator("custom_harnesses")
    @classmethod
    def _custom_names(cls, custom: dict[str, CustomHarnessConfig]) -> dict[str, CustomHarnessConfig]:
        check_custom_names(custom)
        return custom

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
