"""Terminus-2 (Harbor's own agent, PyPI `harbor` 0.26.0): OpenAI Chat Completions through litellm (`openai/NAME` at
the gateway's `/v1`), not streaming, no tools: each answer is a JSON object of keystrokes for a tmux session.

Harbor drives the agent from outside a sandbox, through its environment's `exec`; Polar runs every harness inside the
sandbox, so the bundle (Python 3.13 from trixie, harbor, and trixie's tmux) runs `bin/terminus2-run --task=TEXT`
(harness_images/terminus-2/polar_terminus2.py): Harbor's `Terminus2` as it ships, on an environment that is the
container itself (each `exec` a local `bash -c`). Its model calls go to the gateway through litellm (`api_base`),
never to a provider of its own; asciinema recording is off (not in the bundle).
"""

from __future__ import annotations

from polar_cli.harness.base import HOME, HarnessAdapter, Launch, Wiring, base_env, python_argv

NAME = "terminus-2"
BUNDLE = f"/opt/polar/harness/{NAME}"
DEFAULT_MODEL = "polar-model"
# the agent's logs: trajectory.json and one directory per episode (its prompt and the model's answer)
LOGS = f"{HOME}/.terminus-2"


def build(instruction: str, wiring: Wiring, workdir: str) -> Launch:
    env = {
        **base_env(wiring),
        # litellm fetches its model price map from GitHub at import otherwise (three tries)
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        # `openai/` makes litellm speak OpenAI Chat to the api_base whatever the model is called
        "TERMINUS_MODEL": f"openai/{wiring.model or DEFAULT_MODEL}",
        "TERMINUS_API_BASE": wiring.gateway_url.rstrip("/") + "/v1",
        "OPENAI_API_KEY": wiring.session_key,
        "TERMINUS_LOGS_DIR": LOGS,
    }
    argv = python_argv(BUNDLE, "terminus2-run", (), "--task", instruction)
    return Launch(argv=argv, env=env, files={}, workdir=workdir, artifacts=(LOGS, "/logs/agent"))


# no tool calls: its shell is the keystrokes in its JSON answers (`shell_tool` empty, as for aider)
ADAPTER = HarnessAdapter(name=NAME, package="harbor", shell_tool="", build=build, api="openai_chat")
