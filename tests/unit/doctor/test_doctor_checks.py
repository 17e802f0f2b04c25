"""`polar_cli.doctor.checks`: each check against what it asks about, varied for real where it can be (a closed port, a
tmp dir, a CA file, a Python without sglang) and through a fake runtime's image set where it cannot."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import certifi
import pytest

from polar_cli.config import EngineConfig, Recipe, SGLangConfig, load_recipe
from polar_cli.doctor import checks
from polar_cli.doctor.checks import (
    DEFAULT_MIN_FREE_GB,
    base_image_check,
    bundle_check,
    ca_bundle_check,
    disk_check,
    docker_check,
    engine_checks,
    existing_parent,
    instance_image_checks,
    manifest_check,
    min_free_gb,
    sglang_checks,
    sglang_module_check,
    tokenizer_check,
)
from polar_cli.harness import ADAPTERS
from polar_cli.harness.custom import CustomHarnessConfig, custom_adapter
from polar_cli.runtime.bootstrap import BaseRecipe
from polar_cli.runtime.images import harness_image_plan, image_names
from polar_cli.swe.manifest import Instance, load_manifest
from tests.support.fake_runtime import FakeRuntime
from tests.support.sglang_double import SGLangDouble

ROOT = Path(__file__).resolve().parents[3]
DEMO = ROOT / "recipes" / "demo.yaml"
DEMO_MANIFEST = ROOT / "recipes" / "demo" / "instances.jsonl"


def closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ---- Docker and images ---------------------------------------------------------------------------------------------


def test_no_engine_at_docker_host_fails_with_what_to_do(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    check, has_image = docker_check(timeout=2)
    assert check.status == "fail" and has_image is None
    assert str(tmp_path / "no-engine.sock") in check.detail
    assert check.fix is not None and "scripts/setup-docker" in check.fix


def test_bundle_present_missing_buildable_and_missing_unbuildable() -> None:
    pi = harness_image_plan("pi").tag
    runtime = FakeRuntime(images={pi})
    present = bundle_check(ADAPTERS["pi"], runtime.image_exists, build=False)
    assert (present.status, present.detail) == ("ok", pi)
    codex = harness_image_plan("codex").tag
    built_at_start = bundle_check(ADAPTERS["codex"], runtime.image_exists, build=True)
    assert built_at_start.status == "warn" and codex in built_at_start.detail
    cannot = bundle_check(ADAPTERS["codex"], runtime.image_exists, build=False)
    assert cannot.status == "fail" and "build_images is false" in cannot.detail
    assert cannot.fix is not None and "polar images build harness codex" in cannot.fix
    # no recipe needs it: a warning whatever build_images says
    assert bundle_check(ADAPTERS["codex"], runtime.image_exists, build=False, required=False).status == "warn"


def test_custom_bundles_mount_what_their_ref_names() -> None:
    runtime = FakeRuntime(images={"me/agent:1", harness_image_plan("pi").tag})
    none = custom_adapter("bare", CustomHarnessConfig(api="anthropic", argv=["t"], bundle="none"))
    image = custom_adapter("img", CustomHarnessConfig(api="anthropic", argv=["t"], bundle="me/agent:1"))
    gone = custom_adapter("gone", CustomHarnessConfig(api="anthropic", argv=["t"], bundle="me/gone:1"))
    on_codex = custom_adapter("on-codex", CustomHarnessConfig(api="anthropic", argv=["t"], bundle="codex"))
    assert bundle_check(none, runtime.image_exists, build=False).status == "ok"
    assert bundle_check(image, runtime.image_exists, build=False).status == "ok"
    pulled = bundle_check(gone, runtime.image_exists, build=False)
    assert pulled.status == "warn" and pulled.fix == "docker pull me/gone:1"
    # a bundle borrowed from a built-in harness is that harness's image
    borrowed = bundle_check(on_codex, runtime.image_exists, build=False)
    assert borrowed.status == "fail" and harness_image_plan("codex").tag in borrowed.detail


def test_base_image_missing_is_a_warning_and_names_the_override() -> None:
    tag = image_names({}).base(BaseRecipe())
    assert base_image_check(FakeRuntime(images={tag}).image_exists, env={}).status == "ok"
    missing = base_image_check(FakeRuntime(images=set()).image_exists, env={})
    assert missing.status == "warn" and tag in missing.detail and missing.fix == "polar images build base"
    mine = base_image_check(FakeRuntime(images={tag}).image_exists, env={"POLAR_BASE_IMAGE": "me/base:1"})
    assert mine.status == "warn" and "POLAR_BASE_IMAGE=me/base:1" in mine.detail


def demo_instances() -> list[Instance]:
    return load_manifest(DEMO_MANIFEST)


def test_instance_images_one_line_per_image_with_what_the_run_will_do() -> None:
    instances = demo_instances()
    images = sorted({i.image for i in instances if i.image})
    assert len(images) == 3
    runtime = FakeRuntime(images={images[0]})
    found = instance_image_checks(instances, runtime.image_exists, template=None, source="m.jsonl", build=True)
    assert [c.name for c in found] == [f"instance:{image}" for image in images]
    assert [c.status for c in found] == ["ok", "warn", "warn"]
    assert found[1].fix == "polar images build instances m.jsonl"
    cannot = instance_image_checks(instances, runtime.image_exists, template=None, source="m.jsonl", build=False)
    assert [c.status for c in cannot] == ["ok", "fail", "fail"] and "build_images is false" in cannot[1].detail
    # a row without a build spec is pulled by the run, whatever build_images says
    pulled = [dataclasses.replace(i, build=None) for i in instances]
    rows = instance_image_checks(pulled, runtime.image_exists, template=None, source="m.jsonl", build=False)
    assert [c.status for c in rows] == ["ok", "warn", "warn"] and rows[1].fix == f"docker pull {images[1]}"


def test_many_instance_images_are_summed_up_per_state(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checks, "MAX_LISTED_IMAGES", 2)
    instances = [dataclasses.replace(i, image=f"x/{i.instance_id}:1") for i in demo_instances()]
    present = {instances[0].image, instances[1].image}
    found = instance_image_checks(
        instances, FakeRuntime(images={str(p) for p in present}).image_exists, template=None, source="m", build=False
    )
    by_name = {c.name: c for c in found}
    assert set(by_name) == {"instance-images:present", "instance-images:cannot"}
    assert (
        by_name["instance-images:present"].status == "ok"
        and "2 of 9 image(s)" in by_name["instance-images:present"].detail
    )
    assert by_name["instance-images:cannot"].status == "fail" and "7 of 9" in by_name["instance-images:cannot"].detail
    assert "and 4 more" in by_name["instance-images:cannot"].detail


def test_an_image_template_that_does_not_fit_fails() -> None:
    instances = [dataclasses.replace(i, image=None) for i in demo_instances()]
    found = instance_image_checks(instances, FakeRuntime().image_exists, template="x/{nope}", source="m", build=True)
    assert [c.status for c in found] == ["fail"] and "nope" in found[0].detail


def test_the_manifest_check_selects_like_generate_and_fails_on_a_bad_source(tmp_path: Path) -> None:
    recipe = load_recipe(DEMO)
    check, instances = manifest_check(recipe)
    assert check.status == "ok" and len(instances) == 9 and "9 instance(s)" in check.detail
    check, instances = manifest_check(load_recipe(DEMO, [f"manifest.source={tmp_path}/none.jsonl"]))
    assert check.status == "fail" and instances == []
    check, _ = manifest_check(load_recipe(DEMO, ["manifest.instance_ids=[nobody]"]))
    assert check.status == "fail" and "nobody" in check.detail
    check, _ = manifest_check(load_recipe(DEMO, ["manifest.limit=0"]))
    assert check.status == "fail" and "no instance selected" in check.detail


# ---- the engine ----------------------------------------------------------------------------------------------------


def engine(**fields: Any) -> EngineConfig:
    return EngineConfig.model_validate(fields)


def test_gold_and_noop_have_nothing_to_reach() -> None:
    for kind in ("gold", "noop"):
        [check] = engine_checks(engine(kind=kind, tokenizer="qwen3"))
        assert (check.name, check.status) == ("engine", "ok") and kind in check.detail


def test_an_engine_url_on_a_closed_port_fails() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    [check] = engine_checks(engine(kind="vllm", url=url), timeout=2)
    assert check.status == "fail" and "unreachable" in check.detail and url in check.detail
    assert check.fix is not None and "engine.url" in check.fix


def test_a_running_server_answers_with_its_model_and_token_fields() -> None:
    with SGLangDouble(template=None) as up:
        found = engine_checks(engine(kind="sglang", url=up.url + "/v1"), timeout=10)
        assert [(c.name, c.status) for c in found] == [("engine", "ok"), ("engine-tokens", "ok")]
        assert "polar-test-model" in found[0].detail and "sglang" in found[1].detail
        assert up.chat_requests, "the token fields were probed with a real call"
        # tokens=False: reachability and the model only, no sampling
        before = len(up.chat_requests)
        assert [c.name for c in engine_checks(engine(kind="sglang", url=up.url), tokens=False)] == ["engine"]
        assert len(up.chat_requests) == before
    with SGLangDouble(template=None, dialect="vllm") as up:
        found = engine_checks(engine(kind="vllm", url=up.url), timeout=10)
        assert [c.status for c in found] == ["ok", "ok"] and "vllm" in found[1].detail


class _PlainServer(BaseHTTPRequestHandler):
    """An OpenAI-style server that answers chats without token ids, and (``models=False``) has no /v1/models."""

    models = True

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/v1/models" and self.models:
            self._send(200, {"data": [{"id": "plain"}]})
        else:
            self._send(404, {"error": "no route"})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        message = {"role": "assistant", "content": "OK"}
        self._send(200, {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def plain_server() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _PlainServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    _PlainServer.models = True


def test_a_server_without_token_ids_fails_the_token_check(plain_server: ThreadingHTTPServer) -> None:
    url = f"http://127.0.0.1:{plain_server.server_address[1]}"
    found = engine_checks(engine(kind="server", url=url, dialect="vllm"), timeout=10)
    assert [(c.name, c.status) for c in found] == [("engine", "ok"), ("engine-tokens", "fail")]
    assert "model plain" in found[0].detail and found[1].fix is not None and "Token fields" in found[1].fix


def test_a_server_without_a_model_list_needs_engine_model(plain_server: ThreadingHTTPServer) -> None:
    _PlainServer.models = False
    url = f"http://127.0.0.1:{plain_server.server_address[1]}"
    [check] = engine_checks(engine(kind="vllm", url=url), tokens=False)
    assert check.status == "fail" and check.fix is not None and "engine.model" in check.fix
    [named] = engine_checks(engine(kind="vllm", url=url, model="mine"), tokens=False)
    assert named.status == "ok" and "model mine" in named.detail


def test_a_launched_sglang_needs_a_python_that_imports_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True)
    bare = tmp_path / "venv" / "bin" / "python"
    monkeypatch.delenv("PYTHONPATH", raising=False)
    missing = sglang_module_check(str(bare))
    assert missing.status == "fail" and "has no sglang module" in missing.detail
    # the same Python finds a module named sglang once it is on its path
    (tmp_path / "mods" / "sglang").mkdir(parents=True)
    (tmp_path / "mods" / "sglang" / "__init__.py").write_text("")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "mods"))
    found = sglang_module_check(str(bare))
    assert found.status == "ok" and "sglang ? importable" in found.detail
    gone = sglang_module_check(str(tmp_path / "no-python"))
    assert gone.status == "fail" and "cannot run" in gone.detail


def test_a_launched_sglang_with_a_launcher_and_a_model_path(tmp_path: Path) -> None:
    settings = SGLangConfig(model_path=str(tmp_path), launcher=["polar-no-such-launcher"])
    launcher, model = sglang_checks(settings)
    assert launcher.status == "fail" and "polar-no-such-launcher" in launcher.detail
    assert model.status == "ok"
    launcher, model = sglang_checks(SGLangConfig(model_path="org/not-a-dir", launcher=["sh"]))
    assert launcher.status == "ok" and model.status == "warn"
    # kind sglang without url: these checks, nothing reached
    config = engine(kind="sglang", sglang={"model_path": str(tmp_path), "launcher": ["sh"]})
    assert [c.name for c in engine_checks(config)] == ["sglang", "sglang-model"]


def test_the_tokenizer_and_template_load_and_render(tmp_path: Path) -> None:
    ok = tokenizer_check(engine(kind="gold", tokenizer="qwen3"))
    assert ok.status == "ok" and "<|im_end|>" in ok.detail
    empty = tokenizer_check(engine(kind="gold", tokenizer=str(tmp_path)))
    assert empty.status == "fail" and str(tmp_path) in empty.detail
    broken = tmp_path / "broken.jinja"
    broken.write_text("{% for m in messages %}{{ m.content }")
    bad = tokenizer_check(engine(kind="gold", tokenizer="qwen3", chat_template=str(broken)))
    assert bad.status == "fail" and bad.fix is not None and "chat_template" in bad.fix
    assert tokenizer_check(engine(kind="vllm", url="http://127.0.0.1:1")).detail.startswith("none configured")


# ---- the host ------------------------------------------------------------------------------------------------------


def test_disk_below_the_threshold_fails_and_above_passes(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "not-yet"
    assert existing_parent(run_dir) == tmp_path
    above = disk_check(run_dir, threshold_gb=10**9)
    assert above.status == "fail" and "min_free_gb=1e+09" in above.detail
    assert disk_check(run_dir, threshold_gb=0).status == "ok"

    def unreadable(path: Path) -> Any:
        raise PermissionError(13, "denied")

    assert disk_check(run_dir, 0, usage=unreadable).status == "fail"


def test_min_free_gb_is_the_recipe_field_else_the_default() -> None:
    recipe = load_recipe(DEMO)
    assert min_free_gb(None) == DEFAULT_MIN_FREE_GB == 5.0
    assert min_free_gb(recipe) == getattr(recipe.runtime, "min_free_gb", DEFAULT_MIN_FREE_GB)
    stand_in: Any = SimpleNamespace(runtime=SimpleNamespace(min_free_gb=3))
    assert min_free_gb(stand_in) == 3.0
    assert isinstance(recipe, Recipe)


def test_the_ca_bundle_builds_carry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good = ca_bundle_check({"SSL_CERT_FILE": certifi.where()})
    assert good.status == "ok" and "host-ca.crt" in good.detail
    empty = tmp_path / "empty.pem"
    empty.write_bytes(b"")
    assert ca_bundle_check({"SSL_CERT_FILE": str(empty)}).status == "fail"
    assert ca_bundle_check({"SSL_CERT_FILE": str(tmp_path / "absent.pem")}).status == "fail"
    garbage = tmp_path / "garbage.pem"
    garbage.write_bytes(b"-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
    assert ca_bundle_check({"SSL_CERT_FILE": str(garbage)}).status == "fail"
    # the system bundle absent, nothing asked for: builds fall back to the base image's own, a warning
    import polar_cli.runtime.images as images

    monkeypatch.setattr(images, "HOST_CA_BUNDLE", tmp_path / "absent.crt")
    assert ca_bundle_check({}).status == "warn"


def test_the_relay_of_gateway_only_sandboxes_is_checked() -> None:
    from polar_cli.doctor.checks import relay_check
    from polar_cli.runtime.images import relay_image_plan

    tag = relay_image_plan().tag
    assert relay_check(FakeRuntime(images={tag}).image_exists, build=False, required=True).status == "ok"
    missing = FakeRuntime(images=set()).image_exists
    assert relay_check(missing, build=True, required=True).status == "warn"
    failed = relay_check(missing, build=False, required=True)
    assert failed.status == "fail" and tag in failed.detail and failed.fix == "bash scripts/setup-docker"
