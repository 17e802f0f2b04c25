"""`polar proxy`: the gateway on its own, in front of a running SGLang or vLLM server."""

from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer

from polar_cli.capture import CaptureWriter
from polar_cli.errors import ConfigError, UpstreamError
from polar_cli.gateway.handler import Gateway
from polar_cli.gateway.probe import probe_engine, served_model
from polar_cli.gateway.server import GatewayServer
from polar_cli.gateway.sessions import SessionRegistry
from polar_cli.gateway.upstream_client import UpstreamClient, upstream_root
from polar_cli.translate.upstream import Engine, UpstreamOptions

log = logging.getLogger("polar.proxy")


def parse_session_keys(values: list[str]) -> list[tuple[str, str]]:
    pairs = []
    for value in values:
        key, sep, session_id = value.partition("=")
        if not key:
            raise ConfigError(f"--session-key {value!r}: expected KEY or KEY=SESSION_ID")
        pairs.append((key, session_id if sep and session_id else key))
    return pairs


async def serve(
    *,
    upstream: str,
    engine: Engine,
    host: str,
    port: int,
    capture_dir: Path,
    model: str | None,
    sessions: SessionRegistry,
    chat_template_kwargs: dict[str, Any] | None,
    max_tokens_cap: int | None,
    upstream_timeout: float,
    extra_body: dict[str, Any] | None = None,
    ready: asyncio.Event | None = None,
) -> None:
    """Run the gateway until SIGINT/SIGTERM; every capture record is flushed before it returns."""
    client = UpstreamClient(upstream_root(upstream), timeout=upstream_timeout)
    if model is None:
        model = await served_model(client)
    options = UpstreamOptions(
        engine=engine,
        model=model,
        chat_template_kwargs=chat_template_kwargs,
        max_tokens_cap=max_tokens_cap,
        extra_body=extra_body,
    )
    options = replace(options, engine=await probe_engine(client, options))
    writer = CaptureWriter(capture_dir)
    server = GatewayServer(Gateway(upstream=client, options=options, sessions=sessions, capture=writer))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        bound = await server.start(host, port)
        log.info(
            "gateway on http://%s:%d -> %s (%s, model %s), capture in %s",
            *bound,
            upstream,
            options.engine,
            model,
            capture_dir,
        )
        if ready is not None:
            ready.set()
        await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await server.stop()
        writer.close()


def _json_object_option(flag: str, text: str | None) -> dict[str, Any] | None:
    if not text:
        return None
    value = orjson.loads(text)
    if not isinstance(value, dict):
        raise ConfigError(f"{flag} must be a JSON object")
    return value


def proxy(
    upstream: Annotated[str, typer.Option(help="Base URL of the SGLang or vLLM server, e.g. http://127.0.0.1:30000")],
    capture_dir: Annotated[Path, typer.Option(help="Directory for the per-session capture files")],
    engine: Annotated[
        str, typer.Option(help="sglang | vllm (sglang-legacy for releases before return_token_ids; probed)")
    ] = "sglang",
    host: Annotated[str, typer.Option(help="Address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on (0: any free port)")] = 8100,
    model: Annotated[str | None, typer.Option(help="Served model name (default: the upstream's first model)")] = None,
    session_key: Annotated[
        list[str] | None, typer.Option(help="A session key the harness will send, as KEY or KEY=SESSION_ID; repeatable")
    ] = None,
    allow_unknown_keys: Annotated[bool, typer.Option(help="Serve any API key, one session per key")] = False,
    chat_template_kwargs: Annotated[
        str | None, typer.Option(help="JSON merged into every call, e.g. '{\"enable_thinking\": false}'")
    ] = None,
    max_tokens_cap: Annotated[int | None, typer.Option(help="Upper bound on the max tokens a harness asks for")] = None,
    upstream_timeout: Annotated[float, typer.Option(help="Seconds to wait for one upstream answer")] = 1800.0,
    upstream_extra: Annotated[
        str | None,
        typer.Option(help="JSON of engine fields added to every call, e.g. '{\"repetition_penalty\": 1.05}'"),
    ] = None,
    log_level: Annotated[str, typer.Option(help="debug | info | warning")] = "info",
) -> None:
    """Serve the four provider APIs from an OpenAI-compatible inference server, recording every token."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if engine not in ("sglang", "sglang-legacy", "vllm"):
        raise typer.BadParameter(f"--engine must be sglang, sglang-legacy or vllm, not {engine!r}")
    try:
        kwargs = _json_object_option("--chat-template-kwargs", chat_template_kwargs)
        extra = _json_object_option("--upstream-extra", upstream_extra)
        sessions = SessionRegistry(allow_unknown=allow_unknown_keys)
        for key, session_id in parse_session_keys(session_key or []):
            sessions.open(session_id, key)
    except (ConfigError, orjson.JSONDecodeError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    if not allow_unknown_keys and not session_key:
        typer.echo(
            "note: no --session-key given and --allow-unknown-keys off: every call will be refused (401)", err=True
        )
    try:
        asyncio.run(
            serve(
                upstream=upstream,
                engine=engine,  # type: ignore[arg-type]
                host=host,
                port=port,
                capture_dir=capture_dir,
                model=model,
                sessions=sessions,
                chat_template_kwargs=kwargs,
                max_tokens_cap=max_tokens_cap,
                upstream_timeout=upstream_timeout,
                extra_body=extra,
            )
        )
    except UpstreamError as exc:
        typer.echo(f"error: {exc.message}", err=True)
        raise typer.Exit(1) from exc
