"""OpenClaw (npm `openclaw` 2026.9.6): OpenAI Chat Completions through a custom `openai-completions` provider.

Run as `openclaw agent exec`, its documented headless entry point for CI and coding automation: one embedded agent
turn, no OpenClaw Gateway (its own daemon) and no channels, the `coding` tool profile, the full execution policy a
headless turn needs (no approval prompts), filesystem tools scoped to `--cwd`. `--config` pins the config file (no
ambient config is read); `--state-dir` keeps the run's state (sessions, logs) where Polar copies it out. The provider
`polar` is declared in that config with the model Polar names, so nothing is discovered (`/v1/models`) or priced.
"""

from __future__ import annotations

from polar_cli.harness.base import HOME, HarnessAdapter, Launch, Wiring, base_env, json_file, node_argv

NAME = "openclaw"
BUNDLE = f"/opt/polar/harness/{NAME}"
DEFAULT_MODEL = "polar-model"
PROVIDER = "polar"
STATE = f"{HOME}/.openclaw"
CONFIG = f"{STATE}/openclaw.json"
KEY_ENV = "POLAR_SESSION_KEY"


def config(wiring: Wiring) -> dict[str, object]:
    model = wiring.model or DEFAULT_MODEL
    entry = {
        "id": model,
        "name": model,
        "reasoning": False,
        "input": ["text"],
        # declared free and sized, so it looks nothing up (price lists, context windows) on the internet
        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
        "contextWindow": 131072,
        "maxTokens": 32768,
    }
    provider = {
        "baseUrl": wiring.gateway_url.rstrip("/") + "/v1",
        # OpenClaw's own `${VAR}` substitution: the key stays in the environment, never in the file
        "apiKey": "${" + KEY_ENV + "}",
        "api": "openai-completions",
        "models": [entry],
    }
    return {
        "models": {"providers": {PROVIDER: provider}},
        "agents": {"defaults": {"model": {"primary": f"{PROVIDER}/{model}"}}},
        # no update check against the npm registry at start-up
        "update": {"checkOnStart": False},
    }


def build(instruction: str, wiring: Wiring, workdir: str) -> Launch:
    env = {**base_env(wiring), KEY_ENV: wiring.session_key}
    model = f"{PROVIDER}/{wiring.model or DEFAULT_MODEL}"
    # the instruction on stdin (`--message-file -`, read byte for byte but a BOM): never an option, never re-quoted
    argv = (
        *node_argv(BUNDLE, NAME),
        "agent",
        "exec",
        "--config",
        CONFIG,
        "--state-dir",
        STATE,
        "--model",
        model,
        "--cwd",
        workdir,
        "--json",
        "--message-file",
        "-",
    )
    return Launch(
        argv=argv,
        env=env,
        files={CONFIG: json_file(config(wiring))},
        workdir=workdir,
        artifacts=(f"{STATE}/agents", f"{STATE}/logs"),
        stdin=instruction.encode(),
    )


ADAPTER = HarnessAdapter(name=NAME, package="openclaw", shell_tool="exec", build=build, api="openai_chat")
