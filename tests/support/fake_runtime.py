"""One fake of the runtime seam (`polar_cli.runtime.base`) for every unit test that needs containers.

`FakeContainer.exec` answers from a `Responder` keyed by the name of the script it was asked to run: the harness
session's helper scripts are ``/bin/sh -c SCRIPT NAME ...`` (``polar-base``, ``polar-strip``, ``polar-collect``,
``polar-patch``), the evaluator's are files it wrote (``/tmp/polar-eval/run.sh`` -> ``run.sh``); anything else
is the harness itself (``harness``). `session_responder` plays a harness session's container; evaluation tests pass
their own. Files an exec writes before its command (`runtime.inline.exec_with_files`) are put as `put_files` puts
them, and the exec is the command's.

What it cannot show: Docker's own behaviour (exec framing, timeouts that kill a process tree, labels and sweeps);
the integration tier runs those against a real engine.
"""

from __future__ import annotations

import io
import tarfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from polar_cli.errors import RuntimeFailure
from polar_cli.harness.collect import ARTIFACTS_MEMBER, COLLECT_FILE, PATCH_FILE, PATCH_MEMBER
from polar_cli.runtime.base import RELAY_BIN, ContainerSpec, ExecResult, Log
from polar_cli.runtime.inline import WRITE_FAILED, WRITE_FAILED_EXIT, WRITE_SCRIPT

BASE = "b" * 40
PATCH = "diff --git a/x b/x\n"
ARTIFACT = "root/.pi/agent/sessions/s.jsonl"
# what the history strip script prints (`harness.history`)
STRIPPED = "refs=2\nreflog=3\nremotes=1\nobjects_before=9\nobjects_after=5\nrepacked=1\n"

# what pull() raises by default: a runtime without a registry
NO_REGISTRY = RuntimeFailure("this runtime cannot pull images")
# (script name, the container) -> what the exec returns
Responder = Callable[[str, "FakeContainer"], ExecResult]


def result(output: str | bytes, exit_code: int | None = 0, *, timed_out: bool = False) -> ExecResult:
    data = output.encode() if isinstance(output, str) else output
    return ExecResult(exit_code, data, timed_out, False, 0.01, output_size=len(data))  # as the engine counts it


def script_name(argv: Sequence[str]) -> str:
    if argv and argv[0] == RELAY_BIN:
        return "polar-relay"  # a gateway-only sandbox's relay probe
    if argv[:2] == ["/bin/sh", "-c"] and len(argv) > 3:
        return argv[3]
    if argv and argv[-1].startswith("/tmp/polar-eval/"):
        return argv[-1].rsplit("/", 1)[-1]
    return "harness"


def tar_of(files: Mapping[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def collected_tar(patch: bytes | None, artifacts: Mapping[str, bytes]) -> bytes:
    """What the collect script leaves (`collect.COLLECT_SCRIPT`): the patch, and the artifacts' own tar when any."""
    members = {f"./{ARTIFACTS_MEMBER}": tar_of(artifacts)} if artifacts else {}
    if patch is not None:
        members[f"./{PATCH_MEMBER}"] = patch
    return tar_of(members)


def session_responder(harness: ExecResult, *, fail_patch: bool = False) -> Responder:
    """A harness session's container: a base commit, one artifact, a patch (or a failing ``git diff``), ``harness``."""

    def respond(name: str, container: FakeContainer) -> ExecResult:
        if name == "polar-base":
            return result(f"{BASE}\n")
        if name == "polar-strip":
            return result(STRIPPED)
        if name == "polar-relay":
            return container.relay_probe
        failing = fail_patch or container.fail_patch
        if name == "polar-patch":
            if failing:
                return result("fatal: bad object", 5)
            container.files[PATCH_FILE] = PATCH.encode()
            return result("")
        if name == "polar-collect":
            argv = container.execs[-1][0]
            inline, wanted = int(argv[5]), int(argv[6])  # the most it prints; how many artifact paths it was given
            artifacts = {ARTIFACT: b"{}\n"} if wanted else {}
            tar = container.files[COLLECT_FILE] = collected_tar(None if failing else PATCH.encode(), artifacts)
            if failing:
                return result("fatal: bad object", 5)
            return result(tar if len(tar) <= inline else b"")  # printed when small, as the script does
        return harness

    return respond


@dataclass
class FakeContainer:
    id: str
    spec: ContainerSpec
    respond: Responder
    files: dict[str, bytes] = field(default_factory=dict)
    modes: dict[str, int] = field(default_factory=dict)
    # (argv, timeout, stdin) of every exec, in order
    execs: list[tuple[list[str], float, bytes | None]] = field(default_factory=list)
    removed: int = 0
    # how many of the removals were left to go on in the background (``remove(wait=False)``)
    removed_in_background: int = 0
    fail_patch: bool = False
    fail_put: bool = False
    # what a gateway-only sandbox's relay probe answers
    relay_probe: ExecResult = field(default_factory=lambda: result(""))

    def exec(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        env: Mapping[str, str] | None = None,
        workdir: str | None = None,
        stdin: bytes | None = None,
        output_cap: int = 8 * 1024 * 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> ExecResult:
        argv = list(argv)
        if argv[:4] == ["/bin/sh", "-c", WRITE_SCRIPT, "polar-write"]:  # files first, then the command
            files: dict[str, bytes] = {}
            while argv[4] != "--":
                files[argv[4]] = argv[5].encode()
                argv = argv[:4] + argv[6:]
            if self.fail_put:
                return result(f"{WRITE_FAILED} {next(iter(files))}: disk full\n", WRITE_FAILED_EXIT)
            self.files.update(files)  # (not through put_files: tests count those copies)
            self.modes.update(dict.fromkeys(files, 0o644))
            argv = argv[5:]
        self.execs.append((argv, timeout, stdin))
        return self.respond(script_name(argv), self)

    @property
    def scripts(self) -> list[str]:
        return [script_name(argv) for argv, _, _ in self.execs]

    def put_files(self, files: Mapping[str, bytes], mode: int = 0o644) -> None:
        if self.fail_put:
            raise RuntimeFailure("disk full")
        self.files.update(files)
        self.modes.update(dict.fromkeys(files, mode))

    def get_file(self, path: str) -> bytes:
        try:
            return self.files[path]
        except KeyError:
            raise FileNotFoundError(path) from None

    def remove(self, *, wait: bool = True) -> None:
        self.removed += 1
        self.removed_in_background += not wait


@dataclass
class FakeRuntime:
    respond: Responder = field(default_factory=lambda: session_responder(result("harness output")))
    images: set[str] = field(default_factory=lambda: {"img:1"})
    started: list[FakeContainer] = field(default_factory=list)
    start_delay: float = 0.0
    fail_start: bool = False
    start_error: str = "image gone"
    fail_put: bool = False
    # what pull() raises; None: the pull succeeds and the image is there
    pull_error: Exception | None = NO_REGISTRY
    pulls: list[str] = field(default_factory=list)
    builds: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    tags: list[tuple[str, str]] = field(default_factory=list)
    relays: int = 0

    @property
    def specs(self) -> list[ContainerSpec]:
        return [c.spec for c in self.started]

    @property
    def timeouts(self) -> list[float]:
        return [t for c in self.started for _, t, _ in c.execs]

    def start(self, spec: ContainerSpec) -> FakeContainer:
        time.sleep(self.start_delay)
        if self.fail_start:
            raise RuntimeFailure(self.start_error)
        container = FakeContainer(f"c{len(self.started)}", spec, self.respond, fail_put=self.fail_put)
        self.started.append(container)
        return container

    def image_exists(self, image: str) -> bool:
        return image in self.images

    def pull(self, image: str) -> None:
        self.pulls.append(image)
        if self.pull_error is not None:
            raise self.pull_error
        self.images.add(image)

    def build(
        self, files: Mapping[str, bytes], tag: str, *, buildargs: Mapping[str, str] | None = None, log: Log = print
    ) -> None:
        self.builds.append((tag, dict(buildargs or {})))
        self.images.add(tag)

    def tag(self, source: str, target: str) -> None:
        self.tags.append((source, target))
        self.images.add(target)

    def base_image(self, *, log: Log = print) -> str:
        return "polar/base:test"

    def bundle(self, harness: str, *, build: bool = True, log: Log = print) -> str:
        return f"bundle-{harness}"

    def bundle_image(self, image: str) -> str:
        return f"bundle-image-{image}"

    def relay(self, *, build: bool = True, log: Log = print) -> str:
        self.relays += 1
        return "bundle-relay"

    def sweep(self) -> int:
        return 0

    def close(self) -> None:
        pass

    def __enter__(self) -> FakeRuntime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
