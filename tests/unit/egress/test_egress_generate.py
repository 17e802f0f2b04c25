"""`polar generate`'s stages with an allowlist, on a fake runtime: INIT wires the session to a proxy socket of its
own (a task's hosts join the recipe's), POSTRUN closes it after collecting and puts its log on the row and into the
session's artifacts, a discarded session's proxy is closed too; without an allowlist no proxy is opened."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from polar_cli.config import parse_recipe
from polar_cli.egress.policy import allowlist
from polar_cli.egress.sessions import LOG_FILE
from polar_cli.generate.rows import build_row
from polar_cli.generate.stages import GenerateStages, PooledSession, SessionPlan
from polar_cli.harness import ADAPTERS, Wiring
from polar_cli.harness.session import prepare
from polar_cli.node.pools import Job, RunEnd, Timings
from polar_cli.node.session_steps import SessionSteps
from polar_cli.runtime.base import GATEWAY_ONLY
from polar_cli.runtime.egress import EGRESS_SOCKET_DIR
from tests.support.fake_runtime import FakeRuntime, result, session_responder
from tests.unit.generate.test_generate_rows import INSTANCE, OK_RUN, RECIPE
from tests.unit.generate.test_generate_session_logs import Gateway, failing_evaluation

ALLOW = {"runtime": {"egress": {"allow": ["pypi.org", "*.pythonhosted.org"]}}}


def stages_for(recipe_data: dict[str, Any], tmp_path: Path, pool: ThreadPoolExecutor) -> GenerateStages:
    runtime = FakeRuntime(session_responder(result("done")))
    gateway = Gateway(tmp_path / "capture")
    stages = GenerateStages(parse_recipe(recipe_data, []), SessionSteps(runtime, pool), gateway, tmp_path, None)  # type: ignore[arg-type]
    stages._evaluate = lambda plan, patch, ready: failing_evaluation("org/model")  # type: ignore[method-assign]
    return stages


def test_a_session_gets_its_proxy_at_init_and_its_log_on_the_row(tmp_path: Path) -> None:
    plan = SessionPlan("org__repo-1::pi::1", INSTANCE, ADAPTERS["pi"], 1, "img", "bundle-pi")
    with ThreadPoolExecutor(2) as pool:
        stages = stages_for(RECIPE | ALLOW, tmp_path, pool)
        assert stages.egress.rules == allowlist(["pypi.org", "*.pythonhosted.org"])
        runtime = stages.runtime

        async def scenario() -> tuple[Any, ...]:
            base = stages._spec(plan, "sid.pi.1.abc", (str(tmp_path / "gw"), "bundle-relay"))
            spec = await stages.egress.open(base, ["deb.debian.org"])
            socket_dir = Path(spec.egress_socket or "")
            patterns = stages.egress.proxy._sessions["sid.pi.1.abc"].rules.patterns
            reader, writer = await asyncio.open_unix_connection(str(socket_dir / "egress.sock"))
            writer.write(b"CONNECT evil.example:443 HTTP/1.1\r\n\r\n")
            answer = await reader.read()
            writer.close()
            # the fake runtime answers the relay probes and git; the container spec is what Docker would get
            session = PooledSession("sid.pi.1.abc", "sk", prepare(runtime, spec, Wiring("http://gw", "sk")))
            facts = await stages.postrun(Job(plan.key, plan, 100.0), session, RunEnd("ok", OK_RUN), Timings())
            return spec, patterns, answer, socket_dir.exists(), facts

        spec, patterns, answer, still_there, facts = asyncio.run(scenario())
    assert spec.network == GATEWAY_ONLY and spec.container_spec().binds[spec.egress_socket or ""] == EGRESS_SOCKET_DIR
    assert patterns == ("pypi.org", "*.pythonhosted.org", "deb.debian.org")
    assert answer.startswith(b"HTTP/1.1 403 ") and not still_there
    _, row = build_row(facts, {})
    ((entry,),) = [row["egress"]]
    assert (entry["host"], entry["port"], entry["decision"], entry["status"]) == ("evil.example", 443, "refused", 403)
    assert (tmp_path / "artifacts" / "sid.pi.1.abc" / LOG_FILE).is_file()
    assert stages.egress.proxy.sessions() == []


def test_a_discarded_session_closes_its_proxy_and_no_allowlist_opens_none(tmp_path: Path) -> None:
    plan = SessionPlan("org__repo-1::pi::1", INSTANCE, ADAPTERS["pi"], 1, "img", "bundle-pi")
    with ThreadPoolExecutor(2) as pool:
        stages = stages_for(RECIPE | ALLOW, tmp_path, pool)
        plain = stages_for(RECIPE, tmp_path / "plain", pool)

        async def scenario() -> tuple[Any, ...]:
            spec = await stages.egress.open(stages._spec(plan, "sid", (str(tmp_path / "gw"), "relay")))
            session = PooledSession("sid", "sk", prepare(stages.runtime, spec, Wiring("http://gw", "sk")))
            await stages.discard(Job(plan.key, plan, 100.0), session)
            unwired = await plain.egress.open(plain._spec(plan, "sid2", (str(tmp_path / "gw"), "relay")))
            return stages.egress.proxy.sessions(), Path(spec.egress_socket or "").exists(), unwired

        open_after, still_there, unwired = asyncio.run(scenario())
    assert open_after == [] and not still_there
    assert unwired.egress_socket is None and plain.egress.rules is None
    assert unwired.container_spec().env == {}


@pytest.mark.parametrize("network", ["host", "bridge"])
def test_an_allowlist_outside_a_gateway_only_sandbox_is_a_config_error(network: str) -> None:
    from polar_cli.errors import ConfigError

    with pytest.raises(ConfigError, match="gateway-only"):
        parse_recipe(RECIPE | {"runtime": {"network": network, "egress": {"allow": ["pypi.org"]}}}, [])
