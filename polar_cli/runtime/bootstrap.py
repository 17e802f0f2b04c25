"""The base image without a registry: debootstrap a minimal Debian root from the host's mirror, then `docker import`.

Nothing here names a mirror: the host's apt sources say where Debian lives (plain HTTP works from containers where
HTTPS is re-signed), and ``POLAR_DEBIAN_MIRROR`` overrides it. The recipe (suite, packages, image settings) is hashed
into the image tag, so a second bootstrap with the same recipe is a no-op and a changed recipe builds a new tag.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from polar_cli.errors import RuntimeFailure

APT_SOURCES = (Path("/etc/apt/sources.list"), Path("/etc/apt/sources.list.d"))


@dataclass(frozen=True, slots=True)
class BaseRecipe:
    """Everything that decides the base image's content; its digest is the image tag."""

    suite: str = "bookworm"
    variant: str = "minbase"
    # git for patch collection, procps so harnesses can list processes, util-linux is essential (setsid for exec)
    packages: tuple[str, ...] = ("ca-certificates", "git", "procps", "patch", "xz-utils")
    changes: tuple[str, ...] = (
        "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "ENV LANG=C.UTF-8",
        'CMD ["/bin/bash"]',
    )
    # bump when the bootstrap steps below change in a way the fields above do not show
    steps_version: int = 1

    def digest(self) -> str:
        blob = json.dumps(
            [self.suite, self.variant, self.packages, self.changes, self.steps_version], separators=(",", ":")
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


@dataclass(frozen=True, slots=True)
class AptSource:
    uri: str
    suites: tuple[str, ...]
    components: tuple[str, ...]


def parse_one_line_sources(text: str) -> list[AptSource]:
    """`deb [opts] URI SUITE COMPONENT...` lines (sources.list and *.list)."""
    out = []
    for raw in text.splitlines():
        words = raw.split("#", 1)[0].split()
        if len(words) < 3 or words[0] != "deb":
            continue
        words = words[1:]
        if words[0].startswith("["):
            while words and not words[0].endswith("]"):
                words = words[1:]
            words = words[1:]
        if len(words) >= 2:
            out.append(AptSource(words[0], (words[1],), tuple(words[2:])))
    return out


def parse_deb822_sources(text: str) -> list[AptSource]:
    """Deb822 stanzas (*.sources): Types / URIs / Suites / Components, blank-line separated."""
    out: list[AptSource] = []
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line or line[:1].isspace():
                continue
            key, _, value = line.partition(":")
            fields[key.strip().lower()] = value.strip()
        if "deb" not in fields.get("types", "").split() or fields.get("enabled", "yes").lower() == "no":
            continue
        suites = tuple(fields.get("suites", "").split())
        components = tuple(fields.get("components", "").split())
        out.extend(AptSource(uri, suites, components) for uri in fields.get("uris", "").split())
    return out


def host_apt_sources(paths: Iterable[Path] = APT_SOURCES) -> list[AptSource]:
    sources: list[AptSource] = []
    for path in paths:
        files = sorted(path.iterdir()) if path.is_dir() else [path]
        for file in files:
            if not file.is_file():
                continue
            if file.suffix == ".sources":
                sources.extend(parse_deb822_sources(file.read_text(errors="replace")))
            elif file.suffix == ".list":
                sources.extend(parse_one_line_sources(file.read_text(errors="replace")))
    return sources


def pick_debian_mirror(sources: Iterable[AptSource], suite: str) -> str | None:
    """The archive to bootstrap `suite` from: a source that lists it with `main`, else one that looks like Debian's."""
    candidates = [s for s in sources if "main" in s.components and not s.uri.rstrip("/").endswith("-security")]
    for source in candidates:
        if suite in source.suites:
            return source.uri
    for source in candidates:
        # another release of the same archive serves our suite too (e.g. a trixie host bootstrapping bookworm)
        if source.uri.rstrip("/").endswith("/debian") and any("-" not in s for s in source.suites):
            return source.uri
    return None


def debian_mirror(suite: str) -> str:
    """The mirror to bootstrap from: ``POLAR_DEBIAN_MIRROR``, else read from the host's apt sources."""
    if override := os.environ.get("POLAR_DEBIAN_MIRROR"):
        return override
    mirror = pick_debian_mirror(host_apt_sources(), suite)
    if mirror is None:
        raise RuntimeFailure(
            f"no Debian mirror for {suite!r} in the host's apt sources; set POLAR_DEBIAN_MIRROR to an archive URL"
        )
    return mirror


def bootstrap_rootfs(recipe: BaseRecipe, mirror: str, workdir: Path, log: Callable[[str], None]) -> Path:
    """Run debootstrap into workdir/root and pack it as workdir/root.tar; returns the tarball's path."""
    if shutil.which("debootstrap") is None:
        raise RuntimeFailure("debootstrap is not installed (apt-get install debootstrap), or run scripts/setup-docker")
    if os.geteuid() != 0:
        raise RuntimeFailure("bootstrapping the base image needs root (debootstrap)")
    root = workdir / "root"
    argv = [
        "debootstrap",
        f"--variant={recipe.variant}",
        f"--include={','.join(recipe.packages)}",
        recipe.suite,
        str(root),
        mirror,
    ]
    log(f"$ {' '.join(argv)}")
    _run(argv, log)
    _trim_rootfs(root)
    tarball = workdir / "root.tar"
    _run(["tar", "-C", str(root), "--numeric-owner", "--xattrs", "-cf", str(tarball), "."], log)
    return tarball


def _trim_rootfs(root: Path) -> None:
    # downloaded .debs and package lists are build leftovers; derived builds run apt-get update themselves
    for pattern in ("var/cache/apt/archives/*.deb", "var/lib/apt/lists/*_*", "var/log/*.log"):
        for path in root.glob(pattern):
            path.unlink(missing_ok=True)
    conf = root / "etc/apt/apt.conf.d/99polar"
    conf.write_text('APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n')


def _run(argv: list[str], log: Callable[[str], None]) -> None:
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.splitlines()[-30:])
        raise RuntimeFailure(f"{argv[0]} failed with exit {proc.returncode}:\n{tail}")
    if proc.stdout.strip():
        log(proc.stdout.strip().splitlines()[-1])


def scratch_dir() -> tempfile.TemporaryDirectory[str]:
    # /var/tmp: debootstrap needs a filesystem without noexec/nodev, which /tmp sometimes is
    base = os.environ.get("POLAR_BUILD_TMP", "/var/tmp")
    return tempfile.TemporaryDirectory(prefix="polar-bootstrap-", dir=base if Path(base).is_dir() else None)
