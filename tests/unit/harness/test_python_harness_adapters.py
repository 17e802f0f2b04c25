"""The Python harnesses' launches (mini-swe-agent, aider, hermes, openhands): an OpenAI Chat provider at the gateway,
headless flags."""

from __future__ import annotations

import json

from polar_cli.harness import ADAPTERS, Wiring, get_adapter
from polar_cli.harness.base import Launch
from polar_cli.inference.gold import GoldPolicy, Task, apply_patch_command

WIRING = Wiring(gateway_url="http://127.0.0.1:8765/", session_key="sk-polar-SECRET", model="qwen3.5-122b-a10b")


def launch(name: str, wiring: Wiring = WIRING) -> Launch:
    return ADAPTERS[name].launch("--fix it", wiring, "/testbed")


def test_mini_swe_agent() -> None:
    run = launch("mini-swe-agent")
    assert run.argv[0] == "/opt/polar/harness/mini-swe-agent/bin/mini"
    assert {"--yolo", "--exit-immediately"} <= set(run.argv)
    assert run.argv[run.argv.index("--cost-limit") + 1] == "0"
    # the builtin config first, then ours merged over it
    configs = [run.argv[i + 1] for i, a in enumerate(run.argv) if a == "--config"]
    assert configs == ["mini.yaml", "/root/.config/mini-swe-agent/polar.yaml"]
    assert run.argv[-1] == "--task=--fix it"
    config = json.loads(run.files[configs[1]])
    assert config["model"] == {
        "model_name": "openai/qwen3.5-122b-a10b",
        "model_kwargs": {"api_base": "http://127.0.0.1:8765/v1"},
        "cost_tracking": "ignore_errors",
    }
    assert run.env["OPENAI_API_KEY"] == WIRING.session_key
    assert run.env["MSWEA_CONFIGURED"] == "1" and run.env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
    assert run.artifacts == ("/root/.config/mini-swe-agent/last_mini_run.traj.json",)
    assert run.argv[run.argv.index("--output") + 1] == run.artifacts[0]


def test_mini_swe_agent_default_model() -> None:
    run = launch("mini-swe-agent", Wiring("http://gw:1", "k"))
    assert json.loads(run.files["/root/.config/mini-swe-agent/polar.yaml"])["model"]["model_name"] == (
        "openai/polar-model"
    )


def test_aider() -> None:
    run = launch("aider")
    assert run.argv[0] == "/opt/polar/harness/aider/bin/aider"
    assert run.argv[run.argv.index("--model") + 1] == "openai/qwen3.5-122b-a10b"
    assert run.env["OPENAI_API_BASE"] == "http://127.0.0.1:8765/v1"
    assert run.env["OPENAI_API_KEY"] == WIRING.session_key
    flags = set(run.argv)
    assert {"--yes-always", "--analytics-disable", "--no-check-update", "--no-auto-commits", "--no-gitignore"} <= flags
    assert run.argv[-1] == "--message=--fix it"
    # the model is known to litellm from our metadata, so aider never fetches the price list
    metadata_file = run.argv[run.argv.index("--model-metadata-file") + 1]
    metadata = json.loads(run.files[metadata_file])
    assert metadata["openai/qwen3.5-122b-a10b"]["litellm_provider"] == "openai"
    assert metadata["openai/qwen3.5-122b-a10b"]["input_cost_per_token"] == 0.0
    # its histories stay out of the repository; its tag cache is kept out of the patch
    for option in ("--chat-history-file", "--input-history-file", "--llm-history-file"):
        assert run.argv[run.argv.index(option) + 1].startswith("/root/.aider/")
    assert run.droppings == (".aider*",)
    assert ADAPTERS["aider"].shell_tool == ""


def test_hermes() -> None:
    run = launch("hermes")
    assert run.argv[0] == "/opt/polar/harness/hermes/bin/hermes"
    assert run.argv[run.argv.index("--provider") + 1] == "custom"
    assert run.argv[run.argv.index("--model") + 1] == "qwen3.5-122b-a10b"
    assert "--yolo" in run.argv
    assert run.argv[-1] == "--oneshot=--fix it"
    # no tool that reaches the internet whatever the endpoint (text-to-speech, vision)
    toolsets = run.argv[run.argv.index("--toolsets") + 1].split(",")
    assert "terminal" in toolsets and "file" in toolsets
    assert not {"tts", "vision", "web", "browser", "image_gen"} & set(toolsets)
    # the gateway is a custom provider in config.yaml; the key is named there and sits in the environment only
    config = json.loads(run.files["/root/.hermes/config.yaml"])
    assert config["model"] == {
        "provider": "custom",
        "base_url": "http://127.0.0.1:8765/v1",
        "api_key": "${POLAR_SESSION_KEY}",
        "default": "qwen3.5-122b-a10b",
        "context_length": 131072,
    }
    assert run.env["POLAR_SESSION_KEY"] == WIRING.session_key
    # off the internet: no pip self-check (environment probe), no tirith download from GitHub
    assert config["agent"]["environment_probe"] is False
    assert config["security"]["tirith_enabled"] is False
    assert config["memory"]["nudge_interval"] == 0 and config["skills"]["creation_nudge_interval"] == 0
    assert run.artifacts == ("/root/.hermes/state.db", "/root/.hermes/logs")
    assert run.droppings == ()
    assert ADAPTERS["hermes"].shell_tool == "terminal" and ADAPTERS["hermes"].api == "openai_chat"


def test_hermes_default_model() -> None:
    run = launch("hermes", Wiring("http://gw:1", "k"))
    assert run.argv[run.argv.index("--model") + 1] == "polar-model"
    assert json.loads(run.files["/root/.hermes/config.yaml"])["model"]["default"] == "polar-model"


def test_openhands() -> None:
    run = launch("openhands")
    # the SDK's documented quick start, run by the bundle's driver; the instruction glued to its option
    assert run.argv == ("/opt/polar/harness/openhands/bin/openhands-run", "--task=--fix it")
    # litellm's OpenAI provider at the gateway, the session key as its API key, in the environment only
    assert run.env["LLM_MODEL"] == "openai/qwen3.5-122b-a10b"
    assert run.env["LLM_BASE_URL"] == "http://127.0.0.1:8765/v1"
    assert run.env["LLM_API_KEY"] == WIRING.session_key
    assert run.files == {}
    # off the internet: litellm's bundled price map instead of GitHub's; no banner
    assert run.env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True" and run.env["OPENHANDS_SUPPRESS_BANNER"] == "1"
    # every event of the conversation is persisted where the artifacts are collected
    assert run.env["OPENHANDS_PERSISTENCE_DIR"] == "/root/.openhands/conversations"
    assert run.artifacts == ("/root/.openhands/conversations",)
    assert run.droppings == ()
    adapter = ADAPTERS["openhands"]
    assert adapter.shell_tool == "terminal" and adapter.api == "openai_chat" and adapter.package == "openhands-tools"


def test_openhands_default_model() -> None:
    assert launch("openhands", Wiring("http://gw:1", "k")).env["LLM_MODEL"] == "openai/polar-model"


def sdk_tool(name: str, properties: dict[str, object], required: list[str] | None) -> dict[str, object]:
    """A tool as OpenHands SDK 1.58.2 offers it: every action takes `security_risk` and `summary` beside its own."""
    common = {"security_risk": {"type": "string", "enum": ["LOW", "MEDIUM", "HIGH", "UNKNOWN"]}}
    parameters = {"type": "object", "properties": {**common, "summary": {"type": "string"}, **properties}}
    if required is not None:
        parameters["required"] = required
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


def test_gold_applies_the_patch_through_openhands_terminal() -> None:
    """OpenHands offers file_editor and task_tracker beside `terminal`, each with a `command` string too (recorded from
    SDK 1.58.2's default agent); the patch goes through `terminal`, with its one required argument."""
    tools = [
        sdk_tool(
            "terminal",
            {"command": {"type": "string"}, "is_input": {"type": "boolean"}, "timeout": {"type": "number"}},
            ["command"],
        ),
        sdk_tool("file_editor", {"command": {"type": "string"}, "path": {"type": "string"}}, ["command", "path"]),
        sdk_tool("task_tracker", {"command": {"type": "string"}, "task_list": {"type": "array"}}, None),
        sdk_tool("finish", {"message": {"type": "string"}}, ["message"]),
        sdk_tool("think", {"thought": {"type": "string"}}, ["thought"]),
    ]
    patch = "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n"
    body = {"messages": [{"role": "user", "content": "fix it"}], "tools": tools}
    turn = GoldPolicy().next_turn(body, Task("i", patch))
    ((name, args),) = turn.tool_calls
    assert name == "terminal" and args == {"command": apply_patch_command(patch, "/testbed")}


def test_python_harness_aliases() -> None:
    assert get_adapter("mini").name == "mini-swe-agent"
    assert get_adapter("aider-chat").name == "aider"
    assert get_adapter("hermes-agent").name == "hermes"
    assert get_adapter("openhands-sdk").name == "openhands"
