"""Each server kind's weight control speaks its own documented routes (`inference.servers`), and an engine of a
recipe's kind gets its server's control. SGLang here is a MockTransport answering the shapes SGLang's docs give
(``/update_weights_from_disk``, ``/get_model_info``, ``/generate`` with ``return_logprob``): it cannot show a real
SGLang loading weights, which needs a GPU (vLLM's control runs against a real vLLM in tests/integration/serve)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson
import pytest

from polar_cli.inference.servers import SERVERS, Checkpoint, ReloadError, server_control


class SGLang:
    def __init__(self, refuse: bool = False) -> None:
        self.refuse, self.version, self.bodies = refuse, "base", []  # type: ignore[var-annotated]

    def handle(self, request: httpx.Request) -> httpx.Response:
        body: Any = orjson.loads(request.content) if request.content else None
        self.bodies.append((request.url.path, body))
        if request.url.path == "/update_weights_from_disk":
            if self.refuse:
                return httpx.Response(200, json={"success": False, "message": "shape mismatch"})
            self.version = body["weight_version"]
            return httpx.Response(200, json={"success": True, "message": "ok"})
        if request.url.path == "/get_model_info":
            return httpx.Response(200, json={"model_path": "m", "weight_version": self.version})
        if request.url.path == "/generate":
            logprobs = [[None, body["input_ids"][0], None]] + [[-1.5, i, None] for i in body["input_ids"][1:]]
            return httpx.Response(200, json={"text": "", "meta_info": {"input_token_logprobs": logprobs}})
        return httpx.Response(404)


def run(server: SGLang, step: Any) -> Any:
    async def main() -> Any:
        async with httpx.AsyncClient(transport=httpx.MockTransport(server.handle)) as client:
            return await step(client)

    return asyncio.run(main())


def test_sglang_loads_from_disk_says_its_version_and_probes_by_generate() -> None:
    sglang, control = SGLang(), SERVERS["sglang"]
    run(sglang, lambda c: control.load(c, "http://s", Checkpoint("/ckpt/7", "v7")))
    assert sglang.bodies[-1] == (
        "/update_weights_from_disk",
        {"model_path": "/ckpt/7", "weight_version": "v7", "flush_cache": True},
    )
    assert run(sglang, lambda c: control.served_version(c, "http://s")) == "v7"
    assert run(sglang, lambda c: control.probe(c, "http://s", "m", (5, 6, 7))) == [-1.5, -1.5]


def test_sglang_refusing_the_weights_or_asked_for_a_lora_is_a_reload_error() -> None:
    control = SERVERS["sglang"]
    with pytest.raises(ReloadError, match="shape mismatch"):
        run(SGLang(refuse=True), lambda c: control.load(c, "http://s", Checkpoint("/ckpt", "v1")))
    with pytest.raises(ReloadError, match="LoRA"):
        run(SGLang(), lambda c: control.load(c, "http://s", Checkpoint("/ckpt", "v1", lora="a")))


@pytest.mark.parametrize(
    ("kind", "dialect", "server"),
    [
        ("sglang", "auto", "sglang"),
        ("vllm", "auto", "vllm"),
        ("server", "vllm", "vllm"),
        ("server", "sglang", "sglang"),
    ],
)
def test_an_engine_gets_its_servers_control(kind: str, dialect: str, server: str) -> None:
    assert server_control(kind, dialect) is SERVERS[server]
