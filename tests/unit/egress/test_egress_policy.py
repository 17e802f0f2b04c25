"""The egress proxy's pure decisions: allowlist patterns, request heads, resolved addresses."""

from __future__ import annotations

import pytest

from polar_cli.egress.policy import (
    BadRequest,
    Target,
    address_refused,
    allowlist,
    decide,
    merged,
    parse_head,
    parse_pattern,
)

RULES = allowlist(["registry.npmjs.org", "*.pythonhosted.org", "PyPI.org."])


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("registry.npmjs.org", True),
        ("files.pythonhosted.org", True),
        ("a.b.pythonhosted.org", True),
        ("pythonhosted.org", False),  # *.suffix is below the suffix, not the suffix itself
        ("evilpythonhosted.org", False),
        ("pythonhosted.org.evil.com", False),
        ("pypi.org", True),  # patterns are normalized: lower case, no trailing dot
        ("npmjs.org", False),
        ("registry.npmjs.org.evil.com", False),
        ("example.com", False),
    ],
)
def test_host_patterns_match_exact_names_and_suffixes(host: str, allowed: bool) -> None:
    assert decide(Target("CONNECT", host, 443), RULES).allowed is allowed


def test_ports_default_to_80_and_443_and_are_configurable() -> None:
    assert decide(Target("CONNECT", "pypi.org", 443), RULES).allowed
    assert decide(Target("GET", "pypi.org", 80, b""), RULES).allowed
    refused = decide(Target("CONNECT", "pypi.org", 22), RULES)
    assert not refused.allowed and refused.reason == "port 22 not allowed"
    custom = allowlist(["pypi.org"], ports=[8443])
    assert decide(Target("CONNECT", "pypi.org", 8443), custom).allowed
    assert not decide(Target("CONNECT", "pypi.org", 443), custom).allowed


@pytest.mark.parametrize("bad", ["", "*", "*.", "a..b", "-a.com", "a b.com", "*.10.0.0.1", "x" * 254, "ex/am.ple"])
def test_bad_patterns_are_refused_by_name(bad: str) -> None:
    with pytest.raises(ValueError, match="egress pattern"):
        parse_pattern(bad)


def test_bad_ports_are_refused() -> None:
    with pytest.raises(ValueError, match="egress port"):
        allowlist(["pypi.org"], ports=[0])
    with pytest.raises(ValueError, match="egress port"):
        allowlist(["pypi.org"], ports=[70000])


def test_a_task_adds_hosts_to_the_recipes_allowlist() -> None:
    assert merged(None, []) is None
    only_task = merged(None, ["deb.debian.org"])
    assert only_task is not None and only_task.patterns == ("deb.debian.org",) and only_task.ports == (80, 443)
    recipe = allowlist(["pypi.org"], ports=[443], private_addresses=True)
    assert merged(recipe, []) is recipe
    both = merged(recipe, ["*.pythonhosted.org", "pypi.org"])
    assert both == allowlist(["pypi.org", "*.pythonhosted.org"], ports=[443], private_addresses=True)


def test_connect_heads_give_host_and_port() -> None:
    target = parse_head(b"CONNECT Files.PythonHosted.org:443 HTTP/1.1\r\nHost: x\r\n\r\n")
    assert target == Target("CONNECT", "files.pythonhosted.org", 443) and target.tunnel
    assert parse_head(b"CONNECT [::1]:8443 HTTP/1.1\r\n\r\n") == Target("CONNECT", "::1", 8443)
    assert parse_head(b"CONNECT 10.0.0.1:443 HTTP/1.0\r\n\r\n").host == "10.0.0.1"


def test_plain_http_is_forwarded_in_origin_form_without_proxy_headers() -> None:
    head = (
        b"GET http://pypi.org:8080/simple/x/?a=1 HTTP/1.1\r\nHost: pypi.org:8080\r\n"
        b"Proxy-Authorization: Basic eA==\r\nProxy-Connection: keep-alive\r\nConnection: keep-alive\r\n"
        b"Accept: */*\r\n\r\n"
    )
    target = parse_head(head)
    assert (target.method, target.host, target.port) == ("GET", "pypi.org", 8080)
    assert target.forward == (
        b"GET /simple/x/?a=1 HTTP/1.1\r\nHost: pypi.org:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n"
    )
    assert parse_head(b"GET http://pypi.org HTTP/1.1\r\n\r\n").forward == b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n"
    assert parse_head(b"HEAD http://pypi.org?q HTTP/1.1\r\n\r\n").forward == (
        b"HEAD /?q HTTP/1.1\r\nConnection: close\r\n\r\n"
    )


@pytest.mark.parametrize(
    "head",
    [
        b"\r\n\r\n",
        b"CONNECT pypi.org HTTP/1.1\r\n\r\n",  # no port
        b"CONNECT pypi.org:0 HTTP/1.1\r\n\r\n",
        b"CONNECT pypi.org:99999 HTTP/1.1\r\n\r\n",
        b"CONNECT pypi.org:443x HTTP/1.1\r\n\r\n",
        b"CONNECT pypi.org:443 HTTP/2.0\r\n\r\n",
        b"CONNECT  pypi.org:443 HTTP/1.1\r\n\r\n",
        b"CONNECT pypi.org:443\r\n\r\n",
        b"CONNECT [zz::1]:443 HTTP/1.1\r\n\r\n",
        b"CONNECT p\xffpi.org:443 HTTP/1.1\r\n\r\n",
        b"CONNECT bad_host!:443 HTTP/1.1\r\n\r\n",
        b"GET /relative HTTP/1.1\r\nHost: pypi.org\r\n\r\n",
        b"GET https://pypi.org/ HTTP/1.1\r\n\r\n",
        b"GET ftp://pypi.org/ HTTP/1.1\r\n\r\n",
        b"GET http://user@pypi.org/ HTTP/1.1\r\n\r\n",
        b"GET http://:80/ HTTP/1.1\r\n\r\n",
        b"CONNECT pypi.org:443 HTTP/1.1\r\nno colon here\r\n\r\n",
        b"G(T http://pypi.org/ HTTP/1.1\r\n\r\n",
    ],
)
def test_malformed_heads_are_bad_requests(head: bytes) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_head(head)
    assert caught.value.status == 400


@pytest.mark.parametrize(
    ("address", "refused"),
    [
        ("151.101.0.223", False),
        ("2a04:4e42::223", False),
        ("127.0.0.1", True),
        ("10.1.2.3", True),
        ("172.17.0.1", True),
        ("192.168.1.1", True),
        ("169.254.169.254", True),
        ("0.0.0.0", True),
        ("224.0.0.1", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("fe80::1", True),
        ("fd00::1", True),
    ],
)
def test_names_resolving_to_non_public_addresses_are_refused(address: str, refused: bool) -> None:
    assert (address_refused(address, RULES) is not None) is refused
    assert address_refused(address, allowlist(["x.org"], private_addresses=True)) is None
