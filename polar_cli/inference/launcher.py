"""Launch SGLang from a recipe, wait until it really serves, prove it returns token ids, and always stop it.

Readiness is ``GET /health`` answering 200 (503 during warm-up; ``/v1/models`` answers before warm-up and is not
trusted), within the recipe's ``startup_timeout``; a server process that exits meanwhile fails at once with the tail
of its log. Then ``GET /model_info`` (served model, parsers) and one tiny chat request through the gateway's own
probe (`gateway.probe.probe_dialect`) check the token fields before any harness runs.

The server runs in its own session (process group), so a Ctrl-C at the terminal reaches Polar only and Polar stops
the whole group: SIGTERM, then SIGKILL after a grace period. `SGLangServer.stop` is also registered with atexit, so
an uncaught exception cannot leave eight GPUs held by an orphaned server. Its output goes to a log file in the run
directory.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import orjson

from polar_cli.config import SGLangConfig
from polar_cli.errors import UpstreamError
from polar_cli.gateway.upstream_client import UpstreamClient

log = logging.getLogger("polar.sglang")
STOP_GRACE = 30.0
LOG_TAIL = 4000


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def sglang_argv(settings: SGLangConfig, port: int) -> list[str]:
    """The ``launch_server`` command line for ``settings`` (flags per docs/upstream.md "Launching SGLang")."""
    prefix = list(settings.launcher or [settings.python or sys.executable, "-m", "sglang.launch_server"])
    argv = [*prefix, "--model-path", settings.model_path, "--host", settings.host, "--port", str(port)]
    argv += ["--tp-size", str(settings.tp_size)]
    if settings.dp_size > 1:
        argv += ["--dp-size", str(settings.dp_size)]
    for flag, value in (
        ("--mem-fraction-static", settings.mem_fraction_static),
        ("--context-length", settings.context_length),
        ("--served-model-name", settings.served_model_name),
        ("--reasoning-parser", settings.reasoning_parser),
        ("--tool-call-parser", settings.tool_call_parser),
    ):
        if value is not None:
            argv += [flag, str(value)]
    return argv + list(settings.extra_args)


def log_tail(path: Path, size: int = LOG_TAIL) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-size:].decode("utf-8", errors="replace")


@dataclass
class SGLangServer:
    """A launched server: its URL, process, log, and what /model_info said."""

    url: str
    process: subprocess.Popen[bytes]
    log_path: Path
    model_info: Mapping[str, Any] = field(default_factory=dict)
    _log_file: IO[bytes] | None = field(default=None, repr=False)

    def running(self) -> bool:
        return self.process.poll() is None

    def stop(self, grace: float = STOP_GRACE) -> int | None:
        """Stop the server's whole process group (SIGTERM, then SIGKILL after ``grace`` s); returns its exit code."""
        atexit.unregister(self.stop)
        if self.process.poll() is None:
            _signal_group(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(grace)
            except subprocess.TimeoutExpired:
                _signal_group(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        # children that outlived their leader (tp workers) still hold GPU memory
        _signal_group(self.process.pid, signal.SIGKILL)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        return self.process.returncode


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def start_process(argv: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None) -> SGLangServer:
    """Start ``argv`` in its own process group with its output appended to ``log_path`` (URL filled in later)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    out = log_path.open("ab")
    out.write(f"\n=== polar: starting {' '.join(argv)}\n".encode())
    out.flush()
    try:
        process = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
    except OSError as exc:
        out.close()
        raise UpstreamError(f"cannot start the SGLang server ({argv[0]}): {exc}") from exc
    server = SGLangServer("", process, log_path, _log_file=out)
    atexit.register(server.stop)
    return server


async def wait_healthy(client: UpstreamClient, server: SGLangServer, timeout: float, poll: float = 1.0) -> float:
    """Poll /health until 200; fail when the process exits or ``timeout`` passes. Returns the seconds waited."""
    start = time.monotonic()
    last = "no answer yet"
    while True:
        if not server.running():
            raise UpstreamError(
                f"the SGLang server exited with {server.process.returncode} before it was ready; "
                f"log {server.log_path}:\n{log_tail(server.log_path)}"
            )
        try:
            response = await client.get("/health")
            if response.status == 200:
                return time.monotonic() - start
            last = f"/health answered {response.status}"
        except UpstreamError as exc:
            last = exc.message
        if time.monotonic() - start >= timeout:
            raise UpstreamError(
                f"the SGLang server was not ready within {timeout:g} s ({last}); log {server.log_path}:\n"
                f"{log_tail(server.log_path)}"
            )
        await asyncio.sleep(poll)


async def model_info(client: UpstreamClient) -> dict[str, Any]:
    """``GET /model_info`` (served model path, parsers); an empty dict when the server has no such route."""
    response = await client.get("/model_info")
    if response.status != 200:
        return {}
    try:
        info = orjson.loads(response.body)
    except orjson.JSONDecodeError:
        return {}
    return info if isinstance(info, dict) else {}


async def launch_sglang(settings: SGLangConfig, log_path: Path, *, poll: float = 1.0) -> SGLangServer:
    """Start SGLang, wait for /health, read /model_info; the caller probes the token fields and stops it."""
    port = settings.port or free_port(settings.host)
    argv = sglang_argv(settings, port)
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::") else settings.host
    server = start_process(argv, log_path, settings.env)
    server.url = f"http://{host}:{port}"
    log.info("SGLang starting (pid %d, log %s): %s", server.process.pid, log_path, " ".join(argv))
    client = UpstreamClient(server.url, timeout=30.0, connect_timeout=2.0)
    try:
        waited = await wait_healthy(client, server, settings.startup_timeout, poll)
        server.model_info = await model_info(client)
        log.info("SGLang ready after %.0f s at %s: %s", waited, server.url, dict(server.model_info))
    except BaseException:
        server.stop()
        raise
    finally:
        await client.close()
    return server
