"""The allowlist from the recipe to the container and the row, without an engine: the runtime section, the session's
container spec (second relay, socket mount, proxy variables), a session's proxy opened and closed, its log on the
row and in its artifacts."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from polar_cli.config import parse_recipe
from polar_cli.egress.policy import allowlist
from polar_cli.egress.sessions import LOG_FILE, SessionEgress
from polar_cli.errors import ConfigError, RuntimeFailure
from polar_cli.generate.rows import build_row
from polar_cli.harness import ADAPTERS
from polar_cli.harness.session import SessionSpec
from polar_cli.runtime.base import GATEWAY_ONLY, GATEWAY_SOCKET_DIR, RELAY_BIN
from polar_cli.runtime.egress import EGRESS_SOCKET_DIR, EGRESS_URL
from tests.unit.generate.test_generate_rows import RECIPE, facts


def spec(**fields: Any) -> SessionSpec:
    base: dict[str, Any] = {"session_id": "s1", "network": GATEWAY_ONLY, "gateway_socket": "/tmp/gw", "relay": "r"}
    return SessionSpec(harness=ADAPTERS["pi"], image="img", instruction="fix it", bundle="b", **(base | fields))


def test_the_runtime_section_takes_an_allowlist_for_gateway_only_sandboxes() -> None:
    recipe = parse_recipe(RECIPE | {"runtime": {"egress": {"allow": ["pypi.org", "*.pythonhosted.org"]}}})
    assert recipe.runtime.egress.allowlist() == allowlist(["pypi.org", "*.pythonhosted.org"], [80, 443])
    assert parse_recipe(RECIPE).runtime.egress.allowlist() is None, "none by default: gateway-only, no proxy"
    with pytest.raises(ConfigError, match=r"egress\.allow needs network: gateway-only"):
        parse_recipe(RECIPE | {"runtime": {"network": "host", "egress": {"allow": ["pypi.org"]}}})
    with pytest.raises(ConfigError, match="egress pattern"):
        parse_recipe(RECIPE | {"runtime": {"egress": {"allow": ["pypi org"]}}})
    with pytest.raises(ConfigError, match="egress port"):
        parse_recipe(RECIPE | {"runtime": {"egress": {"allow": ["pypi.org"], "ports": [0]}}})


def test_a_session_with_egress_gets_a_second_relay_the_socket_and_the_proxy_variables() -> None:
    plain = spec().container_spec()
    assert plain.env == {} and list(plain.command) == [
        RELAY_BIN,
        "serve",
        "47011",
        f"{GATEWAY_SOCKET_DIR}/gateway.sock",
    ]
    wired = spec(egress_socket="/tmp/eg").container_spec()
    assert wired.network == GATEWAY_ONLY and wired.binds == {
        "/tmp/gw": GATEWAY_SOCKET_DIR,
        "/tmp/eg": EGRESS_SOCKET_DIR,
    }
    assert wired.command[:2] == ("/bin/sh", "-c")
    script = wired.command[2]
    assert f"{RELAY_BIN} serve 47012 {EGRESS_SOCKET_DIR}/egress.sock &" in script
    assert f"exec {RELAY_BIN} serve 47011 {GATEWAY_SOCKET_DIR}/gateway.sock" in script
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        assert wired.env[name] == EGRESS_URL == "http://127.0.0.1:47012"
    assert wired.env["NO_PROXY"] == wired.env["no_proxy"] == "127.0.0.1,localhost"
    with pytest.raises(RuntimeFailure, match="gateway-only"):
        spec(network="host", egress_socket="/tmp/eg").container_spec()


def test_a_session_opens_its_proxy_only_when_something_is_allowed(tmp_path: Path) -> None:
    async def scenario() -> tuple[Any, ...]:
        none = SessionEgress(None)
        untouched = await none.open(spec())
        recipe = SessionEgress(allowlist(["pypi.org"]))
        wired = await recipe.open(spec(session_id="s2"), ["deb.debian.org"])
        rules = recipe.proxy._sessions["s2"].rules.patterns
        socket_dir = Path(wired.egress_socket or "")
        listening = (socket_dir / "egress.sock").is_socket()
        with pytest.raises(RuntimeFailure, match="gateway-only"):
            await recipe.open(spec(network="host", session_id="s3"))
        rows = await recipe.close("s2", tmp_path / "artifacts")
        return untouched, none.proxy.sessions(), rules, listening, socket_dir.exists(), rows, await none.close("s1")

    untouched, opened, rules, listening, still_there, rows, unopened = asyncio.run(scenario())
    assert untouched.egress_socket is None and opened == []
    assert rules == ("pypi.org", "deb.debian.org"), "a task's hosts join the recipe's"
    assert listening and not still_there
    assert rows == [] and unopened is None
    assert (tmp_path / "artifacts" / LOG_FILE).read_text() == ""


def test_the_log_lands_on_the_row_and_in_the_artifacts(tmp_path: Path) -> None:
    async def scenario() -> list[dict[str, Any]] | None:
        egress = SessionEgress(allowlist(["pypi.org"]))
        wired = await egress.open(spec())
        reader, writer = await asyncio.open_unix_connection(f"{wired.egress_socket}/egress.sock")
        writer.write(b"CONNECT evil.example:443 HTTP/1.1\r\n\r\n")
        await reader.read()
        writer.close()
        return await egress.close("s1", tmp_path)

    rows = asyncio.run(scenario())
    assert rows is not None and len(rows) == 1
    assert {k: rows[0][k] for k in ("host", "port", "decision", "status")} == {
        "host": "evil.example",
        "port": 443,
        "decision": "refused",
        "status": 403,
    }
    assert [json.loads(line) for line in (tmp_path / LOG_FILE).read_text().splitlines()] == rows
    _kind, row = build_row(facts(egress=rows), {})
    assert row["egress"] == rows
    assert build_row(facts(), {})[1]["egress"] is None
