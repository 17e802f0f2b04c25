"""What a harness adapter returns: the files, environment and argv of one headless run, as plain data.

An adapter never touches a container. It answers "given this instruction and this gateway, what must exist and what
must run?"; `session.run_session` does the running. The instruction always travels as one argv element (docker exec
takes an argv array, no shell parses it), so quotes, `$(...)`, newlines and non-ASCII reach the harness byte for byte;
where a harness's own argument parser would misread it (Pi and a leading dash), it goes through stdin instead.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from polar_cli.errors import ConfigError
from polar_cli.harness.quirks import quirks_of
from polar_cli.harness.recovery import Recovery
from polar_cli.translate.codec import ApiName

BUNDLE_ROOT = "/opt/polar/harness"
HOME = "/root"
# Linux caps one argv string at 128 KiB (MAX_ARG_STRLEN); keep a margin for the rest of argv and the environment.
MAX_INSTRUCTION_BYTES = 120 * 1024


@dataclass(frozen=True, slots=True)
class Wiring:
    """How a harness reaches Polar: the gateway root URL (no /v1) and the session key it sends as its API key."""

    gateway_url: str
    session_key: str
    # the model name the harness puts in its requests; None: the adapter's default (the gateway serves its own model)
    model: str | None = None


@dataclass(frozen=True, slots=True)
class Launch:
    """One headless run of a harness, ready to execute."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    # absolute path in the container -> content, written before the run
    files: Mapping[str, bytes]
    workdir: str
    # files and directories copied out after the run (the harness's own logs and transcripts)
    artifacts: tuple[str, ...]
    # git pathspecs (relative to workdir) the harness writes itself: kept out of the patch
    droppings: tuple[str, ...] = ()
    # fed to the harness as its stdin (None: empty stdin, never a terminal)
    stdin: bytes | None = None


@dataclass(frozen=True, slots=True)
class BundleRef:
    """What a session mounts for a custom harness: a Polar-built bundle by harness name, a prebuilt bundle image (one
    that declares a VOLUME holding its files), or nothing (the command is already in the instance image)."""

    kind: Literal["harness", "image", "none"]
    name: str = ""


@dataclass(frozen=True, slots=True)
class HarnessAdapter:
    name: str
    # the npm (PyPI) package pinned in harness_images/<name>/package.json (requirements.txt)
    package: str
    # the tool the harness runs shell commands with (used by scripted policies and tests)
    shell_tool: str
    build: Callable[[str, Wiring, str], Launch] = field(repr=False)
    # the API it speaks to the gateway (None: not declared)
    api: ApiName | None = None
    # None: its own bundle, harness_images/<name> (`session.mount_bundle`); a custom harness names another
    bundle_ref: BundleRef | None = None
    # how it exits after an error it recovered from (`recovery.py`); None: every non-zero exit is a harness error
    recovery: Recovery | None = None

    @property
    def quirks(self) -> tuple[str, ...]:
        """What the gateway's codecs do for this harness's traffic, one line each (`quirks.py`; `polar harnesses`)."""
        return quirks_of(self.name, self.api)

    @property
    def bundle_dir(self) -> str:
        return f"{BUNDLE_ROOT}/{self.name}"

    def launch(self, instruction: str, wiring: Wiring, workdir: str = "/testbed") -> Launch:
        """The run that gives `instruction` to this harness, wired to the gateway."""
        check_instruction(instruction)
        return self.build(instruction, wiring, workdir)


def check_instruction(instruction: str) -> None:
    if not instruction.strip():
        raise ConfigError("instruction: empty")
    if "\0" in instruction:
        raise ConfigError("instruction: contains a NUL byte, which no process argument can carry")
    size = len(instruction.encode("utf-8", "surrogatepass"))
    if size > MAX_INSTRUCTION_BYTES:
        raise ConfigError(f"instruction: {size} bytes; at most {MAX_INSTRUCTION_BYTES} fit in one process argument")


def node_argv(bundle_dir: str, command: str) -> tuple[str, str]:
    """Run a bundle's JS entry point with the bundle's own Node, leaving the instance's PATH (and its node) alone."""
    return (f"{bundle_dir}/bin/node", f"{bundle_dir}/bin/{command}")


def python_argv(bundle_dir: str, command: str, options: Sequence[str], flag: str, instruction: str) -> tuple[str, ...]:
    """Run a Python bundle's launcher (its own python through its own loader) with ``options``, the instruction last,
    glued to its ``flag`` (``--task=TEXT``): one token, so argparse or click never reads a leading dash in it as an
    option."""
    return (f"{bundle_dir}/bin/{command}", *options, f"{flag}={instruction}")


def base_env(wiring: Wiring) -> dict[str, str]:
    """Environment every harness gets: a fixed HOME, no proxy for the local gateway, no colour codes in logs."""
    del wiring
    return {
        "HOME": HOME,
        "NO_COLOR": "1",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }


def json_file(data: Mapping[str, Any]) -> bytes:
    return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode()


def toml_string(value: str) -> str:
    """A TOML basic string (JSON's escapes are a subset TOML accepts)."""
    return json.dumps(value, ensure_ascii=False)
