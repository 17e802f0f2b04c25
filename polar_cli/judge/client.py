"""The judge as a thin async shell around the pure parts: one chat call per chunk, retried, each call recorded apart.

Transports: `EndpointTransport` (any OpenAI-compatible Chat Completions endpoint, httpx, http or https, a Bearer key
read from the environment) and `EngineTransport` (the run's own engine, called directly: never through the gateway,
so no judge call is ever in the capture store the trajectories are built from). Every call, answered or not, is one
JSON line in the session's ``judge.jsonl`` (its request body whole, so a score can be reproduced).

A chunk whose call fails (no connection, a non-2xx, a body that is not a chat completion) or whose answer breaks the
parsing rules (`prompt`) is tried again, ``retries`` more times; then `JudgeError`: a machinery error (the session is
retried), never a reward of 0.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx
import orjson

from polar_cli.capture import CaptureRecord
from polar_cli.errors import ConfigError, PolarError, UpstreamError
from polar_cli.gateway.upstream_client import UPSTREAM_PATH, Upstream, upstream_root
from polar_cli.judge import prompt as p
from polar_cli.judge.config import JudgeConfig
from polar_cli.judge.reward import Policy
from polar_cli.judge.rubric import Rubric, load_rubric
from polar_cli.judge.transcript import Caps, build_transcript, chunks
from polar_cli.trajectory import Trace

RECORD_NAME = "judge.jsonl"


class JudgeError(PolarError):
    """The judge could not score a session (endpoint down, answers unparsable after the retries): retry the session."""


class JudgeCallError(Exception):
    """One judge call failed; retried."""


class Transport(Protocol):
    async def complete(self, body: dict[str, Any]) -> dict[str, Any]: ...

    async def close(self) -> None: ...


class EndpointTransport:
    def __init__(
        self, url: str, api_key: str | None, timeout: float, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self.url = upstream_root(url) + "/v1/chat/completions"
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(headers=headers, timeout=timeout, transport=transport)

    async def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        try:
            response = await self._client.post(self.url, content=orjson.dumps(body), headers=_JSON)
        except httpx.HTTPError as exc:
            raise JudgeCallError(f"{self.url}: {type(exc).__name__}: {exc}") from exc
        return _answer(response.status_code, response.content)

    async def close(self) -> None:
        await self._client.aclose()


class EngineTransport:
    def __init__(self, upstream: Upstream) -> None:
        self._upstream = upstream

    async def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        try:
            response = await self._upstream.post_json(UPSTREAM_PATH, orjson.dumps(body))
        except UpstreamError as exc:
            raise JudgeCallError(f"engine: {exc}") from exc
        return _answer(response.status, response.body)

    async def close(self) -> None:
        return None  # the engine is the run's, closed with it


_JSON = {"content-type": "application/json"}


def _answer(status: int, body: bytes) -> dict[str, Any]:
    if not 200 <= status < 300:
        raise JudgeCallError(f"HTTP {status}: {body[:300]!r}")
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise JudgeCallError(f"the answer is not JSON: {body[:200]!r}") from exc
    if not isinstance(data, dict):
        raise JudgeCallError("the answer is not a JSON object")
    return data


def content_of(answer: dict[str, Any]) -> str | None:
    """The first choice's message text (None when the answer is no chat completion)."""
    choices = answer.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    message = choices[0].get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, str) else None


@dataclass(frozen=True, slots=True)
class JudgeResult:
    """A session's scores, and what reproduces them."""

    score: float
    criteria: dict[str, float]
    reasons: dict[str, list[str]]
    chunk_scores: list[dict[str, float]]
    rubric_sha256: str
    prompt_sha256: str
    model: str
    endpoint: str
    calls: int
    record: str
    policy: Policy
    weights: dict[str, float] = field(default_factory=dict)

    def to_row(self, tests_reward: float) -> dict[str, Any]:
        """The row's ``judge`` field (docs/judge.md "On the row")."""
        reward, passed = self.policy.combine(tests_reward, self.score)
        return {
            "score": round(self.score, 6),
            "criteria": {
                name: {"score": round(v, 6), "weight": self.weights.get(name), "reasons": self.reasons.get(name, [])}
                for name, v in self.criteria.items()
            },
            "chunks": len(self.chunk_scores),
            "chunk_scores": self.chunk_scores,
            "rubric_sha256": self.rubric_sha256,
            "prompt_sha256": self.prompt_sha256,
            "model": self.model,
            "endpoint": self.endpoint,
            "calls": self.calls,
            "record": self.record,
            "mode": self.policy.mode,
            "threshold": self.policy.threshold,
            "tests_reward": tests_reward,
            "reward": round(reward, 6),
            "passed": passed,
        }


class Judge:
    """Scores sessions against one rubric through one transport."""

    def __init__(self, config: JudgeConfig, rubric: Rubric, transport: Transport, model: str, endpoint: str) -> None:
        self.config = config
        self.rubric = rubric
        self.transport = transport
        self.model = model
        self.endpoint = endpoint
        self.policy = Policy.of(config)
        self.caps = Caps.of(config)

    @classmethod
    def open(cls, config: JudgeConfig, engine_upstream: Upstream | None, engine_model: str) -> Judge:
        """The judge a recipe's section names: its endpoint (the key read from ``api_key_env``), or the engine."""
        rubric = load_rubric(config.rubric)
        if config.url is not None:
            key = os.environ.get(config.api_key_env) if config.api_key_env else None
            if config.api_key_env and not key:
                raise ConfigError(f"judge.api_key_env: the environment variable {config.api_key_env} is not set")
            transport: Transport = EndpointTransport(config.url, key, config.timeout)
            return cls(config, rubric, transport, config.model or "", upstream_root(config.url))
        if engine_upstream is None:
            raise JudgeError("judge: no url, and no engine to answer the judge's calls")
        return cls(config, rubric, EngineTransport(engine_upstream), config.model or engine_model, "engine")

    def prompts(self, traces: Sequence[Trace], records: Sequence[CaptureRecord]) -> tuple[list[Any], list[int]]:
        """Each chunk's messages and its transcript characters (pure: the same session gives the same prompts)."""
        transcript = build_transcript(traces, records, self.caps)
        parts = chunks(transcript, self.config.chunk_chars)
        return p.chunk_messages(self.rubric, transcript.task, parts), [len(c) for c in parts]

    def body(self, messages: list[dict[str, str]]) -> dict[str, Any]:
        body: dict[str, Any] = {**(self.config.extra_body or {})}
        body |= {"model": self.model, "messages": messages, "max_tokens": self.config.max_tokens}
        body |= {"temperature": self.config.temperature, "stream": False}
        if self.config.structured:
            schema = {"name": "rubric_scores", "schema": p.answer_schema(self.rubric)}
            body["response_format"] = {"type": "json_schema", "json_schema": schema}
        return body

    async def score(
        self, traces: Sequence[Trace], records: Sequence[CaptureRecord], record_path: Path, record_name: str = ""
    ) -> JudgeResult:
        """Score one session; its calls appended to ``record_path``. `JudgeError` when a chunk stays unscored."""
        requests, sizes = self.prompts(traces, records)
        record_path.parent.mkdir(parents=True, exist_ok=True)
        per_chunk: list[dict[str, tuple[float, str]]] = []
        calls = 0
        with record_path.open("ab") as record:
            for index, messages in enumerate(requests):
                body = self.body(messages)
                last = ""
                for attempt in range(self.config.retries + 1):
                    calls += 1
                    started = time.time()
                    entry: dict[str, Any] = {"chunk": index, "chunks": len(requests), "attempt": attempt}
                    entry |= {"started": started, "endpoint": self.endpoint, "request": body}
                    try:
                        answer = await self.transport.complete(body)
                        entry["response"] = answer
                        parsed = p.parse_answer(content_of(answer), self.rubric)
                    except (JudgeCallError, p.JudgeAnswerError) as exc:
                        last = str(exc)
                        entry |= {"status": "error", "error": last, "latency": round(time.time() - started, 3)}
                        record.write(orjson.dumps(entry) + b"\n")
                        record.flush()
                        continue
                    entry |= {"status": "ok", "scores": {k: v[0] for k, v in parsed.items()}}
                    entry["latency"] = round(time.time() - started, 3)
                    record.write(orjson.dumps(entry) + b"\n")
                    record.flush()
                    per_chunk.append(parsed)
                    break
                else:
                    raise JudgeError(f"chunk {index + 1}/{len(requests)} unscored after {calls} calls: {last}")
        raw = [{k: v[0] for k, v in chunk.items()} for chunk in per_chunk]
        criteria = p.combine_chunks(raw, sizes, self.config.chunk_combine, self.rubric)
        return JudgeResult(
            score=p.session_score(criteria, self.rubric),
            criteria=criteria,
            reasons={n: [chunk[n][1] for chunk in per_chunk] for n in self.rubric.names},
            chunk_scores=raw,
            rubric_sha256=self.rubric.sha256,
            prompt_sha256=p.sha256_json(requests),
            model=self.model,
            endpoint=self.endpoint,
            calls=calls,
            record=record_name or str(record_path),
            policy=self.policy,
            weights={c.name: c.weight for c in self.rubric.criteria},
        )

    async def close(self) -> None:
        await self.transport.close()
