"""Many harness sessions at once against a running gateway: the driver of the load test and its benchmark.

Each session is its own `httpx.AsyncClient` (its own connections, as separate harness processes have) speaking one
provider API, streaming: Anthropic Messages, OpenAI Chat, OpenAI Responses or Google streamGenerateContent (SSE),
assigned round-robin. A session makes its calls one after another, each sending the history so far (its earlier
answers and a new user turn), and checks that every stream ends with its API's terminal event.

    results = asyncio.run(run_sessions(gw.url, [(name, key), ...], calls=3, timeout=30))

`RssSampler` watches the process's resident memory on a thread while a load runs (Linux: /proc/self/status).
"""

from __future__ import annotations

import asyncio
import resource
import ssl
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import orjson

APIS = ("anthropic_messages", "openai_chat", "openai_responses", "google_genai")
GOOGLE_MODEL = "gemini-load"


@dataclass(frozen=True)
class CallResult:
    session: str
    api: str
    seq: int
    status: int  # 0: no HTTP answer (see error)
    latency: float  # seconds from sending the request to the end of the stream
    complete: bool  # the stream ended with its API's terminal event
    error: str | None = None  # the client-side failure (a timeout, a reset): exception type and message
    text: str = ""


def api_for(index: int) -> str:
    return APIS[index % len(APIS)]


def call_request(api: str, key: str, session: str, seq: int) -> tuple[str, dict[str, str], bytes]:
    """(path with query, headers, body) of call ``seq`` of a session: a task, then ``seq`` rounds of answer + turn."""
    turns: list[tuple[str, str]] = [("user", f"task of {session}")]
    for i in range(seq):
        turns += [("assistant", "ok"), ("user", f"step {i + 1} of {session}")]
    body: dict[str, Any]
    if api == "google_genai":
        path = f"/v1beta/models/{GOOGLE_MODEL}:streamGenerateContent?alt=sse"
        headers = {"x-goog-api-key": key}
        contents = [{"role": "model" if r == "assistant" else "user", "parts": [{"text": t}]} for r, t in turns]
        body = {"contents": contents}
    else:
        messages = [{"role": r, "content": t} for r, t in turns]
        if api == "anthropic_messages":
            path, headers = "/v1/messages", {"x-api-key": key, "anthropic-version": "2023-06-01"}
            body = {"model": "claude-load", "max_tokens": 64, "stream": True, "messages": messages}
        elif api == "openai_chat":
            path, headers = "/v1/chat/completions", {"authorization": f"Bearer {key}"}
            body = {"model": "gpt-load", "stream": True, "messages": messages}
        else:
            path, headers = "/v1/responses", {"authorization": f"Bearer {key}"}
            body = {"model": "gpt-load", "stream": True, "input": messages}
    headers["content-type"] = "application/json"
    return path, headers, orjson.dumps(body)


def stream_complete(api: str, text: str) -> bool:
    """Whether an SSE answer ends with its API's terminal event."""
    frames = [f for f in text.split("\n\n") if f.strip()]
    if not frames:
        return False
    last = frames[-1].strip()
    if api == "anthropic_messages":
        return last.startswith("event: message_stop")
    if api == "openai_chat":
        return last == "data: [DONE]"
    if api == "openai_responses":
        return last.startswith("event: response.completed")
    if not last.startswith("data: "):
        return False
    chunk = orjson.loads(last[len("data: ") :])
    return bool(chunk.get("candidates")) and chunk["candidates"][0].get("finishReason") == "STOP"


# one TLS context for every client (httpx builds one per client otherwise: ~40 ms each, for plain http we never use)
SSL_CONTEXT = ssl.create_default_context()


async def run_session(base_url: str, session: str, key: str, api: str, calls: int, timeout: float) -> list[CallResult]:
    results: list[CallResult] = []
    async with httpx.AsyncClient(base_url=base_url, verify=SSL_CONTEXT, timeout=timeout) as client:
        for seq in range(calls):
            path, headers, body = call_request(api, key, session, seq)
            started = time.perf_counter()
            try:
                response = await client.post(path, content=body, headers=headers)
            except httpx.HTTPError as exc:
                results.append(
                    CallResult(
                        session, api, seq, 0, time.perf_counter() - started, False, f"{type(exc).__name__}: {exc}"
                    )
                )
                continue
            text = response.text
            latency = time.perf_counter() - started
            complete = response.status_code == 200 and stream_complete(api, text)
            results.append(CallResult(session, api, seq, response.status_code, latency, complete, text=text))
    return results


async def run_sessions(
    base_url: str, sessions: Sequence[tuple[str, str]], *, calls: int, timeout: float
) -> list[CallResult]:
    """Every session at once, ``calls`` sequential calls each; the API of session i is ``api_for(i)``."""
    runs = [run_session(base_url, name, key, api_for(i), calls, timeout) for i, (name, key) in enumerate(sessions)]
    return [r for results in await asyncio.gather(*runs) for r in results]


def raise_fd_limit(needed: int) -> bool:
    """Lift the soft open-files limit to ``needed`` if the hard limit allows; whether it is now at least that."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= needed:
        return True
    if hard != resource.RLIM_INFINITY and hard < needed:
        return False
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    return True


_STATUS = Path("/proc/self/status")


def rss_mb() -> float:
    """This process's resident memory now, in MB (Linux)."""
    for line in _STATUS.read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


class RssSampler:
    """Samples `rss_mb` every ``interval`` seconds while the block runs: ``baseline``, ``peak``, ``growth``."""

    def __init__(self, interval: float = 0.02) -> None:
        self.interval = interval
        self.baseline = 0.0
        self.peak = 0.0
        self.end = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    @property
    def growth(self) -> float:
        return self.peak - self.baseline

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, rss_mb())

    def __enter__(self) -> RssSampler:
        self.baseline = self.peak = rss_mb()
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()
        self.end = rss_mb()
        self.peak = max(self.peak, self.end)


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
