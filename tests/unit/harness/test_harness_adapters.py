"""Each adapter's launch: the instruction as one untouched argument, the gateway wiring, the config files."""

from __future__ import annotations

import json
import tomllib

import pytest

from polar_cli.errors import ConfigError
from polar_cli.harness import ADAPTERS, Wiring, get_adapter
from polar_cli.harness.base import MAX_INSTRUCTION_BYTES, Launch
from polar_cli.harness.pi import adapter_for

WIRING = Wiring(gateway_url="http://127.0.0.1:8765", session_key="sk-polar-SECRET")
INSTRUCTION = 'Fix it\'s "bug" $(rm -rf /) `id`\nline two ünï 🚀'
# the options that carry the instruction glued with `=` (yargs; mini-swe-agent's click; aider's, hermes's and
# openhands-run's argparse)
GLUED = ("--prompt", "--task", "--message", "--oneshot")
# harnesses that always read the instruction from stdin (opencode and kilo re-quote message arguments holding a space;
# openclaw reads it with `--message-file -`)
STDIN_ALWAYS = ("opencode", "openclaw", "kilo")


def launch(name: str, instruction: str = INSTRUCTION, wiring: Wiring = WIRING) -> Launch:
    return ADAPTERS[name].launch(instruction, wiring, "/testbed")


@pytest.mark.parametrize("name", list(ADAPTERS))
def test_instruction_is_one_untouched_argument(name: str) -> None:
    run = launch(name)
    if name in STDIN_ALWAYS:
        assert run.stdin == INSTRUCTION.encode() and not any(INSTRUCTION in a for a in run.argv)
        return
    held = [a for a in run.argv if INSTRUCTION in a]
    assert len(held) == 1
    # the whole argument is the instruction, or an option glued to it with `=`
    assert held[0] in (INSTRUCTION, *(f"{opt}={INSTRUCTION}" for opt in GLUED))
    assert run.stdin is None
    assert run.argv[0].startswith(f"/opt/polar/harness/{name}/bin/")
    assert run.workdir == "/testbed"


@pytest.mark.parametrize("name", list(ADAPTERS))
def test_leading_dash_cannot_become_an_option(name: str) -> None:
    instruction = "--help me -p with this"
    run = launch(name, instruction)
    if run.stdin is not None:
        assert run.stdin == instruction.encode() and not any(instruction in a for a in run.argv)
        return
    i = next(i for i, a in enumerate(run.argv) if instruction in a)
    # after a "--" terminator, or glued to its option with "="
    assert run.argv[i - 1] == "--" or run.argv[i] in (f"{opt}={instruction}" for opt in GLUED)


@pytest.mark.parametrize("name", list(ADAPTERS))
def test_session_key_is_the_api_key_and_never_in_argv(name: str) -> None:
    run = launch(name)
    assert WIRING.session_key in run.env.values()
    assert not any(WIRING.session_key in a for a in run.argv)
    assert not any(WIRING.session_key.encode() in data for data in run.files.values())
    assert run.env["HOME"] == "/root"


def test_claude_code() -> None:
    run = launch("claude-code")
    assert run.env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8765"
    assert run.env["ANTHROPIC_API_KEY"] == WIRING.session_key
    assert run.env["IS_SANDBOX"] == "1"
    assert run.env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert run.argv[1:5] == ("-p", "--dangerously-skip-permissions", "--output-format", "json")
    assert "--model" not in run.argv
    assert "--model" in launch("claude-code", wiring=Wiring("http://g", "k", model="claude-x")).argv


def test_codex_config() -> None:
    run = launch("codex")
    config = tomllib.loads(run.files["/root/.codex/config.toml"].decode())
    assert config["model_provider"] == "polar"
    provider = config["model_providers"]["polar"]
    assert provider["base_url"] == "http://127.0.0.1:8765/v1"
    assert provider["wire_api"] == "responses"
    assert provider["supports_websockets"] is False
    assert run.env[provider["env_key"]] == WIRING.session_key
    assert config["analytics"]["enabled"] is False
    assert run.env["CODEX_HOME"] == "/root/.codex"
    assert "exec" in run.argv and "--dangerously-bypass-approvals-and-sandbox" in run.argv


def test_codex_config_survives_odd_urls_and_models() -> None:
    wiring = Wiring('http://h:1/"quoted"\\', "k", model='m"\n')
    config = tomllib.loads(launch("codex", wiring=wiring).files["/root/.codex/config.toml"].decode())
    assert config["model"] == 'm"\n'
    assert config["model_providers"]["polar"]["base_url"] == 'http://h:1/"quoted"\\/v1'


def test_qwen_code() -> None:
    run = launch("qwen-code")
    assert run.env["OPENAI_BASE_URL"] == "http://127.0.0.1:8765/v1"
    assert run.env["OPENAI_API_KEY"] == WIRING.session_key
    assert run.argv[2:5] == ("--auth-type", "openai", "--yolo")
    settings = json.loads(run.files["/root/.qwen/settings.json"])
    assert settings["privacy"]["usageStatisticsEnabled"] is False


def test_gemini_cli() -> None:
    run = launch("gemini-cli")
    assert run.env["GOOGLE_GEMINI_BASE_URL"] == "http://127.0.0.1:8765"
    assert run.env["GEMINI_API_KEY"] == WIRING.session_key
    # a pinned model: no JSON-mode router call before every turn
    assert run.argv[run.argv.index("--model") + 1] == "gemini-2.5-pro"
    assert "--yolo" in run.argv
    settings = json.loads(run.files["/root/.gemini/settings.json"])
    assert settings["security"]["auth"]["selectedType"] == "gemini-api-key"
    assert settings["security"]["folderTrust"]["enabled"] is False


@pytest.mark.parametrize(
    ("api", "pi_api", "base_url"),
    [
        ("openai_chat", "openai-completions", "http://127.0.0.1:8765/v1"),
        ("openai_responses", "openai-responses", "http://127.0.0.1:8765/v1"),
        ("anthropic_messages", "anthropic-messages", "http://127.0.0.1:8765"),
        ("google_genai", "google-generative-ai", "http://127.0.0.1:8765/v1beta"),
    ],
)
def test_pi_models_json(api: str, pi_api: str, base_url: str) -> None:
    run = adapter_for(api).launch(INSTRUCTION, WIRING)  # type: ignore[arg-type]
    provider = json.loads(run.files["/root/.pi/agent/models.json"])["providers"]["polar"]
    assert provider["api"] == pi_api and provider["baseUrl"] == base_url
    # apiKey names the variable; the key itself stays out of the file
    assert run.env[provider["apiKey"]] == WIRING.session_key
    assert run.argv[run.argv.index("--provider") + 1] == "polar"
    assert run.argv[run.argv.index("--model") + 1] == provider["models"][0]["id"]


def test_pi_takes_an_instruction_its_parser_would_misread_on_stdin() -> None:
    for instruction in ("-v do it", "@file do it"):
        run = launch("pi", instruction)
        assert run.stdin == instruction.encode()
        assert run.argv[-1] == "-p"


@pytest.mark.parametrize(
    ("instruction", "message"),
    [("", "empty"), ("  \n", "empty"), ("a\0b", "NUL"), ("x" * (MAX_INSTRUCTION_BYTES + 1), "bytes")],
)
def test_instructions_no_argument_can_carry_are_refused(instruction: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        launch("codex", instruction)


def test_adapter_names_and_aliases() -> None:
    assert list(ADAPTERS) == [
        "claude-code",
        "codex",
        "qwen-code",
        "gemini-cli",
        "pi",
        "mini-swe-agent",
        "aider",
        "hermes",
        "opencode",
        "cline",
        "openhands",
        "openclaw",
        "kilo",
        "terminus-2",
    ]
    assert get_adapter("claude").name == "claude-code"
    assert get_adapter("gemini").name == "gemini-cli"
    assert get_adapter("opencode-ai").name == "opencode"
    with pytest.raises(ConfigError, match="unknown harness 'crush'"):
        get_adapter("crush")


def test_shell_tools_are_the_recorded_ones() -> None:
    assert {a.name: a.shell_tool for a in ADAPTERS.values()} == {
        "claude-code": "Bash",
        "codex": "exec_command",
        "qwen-code": "run_shell_command",
        "gemini-cli": "run_shell_command",
        "pi": "bash",
        "mini-swe-agent": "bash",
        "aider": "",
        "hermes": "terminal",
        "opencode": "bash",
        "cline": "run_commands",
        "openhands": "terminal",
        "openclaw": "exec",
        "kilo": "bash",
        "terminus-2": "",
    }


def test_opencode() -> None:
    run = launch("opencode")
    config = json.loads(run.files["/root/.config/opencode/opencode.json"])
    provider = config["provider"]["polar"]
    assert provider["npm"] == "@ai-sdk/openai-compatible"
    assert provider["options"] == {"baseURL": "http://127.0.0.1:8765/v1", "apiKey": "{env:POLAR_SESSION_KEY}"}
    assert run.env["POLAR_SESSION_KEY"] == WIRING.session_key
    assert run.argv[1] == "run" and "--title" in run.argv  # a title skips the title-generation call


def test_cline() -> None:
    run = launch("cline")
    stored = json.loads(run.files["/root/.cline/data/settings/providers.json"])
    assert stored["lastUsedProvider"] == "openai-compatible"
    settings = stored["providers"]["openai-compatible"]["settings"]
    assert settings["baseUrl"] == "http://127.0.0.1:8765/v1" and "apiKey" not in settings
    assert run.env["OPENAI_API_KEY"] == WIRING.session_key
    assert run.env["CLINE_SESSION_BACKEND_MODE"] == "local"  # no detached hub daemon
