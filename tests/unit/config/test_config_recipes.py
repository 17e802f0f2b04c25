"""Recipes: the shipped ones load, unknown keys are refused by dotted path, overrides are typed, bad ones exit 2."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer
from pydantic import BaseModel
from typer.testing import CliRunner

from polar_cli.commands.generate import generate
from polar_cli.config import (
    EngineConfig,
    Recipe,
    SGLangConfig,
    apply_override,
    load_recipe,
    parse_recipe,
    recipe_yaml,
)
from polar_cli.errors import ConfigError

RECIPES = Path(__file__).resolve().parents[3] / "recipes"
MINIMAL: dict[str, Any] = {
    "manifest": {"source": "m.jsonl"},
    "harnesses": ["pi"],
    "engine": {"kind": "gold", "tokenizer": "qwen3"},
}


def test_demo_recipe_is_the_cpu_gold_run_over_the_bundled_set() -> None:
    recipe = load_recipe(RECIPES / "demo.yaml")
    assert recipe.name == "demo" and recipe.engine.kind == "gold" and recipe.engine.gpu_count() == 0
    # the manifest path is resolved against the recipe's directory, so any working directory works
    assert Path(recipe.manifest.source) == (RECIPES / "demo" / "instances.jsonl").resolve()
    assert recipe.harnesses == ["pi"] and recipe.output.formats == ["jsonl", "parquet"]
    assert "{problem_statement}" in recipe.instruction


def test_swegym_recipe_launches_sglang_on_eight_gpus_for_five_harnesses() -> None:
    recipe = load_recipe(RECIPES / "swegym-sft.yaml")
    assert recipe.engine.kind == "sglang" and recipe.engine.sglang is not None
    assert recipe.engine.sglang.model_path == "Qwen/Qwen3.5-122B-A10B" and recipe.engine.sglang.tp_size == 8
    assert recipe.engine.gpu_count() == 8
    assert recipe.harnesses == ["claude-code", "codex", "qwen-code", "gemini-cli", "pi"]
    assert recipe.manifest.image_template == "swe-gym"


def test_overrides_are_read_as_yaml_and_validated_again() -> None:
    recipe = parse_recipe(
        MINIMAL,
        [
            "concurrency.run=8",
            "concurrency.ready=0",
            "runtime.cpus=1.5",
            "output.fsync=true",
            "harnesses=[claude, codex]",
            "manifest.limit=null",
            "engine.chat_template_kwargs.enable_thinking=false",
            "instruction=Fix: {problem_statement}",
        ],
    )
    assert recipe.concurrency.run == 8 and recipe.concurrency.ready == 0
    assert recipe.runtime.cpus == 1.5 and recipe.output.fsync is True
    assert recipe.harnesses == ["claude-code", "codex"]  # aliases become the canonical names
    assert recipe.engine.chat_template_kwargs == {"enable_thinking": False}
    assert recipe.instruction == "Fix: {problem_statement}"  # text keys take the value verbatim
    assert parse_recipe(MINIMAL, ["manifest.shard=null", "engine.model=007"]).engine.model == "007"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("concurrency.rnu=3", "unknown key concurrency.rnu (known here: init, run, postrun, ready)"),
        ("attempts.x=1", "attempts takes a value, not sub-keys"),
        ("noequals", "expected dotted.key=value"),
        ("concurrency.run=zero", "concurrency.run: Input should be a valid integer"),
        ("concurrency.run=0", "concurrency.run: Input should be greater than or equal to 1"),
        ("engine.kind=tgi", "engine.kind: Input should be 'gold', 'noop', 'sglang', 'vllm' or 'server'"),
        ("engine.kind=vllm", "engine: kind vllm needs url"),
        ("engine.kind=server", "engine: kind server needs url"),
        ("engine.kind=sglang", "engine: kind sglang needs url (a running server) or the sglang section"),
        ("harnesses=[pi, pi-coding-agent]", "a harness is listed twice"),
        ("harnesses=[crush]", "unknown harness 'crush'"),
        ("instruction=Fix {issue}", "instruction: "),
        ("output.formats=[csv]", "output.formats.0: Input should be 'jsonl' or 'parquet'"),
        ("manifest.repos=[a", "the value is not valid YAML"),
    ],
)
def test_bad_overrides_name_the_key(override: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_recipe(MINIMAL, [override])
    assert message in str(info.value)


def test_unknown_keys_in_a_file_are_refused_with_their_path(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text("manifest: {source: m.jsonl, limt: 3}\nharnesses: [pi]\nengine: {kind: gold, tokenizer: qwen3}\n")
    with pytest.raises(ConfigError, match=r"manifest.limt: unknown key"):
        load_recipe(path)
    path.write_text("harnesses: [pi]\nengine: {kind: gold, tokenizer: qwen3}\n")
    with pytest.raises(ConfigError, match=r"manifest: Field required"):
        load_recipe(path)
    path.write_text("- just a list\n")
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_recipe(path)
    with pytest.raises(ConfigError, match="No such file"):
        load_recipe(tmp_path / "absent.yaml")


def test_gpu_count_and_sglang_defaults() -> None:
    engine = EngineConfig(kind="sglang", sglang=SGLangConfig(model_path="m", tp_size=4, dp_size=2))
    assert engine.gpu_count() == 8
    assert EngineConfig(kind="sglang", gpus=3, sglang=SGLangConfig(model_path="m")).gpu_count() == 3
    assert EngineConfig(kind="vllm", url="http://x:1").gpu_count() == 0
    assert EngineConfig(kind="vllm", url="http://x:1").upstream_dialect() == "vllm"
    assert EngineConfig(kind="server", url="http://x:1", dialect="sglang-legacy").upstream_dialect() == "sglang-legacy"
    # a url means a running server, even with a launch section
    running = EngineConfig(kind="sglang", url="http://x:1", sglang=SGLangConfig(model_path="m", tp_size=8))
    assert not running.launches() and running.gpu_count() == 8
    assert EngineConfig(kind="sglang", sglang=SGLangConfig(model_path="m")).launches()


def test_the_written_recipe_reloads_to_the_same_recipe(tmp_path: Path) -> None:
    recipe = load_recipe(RECIPES / "swegym-sft.yaml", ["concurrency.run=32"])
    path = tmp_path / "again.yaml"
    path.write_text(recipe_yaml(recipe))
    assert load_recipe(path) == recipe


def _models(model: type[BaseModel]) -> list[type[BaseModel]]:
    found = [model]
    for field in model.model_fields.values():
        for candidate in (field.annotation, *getattr(field.annotation, "__args__", ())):
            if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                found += _models(candidate)
    return found


def test_every_recipe_field_is_documented() -> None:
    for model in _models(Recipe):
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no docstring"


def test_apply_override_creates_missing_sections() -> None:
    data: dict[str, Any] = {}
    apply_override(data, "engine.sglang.tp_size=8")
    assert data == {"engine": {"sglang": {"tp_size": 8}}}


def test_the_command_exits_2_on_a_bad_recipe_or_override(tmp_path: Path) -> None:
    app = typer.Typer()
    app.command()(generate)
    runner = CliRunner()
    result = runner.invoke(app, [str(RECIPES / "demo.yaml"), "concurrency.rnu=2", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "unknown key concurrency.rnu" in result.output
    result = runner.invoke(app, [str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2 and "nope.yaml" in result.output
    assert not any(tmp_path.iterdir())  # nothing was started or written


def test_token_in_needs_the_models_tokenizer_and_defaults_to_the_launched_model_dir(tmp_path: Path) -> None:
    from polar_cli.config import EngineConfig

    with pytest.raises(ValueError, match="token_in needs tokenizer"):
        EngineConfig(kind="vllm", url="http://x", token_in=True)
    launched = EngineConfig(kind="sglang", sglang={"model_path": str(tmp_path)}, token_in=True)  # type: ignore[arg-type]
    assert launched.tokenizer_source() == str(tmp_path)
    assert EngineConfig(kind="vllm", url="http://x", token_in=True, tokenizer="qwen3").tokenizer_source() == "qwen3"
    assert EngineConfig(kind="gold", tokenizer="qwen3").reasoning == "reinject"
    with pytest.raises(ValueError, match="reasoning"):
        EngineConfig(kind="gold", tokenizer="qwen3", reasoning="keep")  # type: ignore[arg-type]


def test_eval_network_defaults_to_swebenchs_and_reaches_the_grading_container() -> None:
    from types import SimpleNamespace

    from polar_cli.generate.stages import GenerateStages
    from polar_cli.swe.evaluate import DEFAULT_NETWORK
    from polar_cli.swe.manifest import Instance
    from polar_cli.tasks.kinds import SWE, Grading
    from tests.support.fake_runtime import FakeRuntime, result

    assert parse_recipe(MINIMAL).eval.network == DEFAULT_NETWORK == "bridge"
    recipe = parse_recipe(MINIMAL, ["eval.network=none", "timeouts.eval=30"])
    graded = ">>>>> Applied Patch\n>>>>> Start Test Output\n>>>>> End Test Output\n"  # one container: no error to retry
    runtime = FakeRuntime(lambda name, container: result(graded))
    instance = Instance("o__r-1", "o/r", "a" * 40, "", "", "", (), (), test_cmd="pytest")
    plan = SimpleNamespace(image="img:1", instance=instance, kind=SWE)
    stages = SimpleNamespace(grading=Grading(runtime, recipe, "m"))  # type: ignore[arg-type]
    evaluation = GenerateStages._evaluate(stages, plan, "diff --git a/x b/x\n")  # type: ignore[arg-type]
    assert [spec.network for spec in runtime.specs] == ["none"] and evaluation.network == "none"
    assert runtime.timeouts[-1] == 30
