"""OpenHands 1.58.2 (PyPI `openhands-sdk` + `openhands-tools`, the OpenHands Software Agent SDK): OpenAI Chat
Completions through litellm (`openai/NAME` at the gateway's `/v1`), not streaming; its shell tool is `terminal`
(argument `command`), files go through `file_editor`.

The SDK ships no command, and the OpenHands CLI (PyPI `openhands`, whose `--headless` mode this would otherwise be) is
published for Python 3.12 only, which no Debian release carries. So the bundle (Python 3.13 from trixie) runs the SDK's
documented quick start, `bin/openhands-run --task=TEXT` (harness_images/openhands/polar_openhands.py): the default agent
as the CLI builds it (`get_default_agent(llm, cli_mode=True)`: terminal, file_editor, task_tracker, finish, think), a
Conversation on the working directory, send_message, run. No confirmation policy is set; the SDK's default asks for
none. The LLM comes from LLM_MODEL / LLM_API_KEY / LLM_BASE_URL, the names the SDK's examples and the CLI read.
"""

from __future__ import annotations

from polar_cli.harness.base import HOME, HarnessAdapter, Launch, Wiring, base_env, python_argv

NAME = "openhands"
BUNDLE = f"/opt/polar/harness/{NAME}"
# every event of the conversation (messages, actions, observations), one JSON file each, plus its base state
CONVERSATIONS = f"{HOME}/.openhands/conversations"
DEFAULT_MODEL = "polar-model"


def quiet_env() -> dict[str, str]:
    return {
        # litellm fetches its model price map from GitHub at import (three tries); the copy it ships is enough
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        # the SDK's start-up banner (links to its issue tracker and Slack) on every run
        "OPENHANDS_SUPPRESS_BANNER": "1",
    }


def build(instruction: str, wiring: Wiring, workdir: str) -> Launch:
    env = {
        **base_env(wiring),
        **quiet_env(),
        # `openai/` makes litellm speak OpenAI Chat to LLM_BASE_URL whatever the model is called
        "LLM_MODEL": f"openai/{wiring.model or DEFAULT_MODEL}",
        "LLM_BASE_URL": wiring.gateway_url.rstrip("/") + "/v1",
        "LLM_API_KEY": wiring.session_key,
        "OPENHANDS_PERSISTENCE_DIR": CONVERSATIONS,
    }
    argv = python_argv(BUNDLE, "openhands-run", (), "--task", instruction)
    return Launch(argv=argv, env=env, files={}, workdir=workdir, artifacts=(CONVERSATIONS,))


ADAPTER = HarnessAdapter(name=NAME, package="openhands-tools", shell_tool="terminal", build=build, api="openai_chat")
