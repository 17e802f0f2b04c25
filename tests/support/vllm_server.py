"""Start and stop the REAL vLLM OpenAI server (CPU build) for the integration tier.

vLLM lives in its own venv (``.venv-vllm``, made by scripts/setup-tests) because its pinned
dependencies clash with the test venv. A missing venv is an error, never a skip: CI installs it, and
a tier that silently skips hides regressions.

    with VLLMServer(SMOLLM2_DIR, served_model_name="smollm2") as server:
        httpx.post(server.url + "/v1/chat/completions", json=...)

or, in a test module, ``smollm2 = vllm_fixture(SMOLLM2_DIR, "smollm2")`` for a module-scoped fixture.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
VLLM_VENV = REPO_ROOT / ".venv-vllm"
READY_TIMEOUT_S = 300.0
# torch.compile warm-up costs ~45 s of start-up on 2 cores (its cache does not reload in this build)
# and changes nothing the tests look at.
DEFAULT_ARGS = ("--enforce-eager",)
STOP_TIMEOUT_S = 30.0


class VLLMNotInstalled(RuntimeError):
    """The vLLM venv is missing: run scripts/setup-tests."""


class VLLMStartError(RuntimeError):
    """vLLM exited or never became healthy; the message carries the end of its log."""


def vllm_python(venv: Path = VLLM_VENV) -> Path:
    python = venv / "bin" / "python"
    if not python.is_file():
        raise VLLMNotInstalled(
            f"{venv} has no bin/python: the vLLM integration tier needs it. Run scripts/setup-tests "
            "(it creates the separate vLLM venv with vllm-cpu)."
        )
    return python


def vllm_env(venv: Path = VLLM_VENV, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment the CPU build needs (see the vLLM notes in the shared upstream doc)."""
    env = dict(os.environ if base is None else base)
    iomp = venv / "lib" / "libiomp5.so"
    if iomp.is_file():
        # The CPU wheel links Intel OpenMP; preloading it avoids a clash with the libgomp torch loads.
        env["LD_PRELOAD"] = " ".join(p for p in (str(iomp), env.get("LD_PRELOAD", "")) if p)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache; the default is sized for big boxes
    env["HF_HUB_OFFLINE"] = "1"  # no hub is reachable: fail fast instead of retrying downloads
    env["TRANSFORMERS_OFFLINE"] = "1"
    env.setdefault("VLLM_NO_USAGE_STATS", "1")
    env.setdefault("DO_NOT_TRACK", "1")
    return env


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class VLLMServer:
    """A vLLM OpenAI-compatible server on 127.0.0.1 with an ephemeral port, as a context manager."""

    def __init__(
        self,
        model_dir: Path,
        served_model_name: str,
        *,
        log_path: Path | None = None,
        extra_args: Sequence[str] = DEFAULT_ARGS,
        ready_timeout_s: float = READY_TIMEOUT_S,
        venv: Path = VLLM_VENV,
        env: dict[str, str] | None = None,
    ) -> None:
        self.model_dir = model_dir
        self.served_model_name = served_model_name
        self.log_path = log_path or (REPO_ROOT / ".cache" / "logs" / f"vllm-{served_model_name}.log")
        self.extra_args = tuple(extra_args)
        self.ready_timeout_s = ready_timeout_s
        self.venv = venv
        self.env = dict(env or {})  # over vllm_env's (VLLM_SERVER_DEV_MODE=1 for the weight-reload routes)
        self.port = 0
        self.ready_after_s = 0.0
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        # `python -m` because the `vllm` console script fails under the vllm-cpu distribution name.
        return [
            str(vllm_python(self.venv)),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.model_dir),
            "--served-model-name",
            self.served_model_name,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            *self.extra_args,
        ]

    def start(self) -> None:
        """Launch vLLM and block until GET /health answers 200 (or raise with the log tail)."""
        vllm_python(self.venv)
        if not (self.model_dir / "config.json").is_file():
            raise VLLMStartError(f"{self.model_dir} is not a prepared model directory: run scripts/setup-tests")
        self.port = free_port()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        with self.log_path.open("wb") as log:
            self._proc = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**vllm_env(self.venv), **self.env},
                cwd=str(REPO_ROOT),
                start_new_session=True,
            )
        try:
            self._wait_healthy(started)
        except BaseException:
            self.stop()
            raise
        self.ready_after_s = time.monotonic() - started

    def _wait_healthy(self, started: float) -> None:
        assert self._proc is not None
        while True:
            code = self._proc.poll()
            if code is not None:
                raise VLLMStartError(
                    f"vLLM exited with code {code} before it was healthy; log {self.log_path}:\n"
                    + log_tail(self.log_path)
                )
            if self._healthy():
                return
            if time.monotonic() - started > self.ready_timeout_s:
                raise VLLMStartError(
                    f"vLLM was not healthy after {self.ready_timeout_s:.0f} s; log {self.log_path}:\n"
                    + log_tail(self.log_path)
                )
            time.sleep(1.0)

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=5) as resp:
                return int(resp.status) == 200
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=STOP_TIMEOUT_S)

    def __enter__(self) -> VLLMServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def vllm_fixture(
    model_dir: Path,
    served_model_name: str,
    *,
    extra_args: Sequence[str] = DEFAULT_ARGS,
    scope: Any = "module",
) -> Any:
    """A pytest fixture that yields a running VLLMServer for `model_dir`, shared within `scope`."""

    @pytest.fixture(scope=scope)
    def _server() -> Iterator[VLLMServer]:
        with VLLMServer(model_dir, served_model_name, extra_args=extra_args) as server:
            yield server

    return _server
