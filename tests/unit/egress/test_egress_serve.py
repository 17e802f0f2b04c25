"""`polar serve` with the service's allowlist: its stages open a gateway-only session's proxy (none without an
allowlist, none for a session on another network), close it when a session is discarded, and a session result
carries the log as ``egress``."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from polar_cli.config import EvalConfig
from polar_cli.egress.policy import allowlist
from polar_cli.harness import ADAPTERS, Wiring
from polar_cli.harness.session import SessionSpec, prepare
from polar_cli.node.session_steps import SessionSteps
from polar_cli.runtime.base import GATEWAY_ONLY
from polar_cli.serve.results import SessionOutput, session_result
from polar_cli.serve.stages import ServeSession, ServeStages
from tests.support.fake_runtime import FakeRuntime, result, session_responder


def stages(tmp_path: Path, pool: ThreadPoolExecutor, **kw: Any) -> ServeStages:
    runtime = FakeRuntime(session_responder(result("done")))
    gateway = SimpleNamespace(engine=SimpleNamespace(model="m"), close_session=lambda key: None)
    return ServeStages(
        steps=SessionSteps(runtime, pool),
        gateway=gateway,  # type: ignore[arg-type]
        state_dir=tmp_path,
        eval_settings=EvalConfig(),
        eval_timeout=60.0,
        build_images=False,
        name="svc",
        eot_token_id=None,
        cancelled=lambda job: None,
        **kw,
    )


def test_the_service_allowlist_opens_a_proxy_that_a_discard_closes(tmp_path: Path) -> None:
    spec = SessionSpec(
        "s1", ADAPTERS["pi"], "img", "fix it", "b", network=GATEWAY_ONLY, gateway_socket=str(tmp_path), relay="r"
    )
    with ThreadPoolExecutor(2) as pool:
        allowing = stages(tmp_path, pool, egress=allowlist(["pypi.org"]))
        plain = stages(tmp_path, pool)

        async def scenario() -> tuple[Any, ...]:
            wired = await allowing.egress.open(spec)
            session = ServeSession("s1", "k", prepare(allowing.runtime, wired, Wiring("http://gw", "k")))
            await allowing.discard(None, session)  # type: ignore[arg-type]
            return wired, allowing.egress.proxy.sessions(), await plain.egress.open(spec)

        wired, still_open, unwired = asyncio.run(scenario())
    assert wired.egress_socket and not Path(wired.egress_socket).exists() and still_open == []
    assert unwired.egress_socket is None and plain.egress.rules is None


def test_a_session_result_carries_its_egress_log() -> None:
    entry = {"host": "pypi.org", "port": 443, "decision": "allowed", "status": 200}
    common: dict[str, Any] = {"attempts": 1, "node_id": "n", "seed": None, "metadata": {}}
    logged = session_result("t", 0, SessionOutput("s", "completed", egress=[entry]), **common)
    assert logged["egress"] == [entry]
    assert session_result("t", 0, SessionOutput("s", "completed"), **common)["egress"] is None
