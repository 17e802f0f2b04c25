"""`polar run` and `polar images`: usage errors exit 2 before any engine is touched; the result's shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from polar_cli.capture import CaptureRecord, CaptureWriter
from polar_cli.commands.images import images
from polar_cli.commands.run import run
from polar_cli.errors import ConfigError
from polar_cli.harness.session import SessionOutcome
from polar_cli.node.adhoc import Target, engine_config, resolve_target, session_result

runner = CliRunner()


def cli(command: typer.models.CommandFunctionType, args: list[str]) -> tuple[int, str]:
    app = typer.Typer()
    app.command()(command)
    app.command("unused")(lambda: None)  # two commands: typer then expects the command name first
    result = runner.invoke(app, [command.__name__, *args])
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--harness", "crush", "--upstream", "http://u"], "unknown harness"),
        (["--harness", "pi", "--image", "i", "--instruction", "x"], "give --upstream URL"),
        (["--harness", "pi", "--image", "i", "--instruction", "x", "--engine", "sglang"], "give --upstream URL"),
        (["--harness", "pi", "--upstream", "http://u", "--engine", "gold"], "names its token fields"),
        (["--harness", "pi", "--engine", "gold", "--image", "i", "--instruction", "x"], "reference patch"),
        (["--harness", "pi", "--upstream", "http://u", "--image", "i"], "either --image and --instruction"),
        (["--harness", "pi", "--upstream", "http://u", "--instance", "a"], "either --image and --instruction"),
    ],
)
def test_run_usage_errors_exit_2(args: list[str], message: str) -> None:
    code, output = cli(run, args)
    assert code == 2
    assert message in output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["push", "base"], "unknown action"),
        (["build", "everything"], "unknown kind"),
        (["build", "harness"], "name one of"),
        (["build", "harness", "crush"], "unknown harness"),
        (["build", "base", "extra"], "takes no argument"),
        (["build", "instances"], "manifest is missing"),
    ],
)
def test_images_usage_errors_exit_2(args: list[str], message: str) -> None:
    code, output = cli(images, args)
    assert code == 2
    assert message in output


def test_target_from_a_manifest_row(tmp_path: Path) -> None:
    row = {
        "instance_id": "org__repo-1",
        "repo": "org/repo",
        "base_commit": "a" * 40,
        "problem_statement": "It's broken: $(x)\n",
        "patch": "diff --git a/f b/f\n",
        "test_patch": "",
        "FAIL_TO_PASS": "[]",
        "PASS_TO_PASS": "[]",
        "image": "example/img:1",
    }
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(json.dumps(row) + "\n")
    target = resolve_target(None, None, "org__repo-1", str(manifest), None)
    assert target == Target("example/img:1", "It's broken: $(x)\n", "a" * 40, "org__repo-1", "diff --git a/f b/f\n")
    with pytest.raises(ConfigError, match="not in manifest"):
        resolve_target(None, None, "other", str(manifest), None)
    assert resolve_target("img", "do", None, None, None) == Target("img", "do", None, None)


def test_engine_configs() -> None:
    server = engine_config("http://gpu:30000/v1", "vllm", None, None)
    assert (server.kind, server.url, server.dialect) == ("server", "http://gpu:30000/v1", "vllm")
    assert engine_config("http://gpu:30000", None, "m", None).dialect == "sglang"
    gold = engine_config(None, "gold", None, None)
    assert (gold.kind, gold.tokenizer) == ("gold", "qwen3")
    assert engine_config(None, "noop", None, "/tok").tokenizer == "/tok"
    assert engine_config(None, "gold", None, None, token_in=True).token_in is True
    with pytest.raises(ConfigError, match="token_in needs tokenizer"):
        engine_config("http://gpu:30000", None, None, None, token_in=True)
    assert engine_config("http://gpu:30000", None, None, "/models/q", token_in=True).tokenizer == "/models/q"


def test_session_result_counts_captured_calls(tmp_path: Path) -> None:
    writer = CaptureWriter(tmp_path / "capture")
    for seq, ids in enumerate(([1, 2], [])):
        writer.write(
            CaptureRecord(
                "s1",
                seq,
                "openai_chat",
                "/v1/chat/completions",
                1.0,
                2.0,
                "ok",
                {},
                prompt_ids=ids,
                response_ids=ids,
                response_logprobs=[0.0] * len(ids),
            )
        )
    writer.close()
    outcome = SessionOutcome("s1", "pi", "ok", 0, "diff", "b" * 40, "done", (), {"run": 1.23456})
    result = session_result(outcome, tmp_path / "capture", tmp_path / "art", Target("img", "do", None, None))
    assert result["model_calls"] == 2 and result["model_calls_with_tokens"] == 1
    assert result["status"] == "ok" and result["patch"] == "diff" and result["image"] == "img"
    assert result["timings"] == {"run": 1.235}
    json.dumps(result)
