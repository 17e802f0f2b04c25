"""The SGLang launcher against a stand-in server process: /health 503 then 200, /model_info, the token probe, the log
in the run directory, and the whole process group stopped; a server that dies or never warms up fails loudly."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from polar_cli.config import EngineConfig, SGLangConfig
from polar_cli.errors import UpstreamError
from polar_cli.inference.engines import open_engine
from polar_cli.inference.launcher import launch_sglang, sglang_argv

STANDIN = Path(__file__).with_name("sglang_standin.py")


def settings(**kw: object) -> SGLangConfig:
    base: dict[str, object] = {"model_path": "/models/qwen", "launcher": [sys.executable, str(STANDIN)]}
    return SGLangConfig.model_validate(base | kw)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0): read its state
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] != "Z"
    except OSError:
        return False


def test_argv_carries_the_recipe_flags() -> None:
    s = SGLangConfig(
        model_path="Qwen/Qwen3.5-122B-A10B",
        served_model_name="q",
        tp_size=8,
        dp_size=2,
        mem_fraction_static=0.85,
        context_length=131072,
        extra_args=["--enable-metrics"],
        python="/opt/sglang/bin/python",
    )
    argv = sglang_argv(s, 30000)
    assert argv[:3] == ["/opt/sglang/bin/python", "-m", "sglang.launch_server"]
    text = " ".join(argv)
    for part in (
        "--model-path Qwen/Qwen3.5-122B-A10B",
        "--host 127.0.0.1",
        "--port 30000",
        "--tp-size 8",
        "--dp-size 2",
        "--mem-fraction-static 0.85",
        "--context-length 131072",
        "--served-model-name q",
        "--reasoning-parser qwen3",
        "--tool-call-parser qwen3_coder",
    ):
        assert part in text
    assert argv[-1] == "--enable-metrics"
    assert "--dp-size" not in sglang_argv(SGLangConfig(model_path="m"), 1)


def test_launch_waits_for_health_probes_tokens_and_stops(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STANDIN_WARMUP_503", "3")
    config = EngineConfig(kind="sglang", sglang=settings(served_model_name="served-q", extra_args=["--x", "1"]))

    async def go() -> tuple[str, str, dict[str, object], int]:
        handle = await open_engine(config, tmp_path)
        assert handle.server is not None
        pid = handle.server.process.pid
        assert alive(pid)
        info = dict(handle.server.model_info)
        await handle.close()
        return handle.model, handle.options.dialect.name, info, pid

    model, engine, info, pid = asyncio.run(go())
    assert model == "served-q" and engine == "sglang"
    assert info["tool_call_parser"] == "qwen3_coder"
    assert not alive(pid)
    log = (tmp_path / "logs" / "sglang.log").read_text()
    assert "'--tool-call-parser', 'qwen3_coder', '--x', '1']" in log
    # three 503s before the 200 (the launcher waited through warm-up), and the probe's chat call
    assert log.count('"GET /health HTTP/1.1" 503') == 3 and '"GET /health HTTP/1.1" 200' in log
    assert '"POST /v1/chat/completions HTTP/1.1" 200' in log


def test_a_server_that_exits_fails_with_its_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STANDIN_EXIT", "3")
    with pytest.raises(UpstreamError, match=r"exited with 3 before it was ready(.|\n)*no GPU found"):
        asyncio.run(launch_sglang(settings(), tmp_path / "sglang.log", poll=0.1))


def test_a_server_that_never_warms_up_times_out_and_is_killed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STANDIN_WARMUP_503", "100000")
    pids: list[int] = []

    async def go() -> None:
        import polar_cli.inference.launcher as launcher

        real = launcher.start_process

        def spy(*a: object, **kw: object) -> launcher.SGLangServer:
            server = real(*a, **kw)  # type: ignore[arg-type]
            pids.append(server.process.pid)
            return server

        monkeypatch.setattr(launcher, "start_process", spy)
        await launch_sglang(settings(startup_timeout=1.5), tmp_path / "sglang.log", poll=0.1)

    with pytest.raises(UpstreamError, match=r"not ready within 1.5 s \(/health answered 503\)"):
        asyncio.run(go())
    assert pids and not alive(pids[0])
