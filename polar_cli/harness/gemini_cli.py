"""Gemini CLI 0.61.0: Gemini generateContent to GOOGLE_GEMINI_BASE_URL, model pinned so the router call is skipped."""

from __future__ import annotations

from polar_cli.harness.base import HOME, HarnessAdapter, Launch, Wiring, base_env, json_file, node_argv

NAME = "gemini-cli"
BUNDLE = f"/opt/polar/harness/{NAME}"
# any concrete model: with the default "auto" each turn first asks a JSON-mode router model
DEFAULT_MODEL = "gemini-2.5-pro"


def settings() -> dict[str, object]:
    return {
        # without a selected auth type the CLI exits 41 ("Invalid auth method selected")
        "security": {
            "auth": {"selectedType": "gemini-api-key"},
            # in an untrusted folder --yolo is silently downgraded to asking for approval
            "folderTrust": {"enabled": False},
        },
        # Clearcut usage statistics to play.googleapis.com on every run
        "privacy": {"usageStatisticsEnabled": False},
    }


def no_relaunch_env() -> dict[str, str]:
    # Gemini CLI re-executes itself to size its heap from the host's memory (blind to the container's limit): ~1 s
    return {"GEMINI_CLI_NO_RELAUNCH": "1"}


def build(instruction: str, wiring: Wiring, workdir: str) -> Launch:
    env = {
        **base_env(wiring),
        **no_relaunch_env(),
        "GEMINI_API_KEY": wiring.session_key,
        # no /v1beta: the SDK adds it
        "GOOGLE_GEMINI_BASE_URL": wiring.gateway_url.rstrip("/"),
    }
    argv = [
        *node_argv(BUNDLE, "gemini"),
        "--model",
        wiring.model or DEFAULT_MODEL,
        "--yolo",
        "--output-format",
        "json",
        # one token, so yargs never reads a leading dash in the instruction as a flag
        f"--prompt={instruction}",
    ]
    return Launch(
        argv=tuple(argv),
        env=env,
        files={f"{HOME}/.gemini/settings.json": json_file(settings())},
        workdir=workdir,
        artifacts=(f"{HOME}/.gemini/tmp",),
        droppings=(".gemini",),
    )


ADAPTER = HarnessAdapter(
    name=NAME, package="@google/gemini-cli", shell_tool="run_shell_command", build=build, api="google_genai"
)
