"""Custom harnesses from a recipe: one-pass placeholder substitution, field-naming validation, bundles to mount."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from polar_cli.config import parse_recipe
from polar_cli.errors import ConfigError
from polar_cli.harness.base import BundleRef, Wiring
from polar_cli.harness.custom import CustomHarnessConfig, custom_adapter, load_harness_config, substitute
from polar_cli.harness.session import SessionSpec, mount_bundle
from tests.support.fake_runtime import FakeRuntime

WIRING = Wiring("http://127.0.0.1:8123/", "sk-polar-secret", None)
# quotes, command substitution, backticks, newlines, and every placeholder spelled inside it: none may be expanded
HOSTILE = (
    "-x 'single' \"double\" $(touch /tmp/pwned) `id` ; |\n"
    "second line {model} {session_key} {gateway_url} {{workdir}} {instruction} {} {unknown} ${HOME} \\ end"
)
MINIMAL: dict[str, Any] = {"manifest": {"source": "m.jsonl"}, "engine": {"kind": "gold", "tokenizer": "qwen3"}}


def harness(**fields: Any) -> dict[str, Any]:
    return {"api": "openai-chat", "argv": ["python3", "/root/h.py", "{instruction}"], **fields}


def recipe_with(custom: dict[str, Any], names: list[str] | None = None) -> Any:
    return parse_recipe({**MINIMAL, "custom_harnesses": custom, "harnesses": names or list(custom)})


def launch_of(**fields: Any) -> Any:
    adapter = custom_adapter("mine", CustomHarnessConfig.model_validate(harness(**fields)))
    return adapter.launch(HOSTILE, WIRING, "/testbed")


def test_the_instruction_is_one_argv_element_and_never_substituted_again() -> None:
    launch = launch_of(argv=["tool", "{instruction}", "--prompt={instruction}", "--model={model}"])
    assert launch.argv == ("tool", HOSTILE, f"--prompt={HOSTILE}", "--model=polar-model")
    # the key never reaches argv even though the instruction spells its placeholder
    assert all("sk-polar-secret" not in a for a in launch.argv)


def test_env_files_and_stdin_are_substituted_as_text_in_one_pass() -> None:
    launch = launch_of(
        env={"KEY": "{session_key}", "BASE": "{gateway_url}/v1", "TASK": "{instruction}"},
        files={"{workdir}/.mine/cfg.json": '{"url": "{gateway_url}", "nested": {"a": {"b": 1}}}'},
        stdin="task: {instruction}",
        workdir="{workdir}/sub",
    )
    assert launch.env["KEY"] == "sk-polar-secret"
    assert launch.env["BASE"] == "http://127.0.0.1:8123/v1"  # the root without its trailing slash
    assert launch.env["TASK"] == HOSTILE and launch.env["HOME"] == "/root"
    # braces that are not {identifier} (JSON) stay as written
    assert launch.files == {"/testbed/.mine/cfg.json": b'{"url": "http://127.0.0.1:8123", "nested": {"a": {"b": 1}}}'}
    assert launch.stdin == f"task: {HOSTILE}".encode()
    assert launch.workdir == "/testbed/sub"


def test_doubled_braces_write_a_literal_placeholder_and_other_braces_stay() -> None:
    values = {"model": "m"}
    assert substitute("${{HOME}} {{model}} {model} f() { x; } {a,b} {1..3} {}", values) == (
        "${HOME} {model} m f() { x; } {a,b} {1..3} {}"
    )
    assert substitute("{model}", {"model": "{model}{model}"}) == "{model}{model}"


def test_a_run_model_name_wins_over_the_default() -> None:
    adapter = custom_adapter("mine", CustomHarnessConfig.model_validate(harness(argv=["t", "{model}"], model="d")))
    assert adapter.launch("x", WIRING).argv == ("t", "d")
    assert adapter.launch("x", Wiring("http://g", "k", "served")).argv == ("t", "served")


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"argv": ["t", "{modle}"]}, "custom_harnesses.mine.argv: [1]: unknown placeholder {modle}"),
        (
            {"argv": ["t", "--key={session_key}"]},
            "custom_harnesses.mine.argv: [1]: {session_key} may only appear in env",
        ),
        ({"argv": []}, "custom_harnesses.mine.argv: List should have at least 1 item"),
        ({"env": {"X": "{nope}"}}, "custom_harnesses.mine.env: X: unknown placeholder {nope}"),
        ({"env": {"1X": "v"}}, "custom_harnesses.mine.env: '1X': not an environment variable name"),
        ({"files": {"rel/path": "x"}}, "custom_harnesses.mine.files: 'rel/path': not an absolute path"),
        ({"files": {"/a": "{session_key}"}}, "custom_harnesses.mine.files: '/a': {session_key} may only appear in env"),
        ({"files": {"/{model}/a": "x"}}, "custom_harnesses.mine.files: '/{model}/a' (path): unknown placeholder"),
        ({"api": "soap"}, "custom_harnesses.mine.api: Input should be 'anthropic', 'openai-chat'"),
        ({"artifacts": ["logs"]}, "custom_harnesses.mine.artifacts: [0]: not an absolute path ('logs'"),
        ({"droppings": ["../x"]}, "custom_harnesses.mine.droppings: [0]: '../x' must be a path inside the workdir"),
        ({"workdir": "sub"}, "custom_harnesses.mine.workdir: workdir: not an absolute path ('sub'"),
        ({"bundle": "two words"}, "custom_harnesses.mine.bundle: 'two words': not a harness name or an image name"),
        ({"argvv": ["t"]}, "custom_harnesses.mine.argvv: unknown key"),
    ],
)
def test_validation_errors_name_the_field(fields: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        recipe_with({"mine": harness(**fields)})
    assert expected in str(err.value)


def test_harness_names_are_checked_against_builtins_and_definitions() -> None:
    with pytest.raises(ConfigError, match=r"custom_harnesses: 'pi': a built-in harness has this name"):
        recipe_with({"pi": harness()})
    with pytest.raises(ConfigError, match=r"custom_harnesses: 'My Tool': a harness name is lowercase"):
        recipe_with({"My Tool": harness()})
    with pytest.raises(ConfigError, match=r"harnesses: unknown harness 'other'; known: claude-code, .*mine"):
        recipe_with({"mine": harness()}, ["mine", "other"])
    # a broken definition is reported once, not again as an unknown name in harnesses
    with pytest.raises(ConfigError) as err:
        recipe_with({"mine": harness(api="soap")})
    assert "harnesses:" not in str(err.value).replace("custom_harnesses", "")


def test_a_recipe_runs_custom_and_builtin_harnesses_side_by_side() -> None:
    recipe = recipe_with(
        {"mine": harness(bundle="pi"), "img": harness(bundle="me/agent:1"), "bare": harness(bundle="none")},
        ["claude", "mine", "img", "bare"],
    )
    adapters = recipe.adapters()
    assert [a.name for a in adapters] == ["claude-code", "mine", "img", "bare"]
    assert [a.bundle_ref for a in adapters] == [
        None,
        BundleRef("harness", "pi"),
        BundleRef("image", "me/agent:1"),
        BundleRef("none"),
    ]
    assert adapters[1].api == "openai_chat" and adapters[1].shell_tool == "bash"
    runtime = FakeRuntime()
    mounted = [mount_bundle(runtime, a) for a in adapters]
    assert mounted == ["bundle-claude-code", "bundle-pi", "bundle-image-me/agent:1", None]


def test_a_session_without_a_bundle_mounts_nothing() -> None:
    adapter = recipe_with({"bare": harness()}).adapters()[0]
    spec = SessionSpec(session_id="s", harness=adapter, image="img:1", instruction="x", bundle=None)
    assert spec.container_spec().volumes_from == ()
    assert SessionSpec("s", adapter, "img:1", "x", bundle="b").container_spec().volumes_from == ("b",)


def test_an_override_reaches_a_custom_harness() -> None:
    data = {**MINIMAL, "custom_harnesses": {"mine": harness()}, "harnesses": ["mine"]}
    recipe = parse_recipe(data, ["custom_harnesses.mine.model=other"])
    assert recipe.custom_harnesses["mine"].model == "other"


def test_a_harness_config_file_is_a_mapping_or_a_recipe(tmp_path: Path) -> None:
    plain = tmp_path / "h.yaml"
    plain.write_text("mine:\n  api: google\n  argv: [t, '{instruction}']\n")
    assert load_harness_config(str(plain))["mine"].api == "google"
    recipe = tmp_path / "r.yaml"
    recipe.write_text("harnesses: [mine]\ncustom_harnesses:\n  mine: {api: anthropic, argv: [t]}\n")
    assert load_harness_config(str(recipe))["mine"].api == "anthropic"
    bad = tmp_path / "bad.yaml"
    bad.write_text("mine:\n  api: anthropic\n  argv: [t, '{x}']\n")
    with pytest.raises(ConfigError, match=rf"harness config {bad}: mine\.argv: \[1\]: unknown placeholder {{x}}"):
        load_harness_config(str(bad))
    with pytest.raises(ConfigError, match=r"(?i)no such file"):
        load_harness_config(str(tmp_path / "absent.yaml"))
