"""The runtime seam: what the rest of Polar needs from a container, whatever runs it.

`runtime.docker.DockerRuntime` implements it on the docker SDK. Callers (the harness session, the SWE evaluator, the
image preparation of a run) only see these types, so tests can use a fake and a later Kubernetes or Ray runtime fits
the same seam. Nothing outside `polar_cli/runtime/` imports the docker SDK.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

Log = Callable[[str], None]

# Every container Polar creates carries MANAGED_LABEL=1; OWNER_LABEL names the process that must remove it.
MANAGED_LABEL = "polar.managed"
ROLE_LABEL = "polar.role"
OWNER_LABEL = "polar.owner"

# `runtime.network` of a sandbox that reaches the gateway and nothing else: Docker network mode "none" (loopback only:
# no internet, no host port, no inference server, no Docker socket). The gateway also listens on a Unix socket
# (GATEWAY_SOCKET_NAME) in a host directory of its own; that directory alone is bind-mounted read-only (connecting
# to a socket needs no write access to its mount) at GATEWAY_SOCKET_DIR, and the relay (harness_images/relay, a static
# C program mounted from its bundle at RELAY_ROOT) is the container's main process: it listens on
# 127.0.0.1:RELAY_PORT and forwards each connection to the socket. The harness is wired to RELAY_URL.
GATEWAY_ONLY = "gateway-only"
# what Docker calls the network mode of each `runtime.network` value Polar names itself; any other value is a Docker
# network name (or mode) passed as it is
NETWORK_MODES = {GATEWAY_ONLY: "none", "host": "host", "bridge": "bridge"}
GATEWAY_SOCKET_NAME = "gateway.sock"
GATEWAY_SOCKET_DIR = "/run/polar-gateway"
RELAY_ROOT = "/opt/polar/relay"
RELAY_BIN = f"{RELAY_ROOT}/polar-relay"
RELAY_PORT = 47011
RELAY_URL = f"http://127.0.0.1:{RELAY_PORT}"


def socket_parent() -> str | None:
    """Where a host socket's directory goes (the gateway's, an egress proxy's): ``POLAR_GATEWAY_SOCKET_PARENT``, else
    the system's temporary directory (short: a Unix socket's path is limited to 107 bytes). The Docker engine must
    see it (a local engine)."""
    return os.environ.get("POLAR_GATEWAY_SOCKET_PARENT") or None


def network_mode(network: str) -> str:
    """The Docker network mode of a `runtime.network` value (``gateway-only`` is ``none``)."""
    return NETWORK_MODES.get(network, network)


def relay_argv(verb: str = "serve") -> tuple[str, ...]:
    """The relay's argv: ``serve`` (the container's main process) or ``probe`` (exit 0 once it forwards)."""
    return (RELAY_BIN, verb, str(RELAY_PORT), f"{GATEWAY_SOCKET_DIR}/{GATEWAY_SOCKET_NAME}")


# Linux capabilities a session container keeps (every other one is dropped; docs/security.md): the shipped harnesses
# run as root and work on files other users own (DAC_OVERRIDE, FOWNER, CHOWN, FSETID: git, pip and npm extract and
# chown), signal what they started and what apt's or a test's other uid started (KILL), and package managers and
# test suites switch users (SETUID, SETGID: apt's _apt sandbox, `su`); NET_BIND_SERVICE lets a test bind a low port.
# Dropped from Docker's defaults: NET_RAW (raw sockets, spoofing), MKNOD, AUDIT_WRITE, SYS_CHROOT, SETFCAP, SETPCAP.
SESSION_CAPABILITIES = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "NET_BIND_SERVICE")
# processes (threads included) a session container may hold: a fork bomb stops there, not at the host's limit
SESSION_PIDS_LIMIT = 4096


@dataclass(frozen=True, slots=True)
class Sandbox:
    """What confines a container beyond its network: pids limit, ``no-new-privileges`` (setuid binaries gain
    nothing), and the capabilities it keeps (None: Docker's defaults; every other capability is dropped)."""

    pids_limit: int | None = SESSION_PIDS_LIMIT
    no_new_privileges: bool = True
    capabilities: tuple[str, ...] | None = SESSION_CAPABILITIES


# Docker's own defaults: no pids limit, privileges and Docker's capability set (a grading container, as SWE-bench's)
DOCKER_DEFAULTS = Sandbox(pids_limit=None, no_new_privileges=False, capabilities=None)


@dataclass(frozen=True, slots=True)
class ContainerSpec:
    image: str
    # what the container is for, e.g. "session", "eval"; becomes a label and part of the name
    role: str = "session"
    env: Mapping[str, str] = field(default_factory=dict)
    # containers whose volumes are mounted read-only here (harness bundles)
    volumes_from: Sequence[str] = ()
    # a Docker network mode or name ("host": a harness reaches the gateway on 127.0.0.1; "none": loopback only);
    # `network_mode` maps Polar's own names (`GATEWAY_ONLY`) to Docker's
    network: str = "host"
    # host directory -> path in the container, bind-mounted read-only (a gateway-only sandbox's socket directory)
    binds: Mapping[str, str] = field(default_factory=dict)
    # the container's main process (it must stay up until the container is removed); empty: ``sleep infinity``
    command: Sequence[str] = ()
    cpus: float | None = None
    memory_bytes: int | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    workdir: str = "/testbed"
    # an exec whose output (stdout and stderr, kept or not) passes this many bytes is killed; None: no limit
    output_limit: int | None = None
    sandbox: Sandbox = DOCKER_DEFAULTS


@dataclass(frozen=True, slots=True)
class ExecResult:
    exit_code: int | None  # None when killed at the timeout or the output limit
    output: bytes  # stdout and stderr interleaved, cut at the output cap
    timed_out: bool
    truncated: bool
    seconds: float
    # it failed, and the kernel's OOM killer killed a process of the container (at its memory limit) while it ran
    oom_killed: bool = False
    # killed because its output passed the container's `ContainerSpec.output_limit`
    over_limit: bool = False
    # bytes of output in all, kept or not
    output_size: int = 0


class Container(Protocol):
    id: str

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
        """Run argv (no shell unless argv asks for one) and wait; kill the process tree at the timeout, which runs on
        ``clock`` (one that stands still while the gateway is paused credits the pause)."""
        ...

    def put_files(self, files: Mapping[str, bytes], mode: int = 0o644) -> None:
        """Write files at absolute paths, creating parent directories."""
        ...

    def get_file(self, path: str) -> bytes:
        """Read one file; raises FileNotFoundError when absent."""
        ...

    def remove(self, *, wait: bool = True) -> None:
        """Kill and remove; safe to call twice. ``wait=False`` for a container whose work is over: the removal goes on
        in the background, off the caller's path, and stays the runtime's (its `close()` waits for it, and removes the
        container itself if the background removal failed)."""
        ...


class Runtime(Protocol):
    """A container backend: containers, the images they start from, and the harness bundles they mount."""

    def start(self, spec: ContainerSpec) -> Container:
        """Create and start a container that stays up (its main process sleeps) until removed."""
        ...

    def image_exists(self, image: str) -> bool: ...

    def pull(self, image: str) -> None:
        """Fetch ``image`` from its registry; a `RuntimeFailure` saying why when it cannot."""
        ...

    def build(
        self, files: Mapping[str, bytes], tag: str, *, buildargs: Mapping[str, str] | None = None, log: Log = print
    ) -> None:
        """Build ``tag`` from a context given as files (``Dockerfile`` among them), logging the build's lines."""
        ...

    def tag(self, source: str, target: str) -> None:
        """Give the image ``source`` the extra name ``target``."""
        ...

    def base_image(self, *, log: Log = print) -> str:
        """The base image Polar's own images build FROM (bootstrapped when missing); its tag."""
        ...

    def bundle(self, harness: str, *, build: bool = True, log: Log = print) -> str:
        """The harness's bundle, ready to mount (`ContainerSpec.volumes_from`); built first if missing and ``build``."""
        ...

    def relay(self, *, build: bool = True, log: Log = print) -> str:
        """The relay's bundle (`GATEWAY_ONLY`), ready to mount; built first if missing and ``build``."""
        ...

    def bundle_image(self, image: str) -> str:
        """A prebuilt bundle image (present, else pulled) ready to mount, for a custom harness (`harness.custom`)."""
        ...

    def sweep(self) -> int:
        """Remove containers this runtime's label marks as Polar's and whose owner process is gone; returns how many."""
        ...

    def close(self) -> None:
        """Remove every container this runtime started and has not removed yet."""
        ...
