"""The ``engine`` section of a recipe and of serve.yaml: which model server answers (SGLang launched from the recipe,
a running SGLang or vLLM by URL, a server speaking another dialect) or which scripted policy (gold, noop)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from polar_cli.config.base import Strict
from polar_cli.errors import ConfigError
from polar_cli.gateway.upstream_client import upstream_root
from polar_cli.translate.dialects import DialectName

EngineKind = Literal["gold", "noop", "sglang", "vllm", "server"]


class SGLangConfig(Strict):
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


class EngineConfig(Strict):
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
