"""Hermes Agent 0.19.0 (PyPI `hermes-agent`, Nous Research): OpenAI Chat Completions through the OpenAI SDK, streaming;
`hermes -z PROMPT` (one-shot) runs one instruction headless, auto-approves every command and prints only the final
answer; its shell tool is `terminal` (argument `command`), files go through `write_file`, `patch` and `read_file`.

The endpoint is `~/.hermes/config.yaml`'s `model` (provider `custom`, `base_url`): 0.19 no longer reads
`OPENAI_BASE_URL`, and sends `OPENAI_API_KEY` only to openai.com, so the key is `${POLAR_SESSION_KEY}`, which hermes
expands from the environment when it loads the config. The rest of the config keeps it off the internet.
"""

from __future__ import annotations

from polar_cli.harness.base import HOME, HarnessAdapter, Launch, Wiring, base_env, json_file, python_argv

NAME = "hermes"
BUNDLE = f"/opt/polar/harness/{NAME}"
STATE = f"{HOME}/.hermes"
CONFIG = f"{STATE}/config.yaml"
DEFAULT_MODEL = "polar-model"
# what hermes is told of the gateway's model; without it hermes looks the context length up on OpenRouter
CONTEXT_TOKENS = 131072
KEY_ENV = "POLAR_SESSION_KEY"
# hermes's default CLI tools less those that reach the internet whatever the endpoint (text_to_speech: Edge TTS;
# vision_analyze: fetches image URLs), and those it leaves out itself without keys or binaries (web, browser)
TOOLSETS = ("terminal", "file", "code_execution", "todo", "memory", "skills", "session_search", "clarify", "delegation")


def model_name(wiring: Wiring) -> str:
    return wiring.model or DEFAULT_MODEL


def offline_config() -> dict[str, object]:
    return {
        # the environment probe runs `python3 -m pip --version`, whose self-check asks PyPI for pip's latest version
        "agent": {"environment_probe": False},
        # tirith (its command scanner) is downloaded from GitHub releases on the first command when not on PATH
        "security": {"tirith_enabled": False},
        # after a turn of 10 or more tool calls hermes forks a background agent to review its memory and skills: more
        # calls to the gateway after the final answer, cut off when the one-shot process exits
        "memory": {"nudge_interval": 0},
        "skills": {"creation_nudge_interval": 0},
    }


def config(wiring: Wiring) -> dict[str, object]:
    """~/.hermes/config.yaml (JSON is YAML): the gateway as a custom OpenAI-compatible provider, the key by name."""
    return {
        "model": {
            "provider": "custom",
            "base_url": wiring.gateway_url.rstrip("/") + "/v1",
            # expanded by hermes from the environment when it loads the file: the key never sits in a file
            "api_key": f"${{{KEY_ENV}}}",
            "default": model_name(wiring),
            "context_length": CONTEXT_TOKENS,
        },
        **offline_config(),
    }


def build(instruction: str, wiring: Wiring, workdir: str) -> Launch:
    # `-z` turns approvals off by itself; --yolo also covers what is imported before it does
    options = ["--yolo", "--provider", "custom", "--model", model_name(wiring), "--toolsets", ",".join(TOOLSETS)]
    return Launch(
        argv=python_argv(BUNDLE, "hermes", options, "--oneshot", instruction),
        env={**base_env(wiring), KEY_ENV: wiring.session_key},
        files={CONFIG: json_file(config(wiring))},
        workdir=workdir,
        # the conversation (messages, tool calls, results) is in its SQLite session store; logs beside it
        artifacts=(f"{STATE}/state.db", f"{STATE}/logs"),
    )


ADAPTER = HarnessAdapter(name=NAME, package="hermes-agent", shell_tool="terminal", build=build, api="openai_chat")
