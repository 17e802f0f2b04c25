"""The inference servers whose weights Polar reloads, one module each (`base.ServerControl`). Adding one: a module
here and its line in `SERVERS`."""

from polar_cli.inference.servers.base import PROBE_IDS, Checkpoint, ReloadError, ServerControl
from polar_cli.inference.servers.sglang import SGLangControl
from polar_cli.inference.servers.vllm import VLLMControl

SERVERS: dict[str, ServerControl] = {"sglang": SGLangControl(), "vllm": VLLMControl()}


def server_control(kind: str, dialect: str) -> ServerControl:
    """The control of an engine of ``kind``: its own server's, or (``engine.kind: server``) the one whose token
    fields its ``dialect`` names."""
    if kind in SERVERS:
        return SERVERS[kind]
    return SERVERS["vllm"] if dialect == "vllm" else SERVERS["sglang"]


__all__ = ["PROBE_IDS", "SERVERS", "Checkpoint", "ReloadError", "ServerControl", "server_control"]
