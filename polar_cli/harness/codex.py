"""Codex CLI 0.171.0: OpenAI Responses (the only wire API it accepts) from a provider in $CODEX_HOME/config.toml."""

from __future__ import annotations

from polar_cli.harness.base import HOME, HarnessAdapter, Launch, Wiring, base_env, node_argv, toml_string

NAME = "codex"
BUNDLE = f"/opt/polar/harness/{NAME}"
CODEX_HOME = f"{HOME}/.codex"
KEY_ENV = "POLAR_SESSION_KEY"
DEFAULT_MODEL = "gpt-5.5"


def config_toml(wiring: Wiring) -> str:
    """A provider pointing at the gateway; websockets and analytics off (the gateway serves HTTP + SSE only)."""
    return "\n".join(
        [
            f"model = {toml_string(wiring.model or DEFAULT_MODEL)}",
            'model_provider = "polar"',
            "",
            "[model_providers.polar]",
            'name = "Polar gateway"',
            f"base_url = {toml_string(wiring.gateway_url.rstrip('/') + '/v1')}",
            f"env_key = {toml_string(KEY_ENV)}",
            'wire_api = "responses"',
            "supports_websockets = false",
            "",
            "[analytics]",
            "enabled = false",
            "",
        ]
    )


def build(instruction: str, wiring: Wiring, workdir: str) -> Launch:
    env = {**base_env(wiring), "CODEX_HOME": CODEX_HOME, KEY_ENV: wiring.session_key}
    argv = [
        *node_argv(BUNDLE, "codex"),
        "exec",
        "--skip-git-repo-check",
        "--dangerously-bypass-approvals-and-sandbox",
        "--json",
        "--cd",
        workdir,
        "--",
        instruction,
    ]
    return Launch(
        argv=tuple(argv),
        env=env,
        files={f"{CODEX_HOME}/config.toml": config_toml(wiring).encode()},
        workdir=workdir,
        artifacts=(f"{CODEX_HOME}/sessions", f"{CODEX_HOME}/log"),
        droppings=(".codex",),
    )


ADAPTER = HarnessAdapter(
    name=NAME, package="@openai/codex", shell_tool="exec_command", build=build, api="openai_responses"
)
