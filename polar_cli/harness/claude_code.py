"""Claude Code 2.1.332: Anthropic Messages to ANTHROPIC_BASE_URL, headless with `-p`."""

from __future__ import annotations

from polar_cli.harness.base import HOME, HarnessAdapter, Launch, Wiring, base_env

NAME = "claude-code"
BUNDLE = f"/opt/polar/harness/{NAME}"


def sandbox_env() -> dict[str, str]:
    # as root, --dangerously-skip-permissions is refused unless Claude Code is told it runs in a sandbox
    return {"IS_SANDBOX": "1"}


def quiet_env() -> dict[str, str]:
    # without these Claude Code calls api.anthropic.com directly (telemetry, flags, updates) besides the base URL
    return {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1"}


def build(instruction: str, wiring: Wiring, workdir: str) -> Launch:
    env = {
        **base_env(wiring),
        **sandbox_env(),
        **quiet_env(),
        "ANTHROPIC_BASE_URL": wiring.gateway_url,
        "ANTHROPIC_API_KEY": wiring.session_key,
    }
    argv = [f"{BUNDLE}/bin/claude", "-p", "--dangerously-skip-permissions", "--output-format", "json"]
    if wiring.model:
        argv += ["--model", wiring.model]
    # after "--" the instruction is positional even when it starts with a dash
    argv += ["--", instruction]
    return Launch(
        argv=tuple(argv),
        env=env,
        files={},
        workdir=workdir,
        artifacts=(f"{HOME}/.claude/projects",),
        droppings=(".claude",),
    )


ADAPTER = HarnessAdapter(
    name=NAME, package="@anthropic-ai/claude-code", shell_tool="Bash", build=build, api="anthropic_messages"
)
