"""`polar run`: one ad-hoc session: an engine and the gateway in-process, one harness in one container, a JSON result.

Exit codes: 0 the session ended ok, 1 it did not (or the engine or runtime failed), 2 bad usage, 130 interrupted
(Ctrl-C, and SIGTERM turned into it; the session's container is removed either way).
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Annotated

import orjson
import typer

from polar_cli.commands.common import FAILED, exit_codes


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # SIGTERM cleans up exactly like Ctrl-C


def run(
    harness: Annotated[
        str, typer.Option(help="claude-code | codex | qwen-code | gemini-cli | pi, or one of --harness-config's")
    ],
    harness_config: Annotated[
        str | None,
        typer.Option(help="YAML defining custom harnesses (NAME: {argv, api, ...}), or a recipe with custom_harnesses"),
    ] = None,
    image: Annotated[str | None, typer.Option(help="Image to run in (the work happens in --workdir)")] = None,
    instruction: Annotated[str | None, typer.Option(help="The task, given to the harness verbatim")] = None,
    instance: Annotated[str | None, typer.Option(help="instance_id of a manifest row")] = None,
    manifest: Annotated[str | None, typer.Option(help="Manifest (.json/.jsonl/.parquet) holding --instance")] = None,
    image_template: Annotated[
        str | None, typer.Option(help="Instance image name template (swe-gym | swe-bench | format string)")
    ] = None,
    upstream: Annotated[str | None, typer.Option(help="A running SGLang or vLLM server (URL)")] = None,
    engine: Annotated[
        str | None,
        typer.Option(help="gold | noop (scripted, no server); with --upstream: sglang | sglang-legacy | vllm"),
    ] = None,
    model: Annotated[str | None, typer.Option(help="Served model name (default: the server's first)")] = None,
    tokenizer: Annotated[
        str | None, typer.Option(help="gold/noop: tokenizer dir, or qwen3 (default); with --token-in: the model dir")
    ] = None,
    token_in: Annotated[
        bool, typer.Option("--token-in", help="Send continuing calls as exact token ids (docs/fidelity.md)")
    ] = False,
    timeout: Annotated[float, typer.Option(help="Seconds for the whole session, from container start")] = 1800.0,
    out: Annotated[
        Path | None, typer.Option(help="Directory for capture and artifacts (default runs/<session>)")
    ] = None,
    workdir: Annotated[str, typer.Option(help="Working directory of the harness in the container")] = "/testbed",
    cpus: Annotated[float | None, typer.Option(help="CPU limit of the container")] = None,
    memory_mb: Annotated[int | None, typer.Option(help="Memory limit of the container (MiB)")] = None,
) -> None:
    """Run one harness session in a container through a local gateway; prints a JSON result (exit 0 when ok)."""
    from polar_cli.harness.custom import load_harness_config, resolve_adapter
    from polar_cli.node.adhoc import AdhocRun, engine_config, new_session_id, resolve_target, run_adhoc

    previous_handler = signal.signal(signal.SIGTERM, _terminate)
    session_id = new_session_id()
    try:
        with exit_codes(interrupted="interrupted: the session's container was removed"):
            adhoc = AdhocRun(
                harness=resolve_adapter(harness, load_harness_config(harness_config) if harness_config else {}),
                engine=engine_config(upstream, engine, model, tokenizer, token_in),
                target=resolve_target(image, instruction, instance, manifest, image_template),
                out_dir=out or Path("runs") / session_id,
                session_id=session_id,
                workdir=workdir,
                timeout=timeout,
                cpus=cpus,
                memory_bytes=memory_mb * 1024 * 1024 if memory_mb else None,
            )
            outcome, result = run_adhoc(adhoc, _stderr)
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
    sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
    raise typer.Exit(0 if outcome.status == "ok" else FAILED)
