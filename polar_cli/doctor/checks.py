"""One function per `polar doctor` check, each returning `Check`s: what is installed, reachable and missing.

The checks ask the world through small seams so tests can vary what the real thing cannot: whether an image is
present is one callable (``image -> bool``, a Docker engine's or a fake runtime's `image_exists`), the disk is
`shutil.disk_usage`, the CA bundle a path from the environment. Nothing here builds, pulls or launches anything.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import ssl
import subprocess
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from polar_cli.errors import PolarError, TokenCaptureError, UpstreamError

if TYPE_CHECKING:
    from polar_cli.config import EngineConfig, Recipe, SGLangConfig
    from polar_cli.gateway.upstream_client import UpstreamClient
    from polar_cli.harness.base import HarnessAdapter
    from polar_cli.swe.manifest import Instance

Status = Literal["ok", "warn", "fail"]
# image name -> present in the engine
HasImage = Callable[[str], bool]


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    status: Status
    detail: str
    # what to do about it; None when there is nothing to do
    fix: str | None = None

    def to_dict(self) -> dict[str, str | None]:
        return {"name": self.name, "status": self.status, "detail": self.detail, "fix": self.fix}


# below this much free space (GB, 10^9 bytes) in the run directory's file system a run must not start
# (`runtime.min_free_gb` in a recipe)
DEFAULT_MIN_FREE_GB = 5.0
DOCKER_TIMEOUT = 5.0
# connecting to the engine URL; one tiny chat call (the token-field probe) may take longer on a loaded server
CONNECT_TIMEOUT = 5.0
PROBE_TIMEOUT = 30.0
SGLANG_IMPORT_TIMEOUT = 60.0
# more distinct instance images than this: one line per state (present, built at start, ...) instead of one each
MAX_LISTED_IMAGES = 12
PEM_BEGIN = b"-----BEGIN CERTIFICATE-----"


def min_free_gb(recipe: Recipe | None) -> float:
    """The recipe's ``runtime.min_free_gb``, else `DEFAULT_MIN_FREE_GB`."""
    return DEFAULT_MIN_FREE_GB if recipe is None else recipe.runtime.min_free_gb


# ---- Docker and images ---------------------------------------------------------------------------------------------


def docker_check(timeout: float = DOCKER_TIMEOUT) -> tuple[Check, HasImage | None]:
    """Whether a Docker engine answers, and its version; with it, ``image -> present`` against that engine."""
    from polar_cli.runtime.docker import connect
    from polar_cli.runtime.images import image_exists

    where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        client = connect(timeout=timeout)
        version: Mapping[str, Any] = client.version()
    except PolarError as exc:
        # connect's message already says where and what to do; the cause is the part worth one line
        reason = exc.__cause__ or exc
        return Check("docker", "fail", f"no Docker engine answers at {where}: {reason}", FIX_DOCKER), None
    except Exception as exc:  # the docker SDK raises requests' and its own errors alike
        return Check("docker", "fail", f"the engine at {where} answered a ping, not `version`: {exc}", FIX_DOCKER), None
    detail = f"Docker {version.get('Version', '?')} (API {version.get('ApiVersion', '?')}) at {where}"
    return Check("docker", "ok", detail), lambda image: image_exists(client, image)


FIX_DOCKER = "start the engine (dockerd), or run scripts/setup-docker to install and start one; DOCKER_HOST names it"


def base_image_check(has_image: HasImage, env: Mapping[str, str] | None = None) -> Check:
    """The base image every Polar image builds FROM. Missing is a warning: only a build needs it, and a build
    bootstraps it, unless ``POLAR_BASE_IMAGE`` names one the engine must already have."""
    from polar_cli.runtime.bootstrap import BaseRecipe
    from polar_cli.runtime.images import image_names

    names = image_names(env)
    tag = names.base(BaseRecipe())
    if has_image(tag):
        return Check("base-image", "ok", tag)
    if names.base_override:
        return Check(
            "base-image", "warn", f"POLAR_BASE_IMAGE={tag} is not in the engine", "docker pull or docker load it"
        )
    return Check("base-image", "warn", f"{tag} missing: bootstrapped (minutes) when an image must be built", FIX_BASE)


FIX_BASE = "polar images build base"


def bundle_check(adapter: HarnessAdapter, has_image: HasImage, *, build: bool, required: bool = True) -> Check:
    """The bundle image a harness's sessions mount (as `harness.session.mount_bundle` picks it).

    Missing: a failure when the run needs it and cannot build it (``runtime.build_images`` false); a warning when the
    run will build it first (minutes), when it is a prebuilt image the run will pull, or when no run needs it
    (``required`` false: the listing without a recipe)."""
    from polar_cli.runtime.images import harness_image_plan

    name = f"bundle:{adapter.name}"
    ref = adapter.bundle_ref
    if ref is not None and ref.kind == "none":
        return Check(name, "ok", "nothing mounted (the command is in the instance image)")
    if ref is not None and ref.kind == "image":
        if has_image(ref.name):
            return Check(name, "ok", ref.name)
        return Check(name, "warn", f"{ref.name} missing: pulled when the run starts", f"docker pull {ref.name}")
    own = ref.name if ref is not None else adapter.name
    try:
        tag = harness_image_plan(own).tag
    except (PolarError, OSError, ValueError) as exc:
        return Check(name, "fail", f"no bundle build inputs for {own}: {exc}", "see harness_images/README.md")
    if has_image(tag):
        return Check(name, "ok", tag)
    fix = f"polar images build harness {own}"
    if not required:
        return Check(name, "warn", f"{tag} missing", fix)
    if build:
        return Check(name, "warn", f"{tag} missing: built (minutes) when the run starts", fix)
    return Check(
        name, "fail", f"{tag} missing and runtime.build_images is false", f"{fix}, or runtime.build_images=true"
    )


FIX_RELAY = "bash scripts/setup-docker"


def relay_check(has_image: HasImage, *, build: bool, required: bool) -> Check:
    """The relay a ``runtime.network: gateway-only`` sandbox runs (`runtime.images.relay_image_plan`). Missing: a
    failure when the run needs it and cannot build it, else a warning (built in seconds at the first INIT)."""
    from polar_cli.runtime.images import relay_image_plan

    tag = relay_image_plan().tag
    if has_image(tag):
        return Check("relay", "ok", f"{tag} (gateway-only sandboxes)")
    if required and not build:
        return Check("relay", "fail", f"{tag} missing and runtime.build_images is false", FIX_RELAY)
    return Check(
        "relay", "warn", f"{tag} missing: built at the first gateway-only session", "bash scripts/setup-docker"
    )


def bundle_checks(
    adapters: Iterable[HarnessAdapter], has_image: HasImage, *, build: bool, required: bool = True
) -> list[Check]:
    return [bundle_check(a, has_image, build=build, required=required) for a in adapters]


def manifest_check(recipe: Recipe) -> tuple[Check, list[Instance]]:
    """The instances the recipe's manifest and selection choose (as `polar generate` selects them)."""
    from polar_cli.tasks.select import select_instances

    source = recipe.manifest.source
    try:
        instances = select_instances(recipe)
    except (PolarError, OSError) as exc:
        return Check("manifest", "fail", str(exc), "fix manifest.source or the selection (manifest.*)"), []
    return Check("manifest", "ok", f"{len(instances)} instance(s) selected from {source}"), instances


# what the run does about an instance image: nothing, build it, pull it, or fail (it may not build)
ImageState = Literal["present", "build", "pull", "cannot"]


class _InstanceImage(NamedTuple):
    image: str
    instances: int
    state: ImageState


_STATE_STATUS: dict[ImageState, Status] = {"present": "ok", "build": "warn", "pull": "warn", "cannot": "fail"}


def instance_image_checks(
    instances: Iterable[Instance], has_image: HasImage, *, template: str | None, source: str, build: bool
) -> list[Check]:
    """The images the selected instances run in. Missing: built at start from the manifest's build spec when
    ``build`` (warning), pulled at start when the row has no build spec (warning: only the pull can tell), a failure
    when it has one and ``runtime.build_images`` is false. Beyond `MAX_LISTED_IMAGES` images, one line per state."""
    from polar_cli.swe.images import instance_image

    counts: dict[str, int] = {}
    buildable: set[str] = set()
    for instance in instances:
        try:
            image = instance_image(instance, template)
        except PolarError as exc:
            return [Check("instance-images", "fail", str(exc), "give each row an image, or manifest.image_template")]
        counts[image] = counts.get(image, 0) + 1
        if instance.build is not None:
            buildable.add(image)
    rows = []
    for image in sorted(counts):
        if has_image(image):
            state: ImageState = "present"
        elif image not in buildable:
            state = "pull"
        else:
            state = "build" if build else "cannot"
        rows.append(_InstanceImage(image, counts[image], state))
    if len(rows) <= MAX_LISTED_IMAGES:
        return [
            _image_line(f"instance:{r.image}", r.state, f"{r.instances} instance(s)", [r.image], source) for r in rows
        ]
    by_state: dict[ImageState, list[_InstanceImage]] = {}
    for r in rows:
        by_state.setdefault(r.state, []).append(r)
    lines = []
    for state, group in by_state.items():
        shown = ", ".join(r.image for r in group[:3]) + (f" and {len(group) - 3} more" if len(group) > 3 else "")
        what = f"{len(group)} of {len(rows)} image(s) ({sum(r.instances for r in group)} instance(s)): {shown}"
        lines.append(_image_line(f"instance-images:{state}", state, what, [r.image for r in group], source))
    return lines


def _image_line(name: str, state: ImageState, what: str, images: list[str], source: str) -> Check:
    status = _STATE_STATUS[state]
    if state == "present":
        return Check(name, status, f"present, {what}")
    if state == "build":
        return Check(name, status, f"missing, {what}: built from the manifest when the run starts", _fix_build(source))
    if state == "pull":
        first = images[0]
        return Check(name, status, f"missing, {what}: pulled when the run starts", f"docker pull {first}")
    return Check(
        name,
        status,
        f"missing, {what}, and runtime.build_images is false",
        f"{_fix_build(source)}, or runtime.build_images=true",
    )


def _fix_build(source: str) -> str:
    return f"polar images build instances {source}"


# ---- the engine ----------------------------------------------------------------------------------------------------


def engine_checks(config: EngineConfig, *, tokens: bool = True, timeout: float = PROBE_TIMEOUT) -> list[Check]:
    """The engine the recipe names: nothing to reach for gold/noop; a launched SGLang's module (never launched here);
    a server by URL reachable, its model, and (``tokens``) the token ids it returns, with `gateway.probe`'s own
    probe. Runs its own event loop: call it from synchronous code."""
    if config.kind in ("gold", "noop"):
        return [Check("engine", "ok", f"{config.kind}: scripted in process, nothing to reach")]
    if config.launches():
        assert config.sglang is not None  # checked by the recipe model
        return sglang_checks(config.sglang)
    if config.urls is not None:
        return asyncio.run(_pool_checks(config, tokens=tokens, timeout=timeout))
    assert config.url is not None  # checked by the recipe model
    return asyncio.run(_url_checks(config, config.url, tokens=tokens, timeout=timeout))[0]


async def _pool_checks(config: EngineConfig, *, tokens: bool, timeout: float) -> list[Check]:
    """``engine.urls``: each server's lines, named ``engine[i]`` and ``engine-tokens[i]``; then whether they all serve
    one model (when the recipe does not name it)."""
    from dataclasses import replace

    found = await asyncio.gather(
        *(_url_checks(config, url, tokens=tokens, timeout=timeout, field="engine.urls") for url in config.server_urls())
    )
    checks = []
    for i, (url, (lines, _model)) in enumerate(zip(config.server_urls(), found, strict=True)):
        for check in lines:
            detail = check.detail if url in check.detail else f"{url}: {check.detail}"
            checks.append(replace(check, name=f"{check.name}[{i}]", detail=detail))
    models = {url: model for url, (_lines, model) in zip(config.server_urls(), found, strict=True) if model}
    if len(set(models.values())) > 1:
        listed = ", ".join(f"{url}: {model}" for url, model in models.items())
        checks.append(Check("engine-models", "fail", f"the servers serve different models: {listed}", "one model"))
    return checks


async def _url_checks(
    config: EngineConfig, url: str, *, tokens: bool, timeout: float, field: str = "engine.url"
) -> tuple[list[Check], str | None]:
    """The lines of the server at ``url``, and the model it serves (None: not asked, or not found)."""
    from polar_cli.gateway.probe import served_model
    from polar_cli.gateway.upstream_client import UpstreamClient, upstream_root

    root = upstream_root(url)
    try:
        client = UpstreamClient(root, timeout=timeout, connect_timeout=min(timeout, CONNECT_TIMEOUT))
    except ValueError as exc:
        return [Check("engine", "fail", str(exc), f"{field}: http://host:port of the running server")], None
    try:
        try:
            response = await client.get("/v1/models")
        except UpstreamError as exc:
            fix = f"start the {config.kind} server, or point {field} at the running one"
            return [Check("engine", "fail", f"{config.kind} at {root}: {exc}", fix)], None
        served: str | None = None
        if config.model:
            model = config.model
        else:
            try:
                model = served = await served_model(client)
            except UpstreamError as exc:
                detail = f"{config.kind} at {root} answers, but {exc} (HTTP {response.status})"
                return [Check("engine", "fail", detail, "engine.model: the served model's name")], None
        checks = [Check("engine", "ok", f"{config.kind} at {root}, model {model}")]
        if tokens:
            checks.append(await _token_check(client, config, model))
        return checks, served
    finally:
        await client.close()


async def _token_check(client: UpstreamClient, config: EngineConfig, model: str) -> Check:
    from polar_cli.gateway.probe import probe_dialect
    from polar_cli.inference.engines import upstream_options

    try:
        found = await probe_dialect(client, upstream_options(config, model))
    except TokenCaptureError as exc:
        fix = 'the server must return token ids: see docs/upstream.md "Token fields" (engine.dialect for kind server)'
        return Check("engine-tokens", "fail", f"no token ids in the answer: {exc}", fix)
    except UpstreamError as exc:
        return Check(
            "engine-tokens", "fail", f"the probe call failed: {exc}", 'see docs/upstream.md "The start-up probe"'
        )
    return Check("engine-tokens", "ok", f"prompt and response token ids returned (dialect {found.name})")


def sglang_checks(settings: SGLangConfig) -> list[Check]:
    """A launched SGLang: its launcher or Python can import ``sglang`` (nothing is launched), and its model path."""
    import sys

    checks = []
    if settings.launcher:
        program = settings.launcher[0]
        found = shutil.which(program)
        if found:
            checks.append(Check("sglang", "ok", f"launcher {program} at {found}"))
        else:
            checks.append(Check("sglang", "fail", f"launcher {program} not found", "engine.sglang.launcher"))
    else:
        checks.append(sglang_module_check(settings.python or sys.executable))
    if Path(settings.model_path).is_dir():
        checks.append(Check("sglang-model", "ok", f"{settings.model_path} is a local directory"))
    else:
        detail = f"{settings.model_path} is not a local directory: SGLang resolves it as a hub name (network needed)"
        checks.append(Check("sglang-model", "warn", detail, "engine.sglang.model_path: the model's directory"))
    return checks


# run by the Python SGLang would be launched with: the version of an importable sglang, else exit 3
_SGLANG_PROBE = """\
import importlib.metadata, importlib.util, sys
if importlib.util.find_spec("sglang") is None:
    sys.exit(3)
try:
    print(importlib.metadata.version("sglang"))
except importlib.metadata.PackageNotFoundError:
    print("?")
"""


def sglang_module_check(python: str, timeout: float = SGLANG_IMPORT_TIMEOUT) -> Check:
    """Whether ``python`` finds the ``sglang`` module (`inference.launcher` runs ``python -m sglang.launch_server``)."""
    fix = "install sglang into that Python (pip install 'sglang[all]'), or set engine.sglang.python / launcher"
    try:
        done = subprocess.run([python, "-c", _SGLANG_PROBE], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("sglang", "fail", f"cannot run {python}: {exc}", fix)
    if done.returncode == 0:
        return Check("sglang", "ok", f"sglang {done.stdout.strip()} importable by {python}")
    if done.returncode == 3:
        return Check("sglang", "fail", f"{python} has no sglang module", fix)
    tail = (done.stderr.strip().splitlines() or ["?"])[-1]
    return Check("sglang", "fail", f"{python} exited {done.returncode}: {tail}", fix)


def tokenizer_check(config: EngineConfig) -> Check:
    """The tokenizer and chat template load (`inference.tokenizers.ChatTokenizer`) and render a one-message prompt."""
    from polar_cli.inference.tokenizers import ChatTokenizer

    source = config.tokenizer_source()
    if source is None:
        return Check("tokenizer", "ok", "none configured: the server's own template is used, its traits probed")
    template = Path(config.chat_template) if config.chat_template else None
    try:
        tokenizer = ChatTokenizer.load(source, chat_template=template)
        prompt = [{"role": "user", "content": "Say OK."}]
        ids = tokenizer.prompt_ids(prompt, None, config.chat_template_kwargs)
    except Exception as exc:  # a tokenizer or template can fail in any of transformers' or jinja's ways
        fix = "engine.tokenizer: a tokenizer directory or a built-in name (qwen3); engine.chat_template"
        return Check("tokenizer", "fail", f"{source}: {type(exc).__name__}: {exc}", fix)
    detail = (
        f"{source}: template renders, a one-message prompt is {len(ids)} tokens, end of turn {tokenizer.eot_token!r}"
    )
    return Check("tokenizer", "ok", detail)


# ---- the host ------------------------------------------------------------------------------------------------------


def existing_parent(path: Path) -> Path:
    """``path`` or its nearest existing ancestor (a run directory not created yet lives on its parent's disk)."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def disk_check(run_dir: Path, threshold_gb: float, usage: Callable[[Path], Any] = shutil.disk_usage) -> Check:
    """Free space in the run directory's file system against ``threshold_gb`` (``runtime.min_free_gb``)."""
    where = existing_parent(run_dir)
    try:
        free = usage(where).free / 1e9
    except OSError as exc:
        return Check("disk", "fail", f"cannot stat {where}: {exc}", "--out / output.dir: a writable directory")
    if free < threshold_gb:
        detail = f"{free:.1f} GB free for {run_dir}, below runtime.min_free_gb={threshold_gb:g}"
        return Check("disk", "fail", detail, "free space, or put the run (--out / output.dir) on a bigger disk")
    return Check("disk", "ok", f"{free:.1f} GB free for {run_dir} (at least {threshold_gb:g} needed)")


def ca_bundle_check(env: Mapping[str, str] | None = None) -> Check:
    """The host CA bundle every image build copies in as ``host-ca.crt`` (`runtime.images.host_ca_bundle`): without
    it builds trust only the base image's own bundle, and behind a TLS-re-signing proxy npm and pip fail."""
    from polar_cli.runtime.images import CONTEXT_CA_NAME, HOST_CA_BUNDLE

    env = os.environ if env is None else env
    explicit = env.get("SSL_CERT_FILE")
    path = Path(explicit or HOST_CA_BUNDLE)
    origin = "SSL_CERT_FILE" if explicit else "the system bundle"
    # a bundle SSL_CERT_FILE names but builds cannot use is silently skipped by the build: a failure here
    missing: Status = "fail" if explicit else "warn"
    fix = "install ca-certificates, or set SSL_CERT_FILE to your CA bundle (PEM)"
    try:
        data = path.read_bytes()
    except OSError as exc:
        return Check(
            "ca-bundle", missing, f"{origin} {path} unreadable ({exc.strerror}): builds use the base image's", fix
        )
    count = data.count(PEM_BEGIN)
    if count == 0:
        return Check("ca-bundle", missing, f"{origin} {path} holds no PEM certificate", fix)
    try:
        ssl.create_default_context(cafile=str(path))
    except (ssl.SSLError, ValueError) as exc:
        return Check("ca-bundle", "fail", f"{origin} {path} does not load: {exc}", fix)
    return Check("ca-bundle", "ok", f"{path} ({origin}): {count} certificates, copied into builds as {CONTEXT_CA_NAME}")
