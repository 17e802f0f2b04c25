"""Start-up checks of the upstream: one tiny request proves the token fields are there, before any harness runs;
a few more find what the server's chat template refuses or drops when no local copy of the template is at hand."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import orjson

from polar_cli.errors import TokenCaptureError, UpstreamError
from polar_cli.gateway.upstream_client import UPSTREAM_PATH, Upstream
from polar_cli.templates.traits import PROBES, TemplateTraits
from polar_cli.translate.dialects import Dialect, dialect
from polar_cli.translate.ir import ChatRequest, Message, Sampling, Text
from polar_cli.translate.upstream import UpstreamOptions, chat_body, token_capture, upstream_answer, upstream_error
from polar_cli.wire.http11 import Response

log = logging.getLogger("polar.gateway")

# a start-up probe call that fails for the server's own reasons (5xx, a dropped connection, a timeout) is tried this
# many times in all, after waits of RETRY_DELAY seconds, doubling: one bad answer does not end a start-up
ATTEMPTS = 4
RETRY_DELAY = 0.5


async def _post(client: Upstream, body: bytes) -> Response:
    """``body`` posted to the chat path, retried on 5xx answers and transport errors; the last failure is returned
    (an answer) or raised (an error)."""
    delay = RETRY_DELAY
    for attempt in range(1, ATTEMPTS + 1):
        try:
            response = await client.post_json(UPSTREAM_PATH, body)
        except UpstreamError as exc:
            if attempt == ATTEMPTS or exc.status < 500:
                raise
            log.warning("start-up probe: %s; retrying in %g s", exc.message, delay)
        else:
            if response.status < 500 or attempt == ATTEMPTS:
                return response
            log.warning("start-up probe: upstream answered %d; retrying in %g s", response.status, delay)
        await asyncio.sleep(delay)
        delay *= 2
    raise AssertionError("unreachable")


async def served_model(client: Upstream) -> str:
    """The first model the upstream serves (vLLM refuses calls naming any other)."""
    response = await client.get("/v1/models")
    if response.status != 200:
        raise UpstreamError(f"GET /v1/models answered {response.status}")
    try:
        data = orjson.loads(response.body).get("data") or []
        return str(data[0]["id"])
    except (orjson.JSONDecodeError, AttributeError, IndexError, KeyError, TypeError) as exc:
        raise UpstreamError(f"GET /v1/models gave no model id: {response.body[:200]!r}") from exc


async def probe_dialect(client: Upstream, options: UpstreamOptions) -> Dialect:
    """The dialect whose token fields this server fills, tried in ``options.dialect.probe_order``; fails loudly if
    none does (SGLang renamed its token options: docs/upstream.md "The start-up probe")."""
    candidates = [dialect(name) for name in options.dialect.probe_order]
    probe = ChatRequest(
        model=options.model, messages=(Message("user", (Text("Say OK."),)),), sampling=Sampling(max_tokens=2)
    )
    failure: TokenCaptureError | None = None
    for candidate in candidates:
        body = chat_body(probe, UpstreamOptions(candidate, model=options.model), rid=f"polar-probe-{candidate.name}")
        response = await _post(client, orjson.dumps(body))
        if response.status != 200:
            raise upstream_error(response.status, response.body)
        try:
            token_capture(orjson.loads(response.body))
        except TokenCaptureError as exc:
            failure = exc
            continue
        except orjson.JSONDecodeError as exc:
            raise UpstreamError(f"upstream answer is not JSON: {exc}") from exc
        return candidate
    assert failure is not None
    raise failure


PROBE_TOOL = {
    "type": "function",
    "function": {"name": "polar_probe", "description": "Probe.", "parameters": {"type": "object", "properties": {}}},
}


async def probe_tools(client: Upstream, options: UpstreamOptions) -> None:
    """Fail loudly when the server refuses a call that offers tools, as every harness's does: a vLLM started without
    ``--enable-auto-tool-choice`` answers each of them 400, which would turn every session into an error."""
    seed = ChatRequest(model=options.model, messages=(Message("user", (Text("OK"),)),), sampling=Sampling(max_tokens=1))
    body = {**chat_body(seed, options, rid="polar-probe-tools"), "tools": [PROBE_TOOL], "tool_choice": "auto"}
    response = await _post(client, orjson.dumps(body))
    if response.status == 200:
        return
    error = upstream_error(response.status, response.body)
    if response.status == 400 and "tool" in error.message.lower():
        raise UpstreamError(
            f"the server refuses calls that offer tools ({error.message}), and every harness offers them: start "
            "vLLM with --enable-auto-tool-choice --tool-call-parser NAME (SGLang: --tool-call-parser NAME)"
        )
    raise error


async def probe_traits(client: Upstream, options: UpstreamOptions) -> TemplateTraits:
    """The `TemplateTraits` of the server's own chat template, read from its answers to `templates.traits.PROBES`.

    Each probe and its control go out as tiny calls (one sampled token) built like the gateway's, with ``options``'
    token fields, template kwargs and extra fields. The control answered 200 and the probe 400 (the template's
    ``raise_exception``: "System message must be at the beginning.", "No user query found in messages.") -> the
    probe's ``refused`` trait. Both 200, but the probe's prompt no longer than the control's although it adds text
    (a system message after the user's, a second tool call) -> its ``dropped`` trait. A control the server refuses
    decides nothing. A probe whose calls still fail after `ATTEMPTS` tries (5xx, transport errors), or whose answer
    cannot be read, leaves its traits unknown (taken as off): the start-up goes on, and a warning names them.
    """
    seed = ChatRequest(model=options.model, messages=(Message("user", (Text("OK"),)),), sampling=Sampling(max_tokens=1))
    base = chat_body(seed, options, rid="polar-probe-traits")
    counts: dict[bytes, int | None] = {}

    async def prompt_tokens(messages: Sequence[dict[str, Any]]) -> int | None:
        key = orjson.dumps(messages)
        if key not in counts:
            body = {**base, "messages": list(messages)}
            if "rid" in body:
                body["rid"] = f"polar-probe-traits-{len(counts)}"
            counts[key] = await _prompt_tokens(client, orjson.dumps(body))
        return counts[key]

    held: set[str] = set()
    unknown: list[str] = []
    for probe in PROBES:
        try:
            control = await prompt_tokens(probe.control)
            if control is None:
                continue
            tokens = await prompt_tokens(probe.messages)
        except UpstreamError as exc:
            names = [t for t in (probe.refused, probe.dropped) if t]
            log.warning("chat template probe %s failed (%s): %s unknown", probe.name, exc.message, ", ".join(names))
            unknown.extend(names)
            continue
        trait = probe.refused if tokens is None else probe.dropped if tokens <= control else None
        if trait is not None:
            log.info("chat template probe %s: %s", probe.name, trait)
            held.add(trait)
    if unknown:
        log.warning("starting with the chat template traits it could read; unknown (taken as off): %s", unknown)
    return TemplateTraits(**dict.fromkeys(held, True))


async def _prompt_tokens(client: Upstream, body: bytes) -> int | None:
    """The prompt's token count, or None where the server refused the conversation (400/422)."""
    response = await _post(client, body)
    if response.status in (400, 422):
        return None
    answer = upstream_answer(response.status, response.body)
    usage = answer.get("usage")
    if isinstance(usage, dict) and isinstance(usage.get("prompt_tokens"), int):
        return int(usage["prompt_tokens"])
    return len(token_capture(answer).prompt_ids)


def with_server_rules(traits: TemplateTraits, dialect: Dialect) -> TemplateTraits:
    """``traits`` plus what the server itself enforces before its template: SGLang parses every history tool call's
    arguments into an object (``parse_tool_call_arguments``) and refuses any that are not one."""
    if dialect.name.startswith("sglang"):
        return replace(traits, needs_object_arguments=True)
    return traits
