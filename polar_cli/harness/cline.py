"""Cline CLI (cline 3.0.65): OpenAI Chat Completions through its `openai-compatible` provider, auto-approving.

The provider sits in ~/.cline/data/settings/providers.json (what `cline auth -p openai-compatible -b URL -m M` writes,
less the key: the provider reads `OPENAI_API_KEY`). A prompt argument runs one task in act mode with every tool
auto-approved. The binary is Bun-compiled and runs by itself (bin/cline is the platform package's binary).
"""

from __future__ import annotations

from polar_cli.harness.base import HOME, HarnessAdapter, Launch, Wiring, base_env, json_file

NAME = "cline"
BUNDLE = f"/opt/polar/harness/{NAME}"
DEFAULT_MODEL = "polar-model"
PROVIDER = "openai-compatible"
DATA = f"{HOME}/.cline/data"


def providers_json(wiring: Wiring) -> dict[str, object]:
    settings = {
        "provider": PROVIDER,
        "model": wiring.model or DEFAULT_MODEL,
        "baseUrl": wiring.gateway_url.rstrip("/") + "/v1",
    }
    # without `updatedAt` the stored provider is passed over for the default (Cline's own account service)
    entry = {"settings": settings, "updatedAt": "2026-01-01T00:00:00.000Z", "tokenSource": "manual"}
    return {"version": 1, "lastUsedProvider": PROVIDER, "modes": {}, "providers": {PROVIDER: entry}}


def local_env() -> dict[str, str]:
    # `local`: the session runs in this process; by default the CLI starts a detached hub daemon that outlives it
    return {"CLINE_SESSION_BACKEND_MODE": "local", "CLINE_NO_AUTO_UPDATE": "1"}


def build(instruction: str, wiring: Wiring, workdir: str) -> Launch:
    env = {**base_env(wiring), **local_env(), "OPENAI_API_KEY": wiring.session_key}
    # `--`: Commander reads everything after it as the prompt, so a leading dash is text
    argv = [f"{BUNDLE}/bin/cline", "--json", "--auto-approve", "true", "--cwd", workdir, "--", instruction]
    return Launch(
        argv=tuple(argv),
        env=env,
        files={f"{DATA}/settings/providers.json": json_file(providers_json(wiring))},
        workdir=workdir,
        artifacts=(f"{DATA}/sessions", f"{DATA}/logs"),
        droppings=(".cline", ".clinerules"),
    )


ADAPTER = HarnessAdapter(name=NAME, package="cline", shell_tool="run_commands", build=build, api="openai_chat")
