"""`polar serve`'s configuration (serve.yaml): a node as a generate recipe describes one, plus the service.

The engine, runtime, stage pools, timeouts, grading and builder sections are a recipe's (`polar_cli.config`), so a
recipe's settings carry over unchanged; they are the defaults a task's own settings override. ``harnesses`` lists
what tasks may name (their bundles are made ready when the service starts), ``service`` how it listens, where its
journal lives, and how callbacks are delivered. Unknown keys are refused everywhere; ``dotted.key=value`` overrides
work as for recipes.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, model_validator

from polar_cli.config import SessionsConfig, Strict, resolve_paths
from polar_cli.errors import ConfigError
from polar_cli.harness.base import HarnessAdapter
from polar_cli.overrides import apply_override, errors_text, plain

TOKEN_ENV = "POLAR_SERVE_TOKEN"


class CallbackConfig(Strict):
    attempts: int = Field(default=8, ge=1)
    """Deliveries tried per task before it is marked failed (visible in /v1/status; results stay served)."""
    backoff: float = Field(default=1.0, ge=0)
    """Seconds before the second attempt; doubled after each failure, at most ``max_backoff``."""
    max_backoff: float = Field(default=60.0, ge=0)
    timeout: float = Field(default=10.0, gt=0)
    """Seconds one delivery may take (a receiver that hangs is a failed attempt)."""


class ServiceConfig(Strict):
    host: str = "127.0.0.1"
    """Address the service listens on; anything beyond loopback needs ``auth_token``."""
    port: int = Field(default=8200, ge=0, le=65535)
    """0: a free port (printed at start)."""
    state_dir: str = "runs/serve"
    """The journal, results, capture records and logs; the same directory resumes after a crash."""
    auth_token: str | None = None
    """Bearer token every request but /health must carry (else the environment's POLAR_SERVE_TOKEN)."""
    max_body_mb: float = Field(default=16.0, gt=0)
    """Largest request body accepted (a 413 beyond)."""
    refuse_while_paused: bool = False
    """Answer new tasks 503 while paused (default: accept and queue them)."""
    session_retries: int = Field(default=2, ge=0)
    """A session the machinery failed is run again this many times before it is returned as an error."""
    node_id: str | None = None
    """Stamped on every result (None: the host name and the process id)."""
    fsync: bool = False
    """fsync every journal line (power loss, not just a killed process)."""
    callback: CallbackConfig = Field(default_factory=CallbackConfig)
    masked_reward: Literal["null", "zero"] = "null"
    """A masked session's ``reward`` unless a task says (``trainer.masked_reward``): ``null`` or 0.0."""
    logprobs_mode: Literal["raw_logprobs", "processed_logprobs", "raw_logits", "processed_logits"] | None = None
    """What the engine's logprobs are (vLLM ``--logprobs-mode``; raw: before temperature and top-p/k), stamped on
    every trace; None: what the engine reports, else unknown."""


class ServeConfig(SessionsConfig):
    name: str = "serve"
    """Names the evaluation logs' run directory (logs/run_evaluation/<name>/...)."""
    service: ServiceConfig = Field(default_factory=ServiceConfig)

    @model_validator(mode="after")
    def _known(self) -> ServeConfig:
        from polar_cli.harness.custom import resolve_adapter

        for name in self.harnesses:
            try:
                resolve_adapter(name, self.custom_harnesses)
            except ConfigError as exc:
                raise ValueError(f"harnesses: {exc}") from exc
        return self

    def adapters(self) -> dict[str, HarnessAdapter]:
        from polar_cli.harness.custom import resolve_adapter

        return {a.name: a for a in (resolve_adapter(n, self.custom_harnesses) for n in self.harnesses)}

    def auth_token(self) -> str | None:
        return self.service.auth_token or os.environ.get(TOKEN_ENV) or None

    def check_exposure(self) -> None:
        """A service listening beyond loopback must require a token."""
        if not is_loopback(self.service.host) and self.auth_token() is None:
            raise ConfigError(
                f"service.host {self.service.host} is reachable beyond this machine: set service.auth_token "
                f"(or {TOKEN_ENV}) so that only your trainer can submit work"
            )


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_serve_config(
    data: Any, overrides: Sequence[str] = (), *, source: str = "serve config", base: Path | None = None
) -> ServeConfig:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of keys, got {type(data).__name__}")
    raw = plain(data)
    for text in overrides:
        apply_override(raw, text, ServeConfig)
    if base is not None:
        resolve_paths(raw, base)
    try:
        return ServeConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {errors_text(exc)}") from exc


def load_serve_config(path: Path | None, overrides: Sequence[str] = ()) -> ServeConfig:
    """serve.yaml (None: the gold engine on the demo's tokenizer, Pi, every default), overridden and validated."""
    if path is None:
        return parse_serve_config(default_config(), overrides, source="default serve config")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except OSError as exc:
        raise ConfigError(f"serve config {path}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"serve config {path}: not valid YAML: {exc}") from exc
    return parse_serve_config(data, overrides, source=f"serve config {path}", base=path.resolve().parent)


def default_config() -> dict[str, Any]:
    return {"harnesses": ["pi"], "engine": {"kind": "gold", "tokenizer": "qwen3"}}
