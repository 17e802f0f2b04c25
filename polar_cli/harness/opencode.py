"""opencode (opencode-ai 1.18.33): OpenAI Chat Completions through its `@ai-sdk/openai-compatible` provider.

The provider is a `polar` entry in ~/.config/opencode/opencode.json (the AI-SDK package ships inside the binary, so
nothing is installed at run time); `opencode run` is the headless mode. The binary is Bun-compiled and runs by itself.
Kilo (`kilo.py`), an opencode fork, is configured and run the same way under its own names: it builds on the
functions here.
"""

from __future__ import annotations

from polar_cli.harness.base import HOME, HarnessAdapter, Launch, Wiring, base_env, json_file
from polar_cli.harness.recovery import Recovery, json_error_events

NAME = "opencode"
BUNDLE = f"/opt/polar/harness/{NAME}"
KEY_ENV = "POLAR_SESSION_KEY"
DEFAULT_MODEL = "polar-model"
PROVIDER = "polar"
DATA = f"{HOME}/.local/share/opencode"


def provider_config(wiring: Wiring) -> dict[str, object]:
    """The gateway as the OpenAI-compatible provider `polar`, and its model as the one every call uses."""
    model = wiring.model or DEFAULT_MODEL
    provider = {
        "npm": "@ai-sdk/openai-compatible",
        "name": "Polar gateway",
        # `{env:NAME}` is opencode's (and Kilo's) own substitution, so the key never sits in a file
        "options": {"baseURL": wiring.gateway_url.rstrip("/") + "/v1", "apiKey": f"{{env:{KEY_ENV}}}"},
        "models": {model: {"name": model, "tool_call": True}},
    }
    return {"provider": {PROVIDER: provider}, "model": f"{PROVIDER}/{model}"}


def unattended_config() -> dict[str, object]:
    """Every tool allowed without asking; no autoupdate, no sharing."""
    return {
        "permission": {"edit": "allow", "bash": "allow", "webfetch": "allow", "external_directory": "allow"},
        "autoupdate": False,
        "share": "disabled",
    }


def config(wiring: Wiring) -> dict[str, object]:
    """The gateway as an OpenAI-compatible provider; every tool allowed; no autoupdate, no sharing."""
    return {"$schema": "https://opencode.ai/config.json", **provider_config(wiring), **unattended_config()}


def offline_env(prefix: str = "OPENCODE") -> dict[str, str]:
    # each would reach the internet at start-up (models.dev catalogue, update check, LSP and plugin downloads); the
    # attempts fail without breaking the run, but cost time. Kilo has the same switches under its own prefix.
    switches = ("MODELS_FETCH", "AUTOUPDATE", "LSP_DOWNLOAD", "DEFAULT_PLUGINS", "SHARE")
    return {f"{prefix}_DISABLE_{switch}": "1" for switch in switches}


def run_argv(binary: str, wiring: Wiring, *options: str) -> tuple[str, ...]:
    """`run` with ``options``, its events as JSON, on the gateway's model. `--title` skips the extra
    title-generation call to the model. No message argument: the instruction goes through stdin, read as-is, as
    `run` re-quotes message arguments that hold a space (`"..."`, inner quotes escaped)."""
    model = f"{PROVIDER}/{wiring.model or DEFAULT_MODEL}"
    return (binary, "run", *options, "--format", "json", "--title", "polar", "-m", model)


def state_artifacts(data: str, database: str) -> tuple[str, ...]:
    """The logs and the SQLite session store (with its WAL and shared-memory files) under the data directory; not
    snapshot/: the harness's own git store of the working tree, as large as the repository."""
    return tuple(f"{data}/{name}" for name in ("log", database, f"{database}-wal", f"{database}-shm"))


def build(instruction: str, wiring: Wiring, workdir: str) -> Launch:
    env = {**base_env(wiring), **offline_env(), KEY_ENV: wiring.session_key}
    return Launch(
        argv=run_argv(f"{BUNDLE}/bin/opencode", wiring),
        env=env,
        files={f"{HOME}/.config/opencode/opencode.json": json_file(config(wiring))},
        workdir=workdir,
        artifacts=state_artifacts(DATA, "opencode.db"),
        droppings=(".opencode",),
        stdin=instruction.encode(),
    )


# opencode exits 1 when a call of its session failed, also one it compacted past and finished after
RECOVERY = Recovery(exit_codes=frozenset({1}), other_errors=json_error_events)

ADAPTER = HarnessAdapter(
    name=NAME, package="opencode-ai", shell_tool="bash", build=build, api="openai_chat", recovery=RECOVERY
)
