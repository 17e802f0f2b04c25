"""openhands-run --task=TEXT: one OpenHands task, headless, with the OpenHands SDK as it ships.

The SDK (PyPI openhands-sdk, openhands-tools) has no command of its own; the OpenHands CLI, which has a headless mode,
is published for Python 3.12 only. This is the SDK's documented way to run an agent (the Quick Start of its README and
docs.openhands.dev/sdk, "Hello World"): an LLM, the default agent, a Conversation on a local workspace,
send_message(), run(). Nothing else is set, so every behaviour is the SDK's own:

- the LLM from LLM_MODEL, LLM_API_KEY and LLM_BASE_URL (the names the SDK's examples and the CLI's
  --override-with-envs read); litellm speaks OpenAI Chat Completions to LLM_BASE_URL for an `openai/NAME` model;
- the agent from `get_default_agent(llm, cli_mode=True)`, as the OpenHands CLI builds it: the terminal, file_editor and
  task_tracker tools (plus the SDK's built-in finish and think), no browser, the default condenser;
- the workspace is the working directory; no confirmation policy is set, and the SDK's default asks for none;
- the conversation's events are persisted under OPENHANDS_PERSISTENCE_DIR when it is set.

Exit 0 when the conversation finished, 1 when it ended in error or stuck (or raised), 2 on bad usage.
"""

from __future__ import annotations

import argparse
import os
import sys


def main() -> int:
    parser = argparse.ArgumentParser(prog="openhands-run", description=__doc__.split("\n", 1)[0])
    parser.add_argument("--task", required=True, help="the instruction; glue it (--task=TEXT) when it starts with -")
    args = parser.parse_args()
    missing = [name for name in ("LLM_MODEL", "LLM_API_KEY") if not os.environ.get(name)]
    if missing:
        parser.error(f"set {' and '.join(missing)}")

    from openhands.sdk import LLM, Conversation
    from openhands.sdk.conversation.state import ConversationExecutionStatus
    from openhands.tools.preset.default import get_default_agent

    llm = LLM(
        model=os.environ["LLM_MODEL"],
        api_key=os.environ["LLM_API_KEY"],
        base_url=os.environ.get("LLM_BASE_URL") or None,
        usage_id="agent",
    )
    agent = get_default_agent(llm=llm, cli_mode=True)
    conversation = Conversation(
        agent=agent, workspace=os.getcwd(), persistence_dir=os.environ.get("OPENHANDS_PERSISTENCE_DIR") or None
    )
    conversation.send_message(args.task)
    conversation.run()
    status = conversation.state.execution_status
    print(f"openhands-run: conversation {conversation.id} {status.value}", file=sys.stderr)
    return 0 if status == ConversationExecutionStatus.FINISHED else 1


if __name__ == "__main__":
    sys.exit(main())
