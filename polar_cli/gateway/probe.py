"""Start-up check of the upstream: one tiny request proves the token fields are there, before any harness runs."""

from __future__ import annotations

import orjson

from polar_cli.errors import TokenCaptureError, UpstreamError
from polar_cli.gateway.upstream_client import UPSTREAM_PATH, Upstream
from polar_cli.translate.dialects import Dialect, dialect
from polar_cli.translate.ir import ChatRequest, Message, Sampling, Text
from polar_cli.translate.upstream import UpstreamOptions, chat_body, token_capture, upstream_error


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
        response = await client.post_json(UPSTREAM_PATH, orjson.dumps(body))
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
