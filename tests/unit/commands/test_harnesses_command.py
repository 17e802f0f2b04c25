"""`polar harnesses`: every harness with its pin, API, bundle image and state; "no engine" when Docker is absent."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from polar_cli import cli
from polar_cli.harness import ADAPTERS
from polar_cli.harness.custom import CustomHarnessConfig, custom_adapter
from polar_cli.harness.listing import harness_rows
from polar_cli.runtime.images import harness_image_plan, harness_version

RECIPE = """
manifest: {source: m.jsonl}
engine: {kind: gold, tokenizer: qwen3}
harnesses: [bare]
custom_harnesses:
  bare: {api: openai-responses, argv: [python3, /root/h.py, "{instruction}"]}
  on-pi: {api: google, argv: [t], bundle: pi}
"""
KEYS = ["name", "kind", "version", "api", "bundle", "state", "quirks", "note"]


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli.build_app(), ["harnesses", *args])
    return result.exit_code, result.output


def test_json_lists_every_harness_with_no_engine_when_docker_does_not_answer(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE)
    code, output = invoke("--recipe", str(recipe), "--json")
    assert code == 0, output
    rows = json.loads(output)
    assert [r["name"] for r in rows] == [*ADAPTERS, "bare", "on-pi"]
    assert all(list(r) == KEYS for r in rows)
    by_name = {r["name"]: r for r in rows}
    for name in ADAPTERS:
        row = by_name[name]
        assert row["kind"] == "built-in" and row["state"] == "no engine"
        assert row["version"] == harness_version(name) and row["bundle"] == harness_image_plan(name).tag
    assert by_name["claude-code"]["api"] == "anthropic" and by_name["codex"]["api"] == "openai-responses"
    assert by_name["gemini-cli"]["api"] == "google" and by_name["pi"]["api"] == "openai-chat"
    assert by_name["hermes"]["api"] == "openai-chat" and by_name["hermes"]["version"] == "0.19.0"
    bare = by_name["bare"]
    assert (bare["kind"], bare["version"], bare["api"], bare["bundle"], bare["state"]) == (
        "custom",
        None,
        "openai-responses",
        None,
        "none",
    )
    # a custom harness on Pi's bundle mounts Pi's image
    assert by_name["on-pi"]["bundle"] == harness_image_plan("pi").tag and by_name["on-pi"]["state"] == "no engine"


def test_the_table_shows_states_and_quirks(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    monkeypatch.setenv("COLUMNS", "200")
    code, output = invoke()
    assert code == 0, output
    assert "no engine" in output and "_quirk_drop_billing_header" in output


def test_bundle_state_is_built_or_missing_as_the_engine_says() -> None:
    present = {harness_image_plan("codex").tag, "me/agent:1"}
    image = custom_adapter("img", CustomHarnessConfig(api="anthropic", argv=["t"], bundle="me/agent:1"))
    gone = custom_adapter("gone", CustomHarnessConfig(api="anthropic", argv=["t"], bundle="me/gone:1"))
    rows = {r.name: r for r in harness_rows(ADAPTERS.values(), [image, gone], present.__contains__)}
    assert rows["codex"].state == "built" and rows["qwen-code"].state == "missing"
    assert rows["img"].state == "built" and rows["gone"].state == "missing"


def test_a_bad_recipe_is_a_usage_error(tmp_path: Path) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE.replace("openai-responses", "soap"))
    code, output = invoke("--recipe", str(recipe))
    assert code == 2 and "custom_harnesses.bare.api" in output


def test_every_builtin_declares_its_api_and_quirks_that_name_real_code() -> None:
    """Each quirk line cites `module.function` (or a module) under polar_cli/translate: the table follows the code."""
    for name in ("claude-code", "codex", "qwen-code", "gemini-cli", "pi"):
        assert ADAPTERS[name].api is not None and ADAPTERS[name].quirks, name
    for adapter in ADAPTERS.values():
        for quirk in adapter.quirks:
            cited = re.findall(r"\((\w+)(?:\.(\w+))?\)$", quirk)
            assert cited, f"{adapter.name}: {quirk!r} cites no code"
            module_name, function = cited[0]
            module = importlib.import_module(f"polar_cli.translate.{module_name}")
            assert not function or hasattr(module, function), f"{adapter.name}: {module_name}.{function} is gone"
