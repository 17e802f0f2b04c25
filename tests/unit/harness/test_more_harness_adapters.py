"""The launches of the harnesses added with issue 25: OpenClaw and the Kilo Code CLI (the gateway as an
OpenAI-compatible provider in the harness's own config file, the key only in the environment, the instruction on
stdin) and Terminus-2 (litellm's `openai/` provider at the gateway, the instruction glued to `--task=`)."""

from __future__ import annotations

import json

from polar_cli.harness import ADAPTERS, Wiring, get_adapter
from polar_cli.harness.base import Launch

WIRING = Wiring(gateway_url="http://127.0.0.1:8765/", session_key="sk-polar-SECRET")
INSTRUCTION = '--fix it\'s "bug" $(id)\n ünï'


def launch(name: str, wiring: Wiring = WIRING) -> Launch:
    return ADAPTERS[name].launch(INSTRUCTION, wiring, "/testbed")


def test_openclaw() -> None:
    run = launch("openclaw")
    assert run.argv[:4] == (
        "/opt/polar/harness/openclaw/bin/node",
        "/opt/polar/harness/openclaw/bin/openclaw",
        "agent",
        "exec",
    )
    # one headless turn against exactly this config, its state kept for the artifacts, the prompt from stdin
    assert run.argv[run.argv.index("--config") + 1] == "/root/.openclaw/openclaw.json"
    assert run.argv[run.argv.index("--state-dir") + 1] == "/root/.openclaw"
    assert run.argv[run.argv.index("--cwd") + 1] == "/testbed"
    assert run.argv[-2:] == ("--message-file", "-") and run.stdin == INSTRUCTION.encode()
    config = json.loads(run.files["/root/.openclaw/openclaw.json"])
    provider = config["models"]["providers"]["polar"]
    assert provider["baseUrl"] == "http://127.0.0.1:8765/v1" and provider["api"] == "openai-completions"
    # the key is named, never written: OpenClaw substitutes ${VAR} from the environment
    assert provider["apiKey"] == "${POLAR_SESSION_KEY}" and run.env["POLAR_SESSION_KEY"] == WIRING.session_key
    assert [m["id"] for m in provider["models"]] == ["polar-model"]
    assert run.argv[run.argv.index("--model") + 1] == config["agents"]["defaults"]["model"]["primary"]
    assert run.argv[run.argv.index("--model") + 1] == "polar/polar-model"
    assert run.artifacts == ("/root/.openclaw/agents", "/root/.openclaw/logs")


def test_openclaw_model_name() -> None:
    run = launch("openclaw", Wiring("http://gw:1", "k", model="qwen3.5"))
    assert run.argv[run.argv.index("--model") + 1] == "polar/qwen3.5"
    provider = json.loads(run.files["/root/.openclaw/openclaw.json"])["models"]["providers"]["polar"]
    assert provider["models"][0]["id"] == "qwen3.5" and provider["baseUrl"] == "http://gw:1/v1"


def test_kilo() -> None:
    run = launch("kilo")
    assert run.argv[:2] == ("/opt/polar/harness/kilo/bin/kilo-native", "run")
    assert "--auto" in run.argv and "--title" in run.argv  # every permission approved; no title-generation call
    assert run.argv[run.argv.index("-m") + 1] == "polar/polar-model"
    assert run.stdin == INSTRUCTION.encode()
    config = json.loads(run.files["/root/.config/kilo/kilo.json"])
    provider = config["provider"]["polar"]
    assert provider["npm"] == "@ai-sdk/openai-compatible"
    assert provider["options"] == {"baseURL": "http://127.0.0.1:8765/v1", "apiKey": "{env:POLAR_SESSION_KEY}"}
    assert config["enabled_providers"] == ["polar"]  # Kilo's own provider would ask api.kilo.ai for its models
    assert run.env["POLAR_SESSION_KEY"] == WIRING.session_key
    assert run.env["KILO_DISABLE_AUTOUPDATE"] == "1" and run.env["KILO_DISABLE_SESSION_INGEST"] == "1"
    assert run.droppings == (".kilo", ".kilocode")


def test_aliases_and_apis() -> None:
    assert get_adapter("@kilocode/cli").name == "kilo"
    assert get_adapter("kilocode").name == "kilo"
    assert {ADAPTERS[n].api for n in ("openclaw", "kilo")} == {"openai_chat"}
    assert ADAPTERS["openclaw"].package == "openclaw" and ADAPTERS["kilo"].package == "@kilocode/cli"


def test_terminus2() -> None:
    run = launch("terminus-2")
    assert run.argv == ("/opt/polar/harness/terminus-2/bin/terminus2-run", f"--task={INSTRUCTION}")
    # litellm's `openai/` provider at the gateway: its model calls go nowhere else
    assert run.env["TERMINUS_MODEL"] == "openai/polar-model"
    assert run.env["TERMINUS_API_BASE"] == "http://127.0.0.1:8765/v1"
    assert run.env["OPENAI_API_KEY"] == WIRING.session_key
    assert run.env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
    assert run.files == {} and run.stdin is None
    adapter = ADAPTERS["terminus-2"]
    assert adapter.shell_tool == "" and adapter.api == "openai_chat" and adapter.package == "harbor"
    assert get_adapter("terminus2").name == "terminus-2"
