"""A session's own sampling parameters (an RL trainer's rollout temperature and per-sample seed) replace the
harness's in the upstream body, never the fields the capture rests on, and stay within the engine's max-tokens cap."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from polar_cli.errors import AuthError
from polar_cli.gateway.handler import Gateway
from polar_cli.gateway.sessions import PROTECTED_FIELDS, SessionRegistry
from polar_cli.translate.dialects import DIALECTS
from polar_cli.translate.upstream import UpstreamOptions
from tests.unit.gateway.test_handler import FakeUpstream, request

# the harness asks for its own sampling (Claude Code: temperature 1, a 32k max tokens)
HARNESS = {
    "model": "claude",
    "max_tokens": 32000,
    "temperature": 1.0,
    "top_p": 0.95,
    "messages": [{"role": "user", "content": "go"}],
}


def _upstream_bodies(
    sampling: dict[str, Any] | None, *, cap: int | None = None, extra_body: dict[str, Any] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """What went upstream for the harness's call in a session with ``sampling``, and in one without."""
    sessions = SessionRegistry()
    sessions.open("rl", "sk-rl", sampling=sampling)
    sessions.open("plain", "sk-plain")
    upstream = FakeUpstream()
    options = UpstreamOptions(model="m", max_tokens_cap=cap, extra_body=extra_body)
    gateway = Gateway(upstream=upstream, options=options, sessions=sessions, capture=None)  # type: ignore[arg-type]

    async def calls() -> None:
        for key in ("sk-rl", "sk-plain"):
            assert (await gateway.handle(request("/v1/messages", HARNESS, key=key))).status == 200

    asyncio.run(calls())
    rl, plain = upstream.bodies
    return rl, plain


def test_session_sampling_replaces_the_harnesss_values_and_adds_its_own() -> None:
    rl, plain = _upstream_bodies({"temperature": 0.6, "seed": 1234, "top_k": 20, "repetition_penalty": 1.05})
    assert (rl["temperature"], rl["seed"], rl["top_k"], rl["repetition_penalty"]) == (0.6, 1234, 20, 1.05)
    assert rl["top_p"] == 0.95 and rl["max_tokens"] == 32000  # what the session does not set stays the harness's
    # the capture fields and the conversation are untouched
    assert rl["logprobs"] is True and rl["return_token_ids"] is True and rl["messages"] == plain["messages"]
    assert (plain["temperature"], "seed" in plain, "top_k" in plain) == (1.0, False, False)


def test_session_sampling_wins_over_extra_body_and_none_drops_the_harnesss_value() -> None:
    rl, plain = _upstream_bodies({"repetition_penalty": 1.1, "top_p": None}, extra_body={"repetition_penalty": 1.0})
    assert rl["repetition_penalty"] == 1.1 and "top_p" not in rl
    assert plain["repetition_penalty"] == 1.0 and plain["top_p"] == 0.95


@pytest.mark.parametrize(("asked", "cap", "sent"), [(50000, 8192, 8192), (4096, 8192, 4096), (None, 8192, 8192)])
def test_session_max_tokens_stays_within_the_engine_cap(asked: int | None, cap: int, sent: int) -> None:
    rl, plain = _upstream_bodies({"max_tokens": asked}, cap=cap)
    assert rl["max_tokens"] == sent and plain["max_tokens"] == cap  # the harness asked 32000


def test_session_max_tokens_without_a_cap_replaces_the_harnesss() -> None:
    rl, _ = _upstream_bodies({"max_tokens": 100000})
    assert rl["max_tokens"] == 100000


@pytest.mark.parametrize(
    "key", ["messages", "tools", "model", "stream", "rid", "input_ids", "logprobs", "return_token_ids", "n"]
)
def test_sampling_may_not_set_what_the_gateway_owns(key: str) -> None:
    sessions = SessionRegistry()
    with pytest.raises(ValueError, match=key):
        sessions.open("s", "sk-1", sampling={"temperature": 0.5, key: 1})
    with pytest.raises(AuthError):  # the session was not opened
        sessions.lookup("sk-1")


def test_every_dialects_token_fields_are_protected() -> None:
    assert {k for d in DIALECTS.values() for k in d.token_fields} <= PROTECTED_FIELDS
    assert {"kv_transfer_params", "input_ids"} <= PROTECTED_FIELDS  # both token-in routes


def test_the_stored_sampling_is_a_copy() -> None:
    sampling = {"seed": 1}
    sessions = SessionRegistry()
    sessions.open("s", "sk-1", sampling=sampling)
    sampling["seed"] = 2
    assert sessions.lookup("sk-1").sampling == {"seed": 1}
    sessions.open("t", "sk-2", sampling={})
    assert sessions.lookup("sk-2").sampling is None
