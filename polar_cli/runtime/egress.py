"""How a gateway-only sandbox reaches the egress proxy (`polar_cli.egress`): a second relay, and the proxy variables.

When a session has an allowlist, its proxy socket's directory (one per session, `EgressProxy.open`) is bind-mounted
read-only at EGRESS_SOCKET_DIR, and the container's main process runs two relays: 127.0.0.1:EGRESS_PORT to the
proxy's socket (in the background) and 127.0.0.1:RELAY_PORT to the gateway's (as without an allowlist). The network
stays Docker's ``none``: every byte out goes through a socket Polar listens on. The container's environment names
the proxy (`proxy_env`), both spellings, so that pip, npm, curl, git, apt (``Acquire::http::Proxy`` aside) and the
harnesses' own clients find it; ``NO_PROXY`` keeps the gateway's relay direct.
"""

from __future__ import annotations

import dataclasses
import shlex

from polar_cli.runtime.base import GATEWAY_SOCKET_DIR, GATEWAY_SOCKET_NAME, RELAY_BIN, RELAY_PORT, ContainerSpec

EGRESS_SOCKET_NAME = "egress.sock"
EGRESS_SOCKET_DIR = "/run/polar-egress"
EGRESS_PORT = 47012
EGRESS_URL = f"http://127.0.0.1:{EGRESS_PORT}"
NO_PROXY = "127.0.0.1,localhost"


def egress_relay_argv(verb: str = "serve") -> tuple[str, ...]:
    """The egress relay's argv: ``serve``, or ``probe`` (exit 0 once it forwards to the proxy's socket)."""
    return (RELAY_BIN, verb, str(EGRESS_PORT), f"{EGRESS_SOCKET_DIR}/{EGRESS_SOCKET_NAME}")


def two_relays_command() -> tuple[str, ...]:
    """The main process of a sandbox with egress: the egress relay in the background, then the gateway's relay."""
    egress = shlex.join(egress_relay_argv())
    gateway = shlex.join((RELAY_BIN, "serve", str(RELAY_PORT), f"{GATEWAY_SOCKET_DIR}/{GATEWAY_SOCKET_NAME}"))
    return ("/bin/sh", "-c", f"{egress} & exec {gateway}")


def proxy_env() -> dict[str, str]:
    """What a sandbox with egress has in its environment: the proxy for http and https, never for the relay."""
    env: dict[str, str] = {}
    for name in ("HTTP_PROXY", "HTTPS_PROXY"):
        env[name] = env[name.lower()] = EGRESS_URL
    env["NO_PROXY"] = env["no_proxy"] = NO_PROXY
    return env


def with_egress(spec: ContainerSpec, socket_dir: str) -> ContainerSpec:
    """A gateway-only sandbox's spec with the egress proxy's socket directory ``socket_dir`` mounted read-only, both
    relays as its main process and the proxy variables in its environment."""
    return dataclasses.replace(
        spec,
        binds={**spec.binds, socket_dir: EGRESS_SOCKET_DIR},
        command=two_relays_command(),
        env={**spec.env, **proxy_env()},
    )
