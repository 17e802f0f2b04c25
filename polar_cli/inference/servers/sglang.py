"""SGLang's control routes: ``/update_weights_from_disk {model_path, weight_version, flush_cache}``, its version
from ``GET /get_model_info``, and the probe's log-probabilities from ``/generate`` (``return_logprob``). Polar can
also launch SGLang from a recipe (`inference.launcher`)."""

from __future__ import annotations

from collections.abc import Sequence

import httpx

from polar_cli.inference.servers.base import PROBE_IDS, Checkpoint, ReloadError, post, read_version


class SGLangControl:
    name = "sglang"

    async def load(self, client: httpx.AsyncClient, url: str, checkpoint: Checkpoint) -> None:
        if checkpoint.lora is not None:
            raise ReloadError("SGLang LoRA reloads are not supported by Polar yet: load full weights")
        body = {"model_path": checkpoint.path, "weight_version": checkpoint.version, "flush_cache": True}
        answer = await post(client, f"{url}/update_weights_from_disk", body)
        if isinstance(answer, dict) and answer.get("success") is False:
            raise ReloadError(f"SGLang refused the weights: {answer.get('message')}")

    async def served_version(self, client: httpx.AsyncClient, url: str) -> str | None:
        return await read_version(client, f"{url}/get_model_info")

    async def probe(
        self, client: httpx.AsyncClient, url: str, model: str, ids: Sequence[int] = PROBE_IDS
    ) -> list[float]:
        body = {
            "input_ids": list(ids),
            "sampling_params": {"max_new_tokens": 1, "temperature": 0},
            "return_logprob": True,
            "logprob_start_len": 0,
        }
        answer = await post(client, f"{url}/generate", body)
        entries = answer["meta_info"]["input_token_logprobs"][1:]
        return [float(e[0]) for e in entries]
