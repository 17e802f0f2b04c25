"""vLLM's control routes (``VLLM_SERVER_DEV_MODE=1``): ``/pause?mode=wait``, ``/collective_rpc reload_weights
{weights_path}`` (an in-place reload from the checkpoint's safetensors), ``/reset_prefix_cache``,
``/update_weight_version``, ``/resume``; its version from ``GET /weight_info``. A LoRA adapter:
``/v1/load_lora_adapter`` in place, under the served name the gateway sends. The probe's log-probabilities come from
``/v1/completions`` (``prompt_logprobs``)."""

from __future__ import annotations

from collections.abc import Sequence

import httpx

from polar_cli.inference.servers.base import PROBE_IDS, Checkpoint, post, read_version


class VLLMControl:
    name = "vllm"

    async def load(self, client: httpx.AsyncClient, url: str, checkpoint: Checkpoint) -> None:
        if checkpoint.lora is not None:
            body = {"lora_name": checkpoint.lora, "lora_path": checkpoint.path, "load_inplace": True}
            await post(client, f"{url}/v1/load_lora_adapter", body)
            return
        await post(client, f"{url}/pause", mode="wait")
        try:
            rpc = {"method": "reload_weights", "kwargs": {"weights_path": checkpoint.path}}
            await post(client, f"{url}/collective_rpc", rpc)
            await post(client, f"{url}/reset_prefix_cache")
            await post(client, f"{url}/update_weight_version", {"new_version": checkpoint.version})
        finally:
            await post(client, f"{url}/resume")

    async def served_version(self, client: httpx.AsyncClient, url: str) -> str | None:
        return await read_version(client, f"{url}/weight_info")

    async def probe(
        self, client: httpx.AsyncClient, url: str, model: str, ids: Sequence[int] = PROBE_IDS
    ) -> list[float]:
        body = {"model": model, "prompt": list(ids), "max_tokens": 1, "temperature": 0, "prompt_logprobs": 0}
        answer = await post(client, f"{url}/v1/completions", body)
        rows = answer["choices"][0]["prompt_logprobs"]
        return [float(rows[i][str(ids[i])]["logprob"]) for i in range(1, len(ids))]
