"""opencode (opencode-ai 1.18.33): OpenAI Chat Completions through its `@ai-sdk/openai-compatible` provider.

The provider is a `polar` entry in ~/.config/opencode/opencode.json (the AI-SDK package ships inside the binary, so
nothing is installed at run time); `opencode run` is the headless mode. The binary is Bun-compiled and runs by itself.
"""

from __future__ import annotations

from polar_cli.harness import quirks
from polar_cli.harness.base import HOME, HarnessAdapter, Launch, Wiring, base_env, json_file
from polar_cli.harness.recovery import Recovery, json_error_events

NAME = "opencode"
BUNDLE = f"/opt/polar/harness/{NAME}"
KEY_ENV = "POLAR_SESSION_KEY"
DEFAULT_MODEL = "polar-model"
PROVIDER = "polar"
DATA = f"{HOME}/.local/share/opencode"


def config(wiring: Wiring) -> dict[str, object]:
    """The gateway as an OpenAI-compatible provider; every tool allowed; no autoupdate, no sharing."""
    model = wiring.model or DEFAULT_MODEL
    provider = {
        "npm": "@ai-sdk/openai-compatible",
        "name": "Polar gateway",
        # `{env:NAME}` is opencode's own substitution, so the key never sits in a file
        "options": {"baseURL": wiring.gateway_url.rstrip("/") + "/v1", "apiKey": f"{{env:{KEY_ENV}}}"},
        "models": {model: {"name": model, "tool_call": True}},
    }
    return {
        "$schema": "https://opencode.ai/config.json",
        "provider": {PROVIDER: provider},
        "model": f"{PROVIDER}/{model}",
        "permission": {"edit": "allow", "bash": "allow", "webfetch": "allow", "external_directory": "allow"},
        "autoupdate": False,
        "share": "disabled",
    }


def offline_env() -> dict[str, str]:
    # each would reach the internet at start-up (models.dev catalogue, update check, LSP and plugin downloads); the
    # attempts fail without breaking the run, but cost time
    return {
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
        "OPENCODE_DISABLE_SHARE": "1",
    }


def build(instruction: str, wiring: Wiring, workdir: str) -> Launch:
    env = {**base_env(wiring), **offline_env(), KEY_ENV: wiring.session_key}
    # the instruction goes through stdin, read as-is: `run` re-quotes message arguments that hold a space
    # (`"..."`, inner quotes escaped). `--title` skips the extra title-generation call to the model.
    argv = [
        f"{BUNDLE}/bin/opencode",
        "run",
        "--format",
        "json",
        "--title",
        "polar",
        "-m",
        f"{PROVIDER}/{wiring.model or DEFAULT_MODEL}",
    ]
    return Launch(
        argv=tuple(argv),
        env=env,
        files={f"{HOME}/.config/opencode/opencode.json": json_file(config(wiring))},
        workdir=workdir,
        # not snapshot/: opencode's own git store of the working tree, as large as the repository
        artifacts=tuple(f"{DATA}/{name}" for name in ("log", "opencode.db", "opencode.db-wal", "opencode.db-shm")),
        droppings=(".opencode",),
        stdin=instruction.encode(),
    )


# opencode exits 1 when a call of its session failed, also one it compacted past and finished after
RECOVERY = Recovery(exit_codes=frozenset({1}), other_errors=json_error_events)

ADAPTER = HarnessAdapter(
    name=NAME,
    package="opencode-ai",
    shell_tool="bash",
    build=build,
    api="openai_chat",
    quirks=quirks.OPENCODE,
    recovery=RECOVERY,
)
