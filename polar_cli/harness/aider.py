"""Aider 0.86.2 (PyPI `aider-chat`): OpenAI Chat Completions through litellm (`--model openai/NAME`, the gateway as
`OPENAI_API_BASE`); `--message` runs one instruction and exits, `--yes-always` answers every question.

Aider has no tools: it edits files from its replies' edit blocks in plain text, so `shell_tool` is empty. The edit
format is pinned to `diff` (SEARCH/REPLACE blocks), aider's choice for capable models: for a model it has no settings
for, as the gateway's is, it would fall back to `whole` (every edited file re-sent in full, costly in tokens on real
repositories).
"""

from __future__ import annotations

from polar_cli.harness.base import HOME, HarnessAdapter, Launch, Wiring, base_env, json_file, python_argv

NAME = "aider"
BUNDLE = f"/opt/polar/harness/{NAME}"
STATE = f"{HOME}/.aider"
METADATA = f"{STATE}/polar.model.metadata.json"
DEFAULT_MODEL = "polar-model"
# what aider is told of the gateway's model (it sizes its repo map and token warnings from it); prices are 0
CONTEXT_TOKENS = 131072
OUTPUT_TOKENS = 32768


def model_name(wiring: Wiring) -> str:
    # `openai/` makes litellm speak OpenAI Chat to OPENAI_API_BASE whatever the model is called
    return f"openai/{wiring.model or DEFAULT_MODEL}"


def model_metadata(wiring: Wiring) -> dict[str, object]:
    """litellm metadata for the model: without it aider fetches litellm's price list from GitHub to look it up."""
    return {
        model_name(wiring): {
            "max_input_tokens": CONTEXT_TOKENS,
            "max_output_tokens": OUTPUT_TOKENS,
            "input_cost_per_token": 0.0,
            "output_cost_per_token": 0.0,
            "litellm_provider": "openai",
            "mode": "chat",
        }
    }


def offline_flags() -> list[str]:
    # no analytics (PostHog/Mixpanel), no PyPI version check, no release notes, no URL scraping, no model warnings
    # (whose "open the docs?" question --yes-always would answer with a browser)
    return [
        "--analytics-disable",
        "--no-check-update",
        "--no-show-release-notes",
        "--no-detect-urls",
        "--no-show-model-warnings",
    ]


def git_flags() -> list[str]:
    # Polar takes the patch as `git diff` of the working tree against the base commit: aider's own commits would only
    # move HEAD, and its `.gitignore` edit (adding .aider*) would land in the patch
    return ["--no-auto-commits", "--no-dirty-commits", "--no-gitignore"]


def history_flags() -> list[str]:
    # the chat, input and LLM histories go to ~/.aider (artifacts) rather than into the repository
    return [
        "--chat-history-file",
        f"{STATE}/chat.history.md",
        "--input-history-file",
        f"{STATE}/input.history",
        "--llm-history-file",
        f"{STATE}/llm.history",
    ]


def build(instruction: str, wiring: Wiring, workdir: str) -> Launch:
    env = {
        **base_env(wiring),
        "OPENAI_API_BASE": wiring.gateway_url.rstrip("/") + "/v1",
        "OPENAI_API_KEY": wiring.session_key,
        # litellm fetches its model price map from GitHub at import; the copy it ships is enough
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    options = [
        "--model",
        model_name(wiring),
        "--model-metadata-file",
        METADATA,
        "--edit-format",
        "diff",
        "--yes-always",
        "--no-pretty",
        "--no-fancy-input",
        *offline_flags(),
        *git_flags(),
        *history_flags(),
    ]
    return Launch(
        argv=python_argv(BUNDLE, "aider", options, "--message", instruction),
        env=env,
        files={METADATA: json_file(model_metadata(wiring))},
        workdir=workdir,
        artifacts=(f"{STATE}/chat.history.md", f"{STATE}/llm.history"),
        # the repo map's tag cache (.aider.tags.cache.v4) stays in the repository root
        droppings=(".aider*",),
    )


ADAPTER = HarnessAdapter(name=NAME, package="aider-chat", shell_tool="", build=build, api="openai_chat")
