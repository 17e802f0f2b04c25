"""`polar proxy`: the gateway on its own, in front of a running SGLang or vLLM server."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Annotated, Any

import typer

from polar_cli.commands.common import LogLevelOpt, MetricsHostOpt, MetricsPortOpt, exit_codes
from polar_cli.errors import ConfigError


def _json_object_option(flag: str, text: str | None) -> dict[str, Any] | None:
    from polar_cli.translate.json_checks import load_object

    return load_object(text, flag, ConfigError) if text else None


def proxy(
    upstream: Annotated[str, typer.Option(help="Base URL of the SGLang or vLLM server, e.g. http://127.0.0.1:30000")],
    capture_dir: Annotated[Path, typer.Option(help="Directory for the per-session capture files")],
    dialect: Annotated[
        str,
        typer.Option(
            "--dialect", "--engine", help="sglang | vllm (sglang-legacy for releases before return_token_ids; probed)"
        ),
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
    token_in: Annotated[
        bool,
        typer.Option(
            "--token-in",
            help="Send each call that continues an earlier one of its session as exact token ids (needs --tokenizer)",
        ),
    ] = False,
    tokenizer: Annotated[
        str | None, typer.Option(help="Tokenizer directory: the model directory the server loads (or qwen3)")
    ] = None,
    chat_template: Annotated[
        Path | None, typer.Option(help="Chat template file, when the server is given one instead of the model's")
    ] = None,
    reasoning: Annotated[
        str, typer.Option(help="reinject: give turns sent back without reasoning their sampled reasoning; as-sent")
    ] = "reinject",
    log_level: LogLevelOpt = "info",
    metrics_port: MetricsPortOpt = None,
    metrics_host: MetricsHostOpt = "127.0.0.1",
) -> None:
    """Serve the four provider APIs from an OpenAI-compatible inference server, recording every token."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from polar_cli.capture.store import next_seq, session_file
    from polar_cli.gateway.proxy import parse_session_keys, serve
    from polar_cli.gateway.sessions import SessionRegistry
    from polar_cli.translate.dialects import dialect as dialect_named

    with exit_codes():
        upstream_dialect = dialect_named(dialect)
        kwargs = _json_object_option("--chat-template-kwargs", chat_template_kwargs)
        extra = _json_object_option("--upstream-extra", upstream_extra)
        if reasoning not in ("reinject", "as-sent"):
            raise ConfigError(f"--reasoning must be reinject or as-sent, not {reasoning!r}")
        if token_in and not tokenizer:
            raise ConfigError("--token-in needs --tokenizer (the model directory: its tokenizer and chat template)")
        # a restart with a session's key goes on numbering its calls where its capture file ends
        sessions = SessionRegistry(
            allow_unknown=allow_unknown_keys, first_seq=lambda sid: next_seq(session_file(capture_dir, sid))
        )
        for key, session_id in parse_session_keys(session_key or []):
            sessions.open(session_id, key)
        token_in_state = _token_in(tokenizer, chat_template) if token_in else None
    if not allow_unknown_keys and not session_key:
        typer.echo(
            "note: no --session-key given and --allow-unknown-keys off: every call will be refused (401)", err=True
        )
    with exit_codes():
        if metrics_port is not None:
            from polar_cli.metrics import start as start_metrics

            bound = start_metrics(metrics_port, metrics_host)[1]
            typer.echo(f"metrics: http://{metrics_host}:{bound}/metrics", err=True)
        asyncio.run(
            serve(
                upstream=upstream,
                dialect=upstream_dialect,
                host=host,
                port=port,
                capture_dir=capture_dir,
                model=model,
                sessions=sessions,
                chat_template_kwargs=kwargs,
                max_tokens_cap=max_tokens_cap,
                upstream_timeout=upstream_timeout,
                extra_body=extra,
                reasoning=reasoning,  # type: ignore[arg-type]
                token_in=token_in_state,
            )
        )


def _token_in(tokenizer: str | None, chat_template: Path | None) -> Any:
    from polar_cli.gateway.continuation import TokenIn
    from polar_cli.inference.tokenizers import ChatTokenizer

    assert tokenizer is not None
    loaded = ChatTokenizer.load(tokenizer, chat_template=chat_template)
    return TokenIn(loaded.template, loaded.vocab, loaded.turn_ends)
