"""Pi (pi-coding-agent 0.73.1): a provider in ~/.pi/agent/models.json; any of four APIs, OpenAI Chat by default."""

from __future__ import annotations

from typing import Literal

from polar_cli.harness.base import HOME, HarnessAdapter, Launch, Wiring, base_env, json_file, node_argv
from polar_cli.translate.codec import ApiName

NAME = "pi"
BUNDLE = f"/opt/polar/harness/{NAME}"
KEY_ENV = "POLAR_SESSION_KEY"
DEFAULT_MODEL = "polar-model"
PiApi = Literal["openai-completions", "openai-responses", "anthropic-messages", "google-generative-ai"]
# Polar's name of each API (its codec module) -> Pi's name for it in models.json, and the path its client appends itself
PI_APIS: dict[ApiName, tuple[PiApi, str]] = {
    "openai_chat": ("openai-completions", "/v1"),
    "openai_responses": ("openai-responses", "/v1"),
    "anthropic_messages": ("anthropic-messages", ""),
    "google_genai": ("google-generative-ai", "/v1beta"),
}


def models_json(wiring: Wiring, api: ApiName) -> dict[str, object]:
    pi_api, suffix = PI_APIS[api]
    base_url = wiring.gateway_url.rstrip("/") + suffix
    # apiKey names an environment variable, so the key never sits in a file
    model = {"id": wiring.model or DEFAULT_MODEL, "reasoning": False}
    return {"providers": {"polar": {"baseUrl": base_url, "api": pi_api, "apiKey": KEY_ENV, "models": [model]}}}


def needs_stdin(instruction: str) -> bool:
    # Pi's parser reads an argument starting with "-" as an option and "@" as a file to attach; stdin it reads as-is
    # (only surrounding whitespace trimmed), so such an instruction goes there
    return instruction.startswith(("-", "@"))


def adapter_for(api: ApiName) -> HarnessAdapter:
    """Pi speaking one of its four APIs to the gateway."""

    def build(instruction: str, wiring: Wiring, workdir: str) -> Launch:
        env = {**base_env(wiring), KEY_ENV: wiring.session_key, "PI_OFFLINE": "1"}
        argv = [
            *node_argv(BUNDLE, "pi"),
            "--offline",
            "--provider",
            "polar",
            "--model",
            wiring.model or DEFAULT_MODEL,
            "-p",
        ]
        stdin = None
        if needs_stdin(instruction):
            stdin = instruction.encode()
        else:
            argv.append(instruction)
        return Launch(
            argv=tuple(argv),
            env=env,
            files={f"{HOME}/.pi/agent/models.json": json_file(models_json(wiring, api))},
            workdir=workdir,
            artifacts=(f"{HOME}/.pi/agent/sessions",),
            droppings=(".pi",),
            stdin=stdin,
        )

    return HarnessAdapter(name=NAME, package="@mariozechner/pi-coding-agent", shell_tool="bash", build=build, api=api)


ADAPTER = adapter_for("openai_chat")
