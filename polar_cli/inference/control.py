"""Engine control for weight syncs: which servers an engine handle drives, and how to load new weights into one of
them, check it serves them, and read the version it says it serves.

Per engine kind (the mechanism each server documents; docs/design.md "Rollout service"):

- vLLM (``VLLM_SERVER_DEV_MODE=1``): ``/pause?mode=wait``, ``/collective_rpc reload_weights {weights_path}`` (an
  in-place reload from the checkpoint's safetensors), ``/reset_prefix_cache``, ``/update_weight_version``,
  ``/resume``; its version from ``GET /weight_info``. A LoRA adapter: ``/v1/load_lora_adapter`` in place, under the
  served name the gateway sends.
- SGLang: ``/update_weights_from_disk {model_path, weight_version, flush_cache}``; its version from
  ``GET /get_model_info``.

The probe: the log-probabilities the server gives a fixed id sequence (``prompt_logprobs``: vLLM's
``/v1/completions``, SGLang's ``/generate``). New weights must move them; the same weights must not.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from polar_cli.inference.engines import EngineHandle

# a fixed probe: 24 ids any vocabulary of the models Polar serves holds (the first few hundred ids are bytes/merges)
PROBE_IDS: tuple[int, ...] = tuple(range(300, 324))
RELOAD_TIMEOUT = 600.0


class ReloadError(Exception):
    """An engine refused or failed a weight load, or its check."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    path: str
    """A directory of safetensors in the model's layout (or a LoRA adapter's directory, with ``lora``)."""
    version: str
    lora: str | None = None
    """The served name of the LoRA adapter to load in place (None: full weights)."""


def engine_urls(handle: EngineHandle) -> list[str]:
    """The servers behind ``handle`` (none for a scripted engine)."""
    if handle.scripted is not None:
        return []
    pool = handle.pool
    if pool is not None:
        return pool.urls
    base = getattr(handle.upstream, "base_url", None)
    return [base] if isinstance(base, str) else []


def engine_family(kind: str, dialect: str) -> str:
    """``vllm`` or ``sglang``: which server's control routes an engine of ``kind`` speaks."""
    if kind in ("vllm", "sglang"):
        return kind
    return "vllm" if dialect == "vllm" else "sglang"


async def _post(client: httpx.AsyncClient, url: str, body: Any = None, **params: str) -> Any:
    try:
        reply = await client.post(url, json=body, params=params or None, timeout=RELOAD_TIMEOUT)
    except httpx.HTTPError as exc:
        raise ReloadError(f"POST {url}: {type(exc).__name__}: {exc}") from exc
    if reply.status_code >= 400:
        raise ReloadError(f"POST {url}: HTTP {reply.status_code}: {reply.text[:300]}")
    try:
        return reply.json()
    except ValueError:
        return reply.text


async def load(client: httpx.AsyncClient, family: str, url: str, checkpoint: Checkpoint) -> None:
    """Load ``checkpoint`` into the server at ``url`` and label it with its version."""
    if family == "sglang":
        if checkpoint.lora is not None:
            raise ReloadError("SGLang LoRA reloads are not supported by Polar yet: load full weights")
        body = {"model_path": checkpoint.path, "weight_version": checkpoint.version, "flush_cache": True}
        answer = await _post(client, f"{url}/update_weights_from_disk", body)
        if isinstance(answer, dict) and answer.get("success") is False:
            raise ReloadError(f"SGLang refused the weights: {answer.get('message')}")
        return
    if checkpoint.lora is not None:
        body = {"lora_name": checkpoint.lora, "lora_path": checkpoint.path, "load_inplace": True}
        await _post(client, f"{url}/v1/load_lora_adapter", body)
        return
    await _post(client, f"{url}/pause", mode="wait")
    try:
        rpc = {"method": "reload_weights", "kwargs": {"weights_path": checkpoint.path}}
        await _post(client, f"{url}/collective_rpc", rpc)
        await _post(client, f"{url}/reset_prefix_cache")
        await _post(client, f"{url}/update_weight_version", {"new_version": checkpoint.version})
    finally:
        await _post(client, f"{url}/resume")


async def served_version(client: httpx.AsyncClient, family: str, url: str) -> str | None:
    """The weight version the server says it serves (None: it has no such route, or says none)."""
    path = "/get_model_info" if family == "sglang" else "/weight_info"
    try:
        reply = await client.get(url + path, timeout=30)
        data = reply.json() if reply.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    version = data.get("weight_version", data.get("version"))
    return str(version) if version is not None else None


async def probe(
    client: httpx.AsyncClient, family: str, url: str, model: str, ids: Sequence[int] = PROBE_IDS
) -> list[float]:
    """The server's log-probability of each probe id after the ones before it (len(ids) - 1 values)."""
    if family == "sglang":
        body = {
            "input_ids": list(ids),
            "sampling_params": {"max_new_tokens": 1, "temperature": 0},
            "return_logprob": True,
            "logprob_start_len": 0,
        }
        answer = await _post(client, f"{url}/generate", body)
        entries = answer["meta_info"]["input_token_logprobs"][1:]
        return [float(e[0]) for e in entries]
    body = {"model": model, "prompt": list(ids), "max_tokens": 1, "temperature": 0, "prompt_logprobs": 0}
    answer = await _post(client, f"{url}/v1/completions", body)
    rows = answer["choices"][0]["prompt_logprobs"]
    return [float(rows[i][str(ids[i])]["logprob"]) for i in range(1, len(ids))]


def moved(before: Sequence[float], after: Sequence[float]) -> float:
    """The largest change of any probe log-probability."""
    return max((abs(a - b) for a, b in zip(before, after, strict=True)), default=0.0)
