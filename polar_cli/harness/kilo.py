"""Kilo Code CLI (npm `@kilocode/cli` 7.7.7, an opencode fork): OpenAI Chat Completions through its
`@ai-sdk/openai-compatible` provider.

Configured like opencode, under Kilo's own names: the provider `polar` in ~/.config/kilo/kilo.json (the AI-SDK package
ships inside the binary), `kilo run --auto` is the headless mode with every permission approved, `KILO_DISABLE_*`
keep it off the internet. The binary is Bun-compiled and runs by itself (bin/kilo-native; bin/kilo is the package's
Node wrapper that spawns it).
"""

from __future__ import annotations

from polar_cli.harness import quirks
from polar_cli.harness.base import HOME, HarnessAdapter, Launch, Wiring, base_env, json_file
from polar_cli.harness.recovery import Recovery, json_error_events

NAME = "kilo"
BUNDLE = f"/opt/polar/harness/{NAME}"
KEY_ENV = "POLAR_SESSION_KEY"
DEFAULT_MODEL = "polar-model"
PROVIDER = "polar"
DATA = f"{HOME}/.local/share/kilo"
# the tree-sitter grammars beside the binary (the Node wrapper points the binary at them the same way)
TREE_SITTER = f"{BUNDLE}/node_modules/@kilocode/cli/bin/tree-sitter"


def config(wiring: Wiring) -> dict[str, object]:
    """The gateway as an OpenAI-compatible provider; every tool allowed; no autoupdate, no sharing."""
    model = wiring.model or DEFAULT_MODEL
    provider = {
        "npm": "@ai-sdk/openai-compatible",
        "name": "Polar gateway",
        # `{env:NAME}` is Kilo's (opencode's) own substitution, so the key never sits in a file
        "options": {"baseURL": wiring.gateway_url.rstrip("/") + "/v1", "apiKey": f"{{env:{KEY_ENV}}}"},
        "models": {model: {"name": model, "tool_call": True}},
    }
    return {
        "$schema": "https://app.kilo.ai/config.json",
        "provider": {PROVIDER: provider},
        "model": f"{PROVIDER}/{model}",
        # only the gateway: Kilo's own `kilo` provider fetches its model list from api.kilo.ai on every turn otherwise
        # (KILO_DISABLE_MODELS_FETCH does not stop it), and a 403 or a refused connection costs seconds
        "enabled_providers": [PROVIDER],
        "permission": {"edit": "allow", "bash": "allow", "webfetch": "allow", "external_directory": "allow"},
        "autoupdate": False,
        "share": "disabled",
    }


def offline_env() -> dict[str, str]:
    # each would reach the internet at start-up or after the run (model catalogue, update check, LSP and plugin
    # downloads, session upload to Kilo's cloud, telemetry); the attempts fail offline, but cost time
    return {
        "KILO_DISABLE_MODELS_FETCH": "1",
        "KILO_DISABLE_AUTOUPDATE": "1",
        "KILO_DISABLE_LSP_DOWNLOAD": "1",
        "KILO_DISABLE_DEFAULT_PLUGINS": "1",
        "KILO_DISABLE_SHARE": "1",
        "KILO_DISABLE_SESSION_INGEST": "1",
        "KILO_TELEMETRY_LEVEL": "off",
        "KILO_TREE_SITTER_WASM_DIR": TREE_SITTER,
    }


def build(instruction: str, wiring: Wiring, workdir: str) -> Launch:
    env = {**base_env(wiring), **offline_env(), KEY_ENV: wiring.session_key}
    # the instruction goes through stdin, read as-is: `run` re-quotes message arguments that hold a space, as
    # opencode's does. `--title` skips the extra title-generation call to the model; `--auto` approves every tool.
    argv = (
        f"{BUNDLE}/bin/kilo-native",
        "run",
        "--auto",
        "--format",
        "json",
        "--title",
        "polar",
        "-m",
        f"{PROVIDER}/{wiring.model or DEFAULT_MODEL}",
    )
    return Launch(
        argv=argv,
        env=env,
        files={f"{HOME}/.config/kilo/kilo.json": json_file(config(wiring))},
        workdir=workdir,
        artifacts=tuple(f"{DATA}/{name}" for name in ("log", "kilo.db", "kilo.db-wal", "kilo.db-shm")),
        droppings=(".kilo", ".kilocode"),
        stdin=instruction.encode(),
    )


# as opencode: exit 1 when a call of its session failed, also one it compacted past and finished after
RECOVERY = Recovery(exit_codes=frozenset({1}), other_errors=json_error_events)

ADAPTER = HarnessAdapter(
    name=NAME,
    package="@kilocode/cli",
    shell_tool="bash",
    build=build,
    api="openai_chat",
    quirks=quirks.OPENCODE,
    recovery=RECOVERY,
)
