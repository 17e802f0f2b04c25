"""Which image URLs may go upstream: the inference server fetches what a URL names, from inside the cluster.

By default only ``data:`` URLs pass (the image travels in the request itself). With remote images on
(`upstream.UpstreamOptions.remote_images`), ``http(s)`` URLs also pass unless their host is a name or address that
reaches the server's own side: ``localhost``, loopback, private, link-local (``169.254.169.254``, the cloud metadata
service), multicast, reserved or unspecified addresses. A host name that resolves to such an address is not caught
here (the server resolves it, not Polar): keep remote images off where that matters. Every other scheme
(``file:``, ``ftp:``, ``gopher:``, ...) is refused. A refusal is a 400 in the caller's API shape.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from polar_cli.errors import RequestError
from polar_cli.translate.ir import ChatRequest, Image


def check_images(request: ChatRequest, *, remote: bool = False) -> None:
    """Raise `RequestError` (400) for the first image whose URL may not go upstream."""
    for i, message in enumerate(request.messages):
        for part in message.content:
            if isinstance(part, Image):
                problem = url_problem(part.url, remote=remote)
                if problem is not None:
                    raise RequestError(f"messages[{i}]: image URL {part.url[:60]!r} refused: {problem}")


def url_problem(url: str, *, remote: bool) -> str | None:
    """Why ``url`` may not go upstream, or None."""
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme == "data":
        return None
    if scheme not in ("http", "https"):
        return f"scheme {scheme or '(none)'!r}: only data: URLs (and http(s) with remote images on) are forwarded"
    if not remote:
        return "remote image URLs are off: send the image inline (a data: URL / base64 source)"
    try:
        host = (urlsplit(url).hostname or "").rstrip(".").lower()
    except ValueError:
        return "malformed URL"
    if not host or host == "localhost" or host.endswith(".localhost"):
        return f"host {host or '(none)'!r} is local"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None  # a name: resolved by the server (see the module docstring)
    if not address.is_global or address.is_multicast:
        return f"host {host} is not a public address"
    return None
