"""Kilo Code CLI (npm `@kilocode/cli` 7.7.7, an opencode fork): OpenAI Chat Completions through its
`@ai-sdk/openai-compatible` provider.

Configured like opencode, under Kilo's own names (so through `opencode.py`'s functions): the provider `polar` in
~/.config/kilo/kilo.json (the AI-SDK package ships inside the binary), `kilo run --auto` is the headless mode with
every permission approved, `KILO_DISABLE_*` keep it off the internet. The binary is Bun-compiled and runs by itself
(bin/kilo-native; bin/kilo is the package's Node wrapper that spawns it).
"""

from __future__ import annotations

from polar_cli.harness import opencode
from polar_cli.harness.base import HOME, HarnessAdapter, Launch, Wiring, base_env, json_file
from polar_cli.harness.opencode import KEY_ENV, PROVIDER

NAME = "kilo"
BUNDLE = f"/opt/polar/harness/{NAME}"
DATA = f"{HOME}/.local/share/kilo"
# the tree-sitter grammars beside the binary (the Node wrapper points the binary at them the same way)
TREE_SITTER = f"{BUNDLE}/node_modules/@kilocode/cli/bin/tree-sitter"


def config(wiring: Wiring) -> dict[str, object]:
    """The gateway as an OpenAI-compatible provider; every tool allowed; no autoupdate, no sharing."""
    return {
        "$schema": "https://app.kilo.ai/config.json",
        **opencode.provider_config(wiring),
        # only the gateway: Kilo's own `kilo` provider fetches its model list from api.kilo.ai on every turn otherwise
        # (KILO_DISABLE_MODELS_FETCH does not stop it), and a 403 or a refused connection costs seconds
        "enabled_providers": [PROVIDER],
        **opencode.unattended_config(),
    }


def offline_env() -> dict[str, str]:
    # opencode's switches, and those of what Kilo adds that would reach the internet after the run (session upload
    # to Kilo's cloud, telemetry); the attempts fail offline, but cost time
    return {
        **opencode.offline_env("KILO"),
        "KILO_DISABLE_SESSION_INGEST": "1",
        "KILO_TELEMETRY_LEVEL": "off",
        "KILO_TREE_SITTER_WASM_DIR": TREE_SITTER,
    }


def build(instruction: str, wiring: Wiring, workdir: str) -> Launch:
    env = {**base_env(wiring), **offline_env(), KEY_ENV: wiring.session_key}
    return Launch(
        # `--auto` approves every tool
        argv=opencode.run_argv(f"{BUNDLE}/bin/kilo-native", wiring, "--auto"),
        env=env,
        files={f"{HOME}/.config/kilo/kilo.json": json_file(config(wiring))},
        workdir=workdir,
        artifacts=opencode.state_artifacts(DATA, "kilo.db"),
        droppings=(".kilo", ".kilocode"),
        stdin=instruction.encode(),
    )


# as opencode: exit 1 when a call of its session failed, also one it compacted past and finished after
ADAPTER = HarnessAdapter(
    name=NAME, package="@kilocode/cli", shell_tool="bash", build=build, api="openai_chat", recovery=opencode.RECOVERY
)
