"""The egress proxy's decisions, with no I/O: which hosts a sandbox may reach, and what a client asked for.

`Allowlist` holds host patterns (an exact name, or ``*.suffix`` for any name below ``suffix``, not ``suffix``
itself) and the ports allowed (80 and 443 unless configured). `parse_head` reads a proxy request's head (a
``CONNECT host:port`` tunnel, or an absolute-URI ``http://`` request) into a `Target`, or raises `BadRequest` with
the status the client gets. `decide` says whether a target is allowed; `address_refused` whether an address a name
resolved to may be reached (loopback, private, link-local, multicast and reserved addresses are refused unless the
allowlist says otherwise: an allowed name must not become a way to the host's own ports).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

DEFAULT_PORTS = (80, 443)
# a DNS name: labels of letters, digits, hyphens and underscores (some registries' CDNs use them), 1-63 each
_LABEL = re.compile(r"^[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?$")
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
MAX_HOST = 253


class BadRequest(ValueError):
    """A request the proxy cannot read; ``status`` is what the client is answered (400, 405, 431)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def normalize_host(host: str) -> str:
    """A host name lower-cased without its trailing dot, or an IP literal (IPv6 without brackets); `BadRequest`
    unless it is one of those."""
    name = host.strip().lower()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
        try:
            return str(ipaddress.IPv6Address(name))
        except ValueError as exc:
            raise BadRequest(400, f"not an IPv6 address: {host!r}") from exc
    name = name.removesuffix(".")
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        pass
    if not name or len(name) > MAX_HOST or not all(_LABEL.match(label) for label in name.split(".")):
        raise BadRequest(400, f"not a host name: {host[:80]!r}")
    return name


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def parse_pattern(pattern: str) -> str:
    """An allowlist pattern, normalized: ``name`` or ``*.suffix``; a `ValueError` saying why otherwise."""
    text = pattern.strip()
    wildcard = text.startswith("*.")
    try:
        host = normalize_host(text[2:] if wildcard else text)
    except BadRequest as exc:
        raise ValueError(f"egress pattern {pattern!r}: {exc.reason} (an exact name or *.suffix)") from exc
    if wildcard and _is_address(host):
        raise ValueError(f"egress pattern {pattern!r}: *. takes a name, not an address")
    return f"*.{host}" if wildcard else host


@dataclass(frozen=True, slots=True)
class Allowlist:
    """The hosts and ports a session may reach through the proxy (`allowlist` builds one)."""

    patterns: tuple[str, ...]
    ports: tuple[int, ...] = DEFAULT_PORTS
    # reach names that resolve to loopback, private, link-local... addresses (an internal mirror); off by default
    private_addresses: bool = False

    def matches(self, host: str) -> bool:
        for pattern in self.patterns:
            if pattern.startswith("*."):
                if host.endswith(pattern[1:]):
                    return True
            elif host == pattern:
                return True
        return False


def allowlist(
    patterns: Iterable[str], ports: Sequence[int] = DEFAULT_PORTS, *, private_addresses: bool = False
) -> Allowlist:
    """An `Allowlist` from host patterns (``registry.npmjs.org``, ``*.pythonhosted.org``); a `ValueError` naming the
    first bad pattern or port. The hook a task's own allowed hosts go through (`merged`)."""
    normalized = tuple(dict.fromkeys(parse_pattern(p) for p in patterns))
    for port in ports:
        if not isinstance(port, int) or not 0 < port < 65536:
            raise ValueError(f"egress port {port!r}: not a TCP port")
    return Allowlist(normalized, tuple(dict.fromkeys(ports)), private_addresses)


def merged(base: Allowlist | None, patterns: Iterable[str]) -> Allowlist | None:
    """``base`` (a recipe's) with a task's ``patterns`` added (ports and the private-address switch stay the
    recipe's); None when neither allows anything, so the session stays gateway-only without a proxy."""
    extra = list(patterns)
    if base is None:
        return allowlist(extra) if extra else None
    if not extra:
        return base
    return allowlist([*base.patterns, *extra], base.ports, private_addresses=base.private_addresses)


@dataclass(frozen=True, slots=True)
class Target:
    """What a client asked the proxy for."""

    method: str
    host: str
    port: int
    # CONNECT: None; otherwise the request line and headers to send on, in origin form, ending in a blank line
    forward: bytes | None = None

    @property
    def tunnel(self) -> bool:
        return self.forward is None


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    reason: str


def decide(target: Target, rules: Allowlist) -> Decision:
    """Whether the allowlist lets ``target`` through, and why not."""
    if not rules.matches(target.host):
        return Decision(False, "host not in the allowlist")
    if target.port not in rules.ports:
        return Decision(False, f"port {target.port} not allowed")
    return Decision(True, "allowlist")


def address_refused(address: str, rules: Allowlist) -> str | None:
    """Why a resolved address may not be reached (None: it may)."""
    if rules.private_addresses:
        return None
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback or ip.is_private or ip.is_link_local or ip.is_multicast or ip.is_reserved or ip.is_unspecified:
        return f"{address} is not a public address"
    return None


def _authority(text: str, default_port: int | None) -> tuple[str, int]:
    if text.startswith("["):
        host, sep, rest = text.partition("]")
        host += "]"
        port_text = rest[1:] if rest.startswith(":") else ""
        if rest and not rest.startswith(":"):
            raise BadRequest(400, f"bad authority {text[:80]!r}")
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            host, port_text = text, ""
    if not port_text:
        if default_port is None:
            raise BadRequest(400, f"CONNECT needs host:port, got {text[:80]!r}")
        return normalize_host(host), default_port
    if not port_text.isdigit() or len(port_text) > 5 or not 0 < int(port_text) < 65536:
        raise BadRequest(400, f"bad port in {text[:80]!r}")
    return normalize_host(host), int(port_text)


HOP_HEADERS = frozenset({"proxy-connection", "proxy-authorization", "connection", "keep-alive"})


def parse_head(head: bytes) -> Target:
    """A complete request head (request line and headers, ending in CRLFCRLF or LFLF) as a `Target`.

    CONNECT takes ``host:port``; any other method an absolute ``http://`` URI, forwarded in origin form with the
    proxy's hop-by-hop headers dropped and ``Connection: close`` (one request per connection, so a client cannot
    send a second request to another host through the first one's connection)."""
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError as exc:
        raise BadRequest(400, "the request head is not ASCII") from exc
    lines = text.replace("\r\n", "\n").split("\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not _TOKEN.match(parts[0]) or parts[2] not in ("HTTP/1.1", "HTTP/1.0"):
        raise BadRequest(400, f"bad request line {lines[0][:80]!r}")
    method, uri, version = parts
    headers = [line for line in lines[1:] if line]
    for line in headers:
        name, sep, _ = line.partition(":")
        if not sep or not _TOKEN.match(name):
            raise BadRequest(400, f"bad header line {line[:80]!r}")
    if method == "CONNECT":
        host, port = _authority(uri, None)
        return Target(method, host, port)
    if not uri.lower().startswith("http://"):
        if uri.lower().startswith("https://"):
            raise BadRequest(400, "https:// goes through CONNECT")
        raise BadRequest(400, f"a proxy request needs an absolute http:// URI, got {uri[:80]!r}")
    rest = uri[len("http://") :]
    cut = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    authority, path = rest[:cut], rest[cut:] or "/"
    if "@" in authority:
        raise BadRequest(400, "user info in the URI")
    host, port = _authority(authority, 80)
    if path.startswith("?"):
        path = "/" + path
    kept = [h for h in headers if h.partition(":")[0].strip().lower() not in HOP_HEADERS]
    forward = "\r\n".join([f"{method} {path} {version}", *kept, "Connection: close", "", ""]).encode("ascii")
    return Target(method, host, port, forward)
