"""One entry point for every engine a recipe can name: an upstream object the gateway calls, ready and probed.

- ``gold`` / ``noop``: a `ScriptedUpstream` in this process (no server, no GPU).
- ``sglang``: a running SGLang by URL, or one launched from the recipe (`launcher`) and then used the same way.
- ``vllm``: a running vLLM by URL; ``server``: a running server by URL whose token fields ``dialect`` names.
- any of those three with ``urls``: several running servers of one model behind a `gateway.upstream_pool.UpstreamPool`
  (a session stays on one, a new session goes to the least-loaded); each is probed on its own.

Whatever the kind, `open_engine` returns only after one tiny chat request proved the token fields come back
(`gateway.probe.probe_dialect`), so a misconfigured server fails the run before any container starts.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from concurrent.futures import Executor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from polar_cli.config import EngineConfig
from polar_cli.errors import UpstreamError
from polar_cli.gateway.continuation import TokenIn
from polar_cli.gateway.probe import probe_dialect, probe_tools, probe_traits, served_model, with_server_rules
from polar_cli.gateway.upstream_client import Upstream, UpstreamClient, upstream_root
from polar_cli.gateway.upstream_pool import UpstreamPool
from polar_cli.inference.gold import POLICIES
from polar_cli.inference.launcher import SGLangServer, launch_sglang
from polar_cli.inference.scripted import ScriptedUpstream
from polar_cli.inference.tokenizers import ChatTokenizer
from polar_cli.templates import ChatTemplate, TemplateTraits, detect_traits
from polar_cli.translate.dialects import dialect
from polar_cli.translate.upstream import UpstreamOptions

log = logging.getLogger("polar.engine")
T = TypeVar("T")


@dataclass
class EngineHandle:
    """A ready engine: what the gateway calls (``upstream``) and with which options."""

    kind: str
    upstream: Upstream  # UpstreamClient, an UpstreamPool (engine.urls), or an in-process ScriptedUpstream
    options: UpstreamOptions
    gpus: int
    # the end-of-turn id the engine is known to use (scripted engines); None: detected from the capture
    eot_token_id: int | None = None
    # token-in mode: the model's template and vocabulary the gateway renders new messages with
    token_in: TokenIn | None = None
    # what the engine's chat template refuses or drops: the gateway reshapes each history to fit (templates/)
    traits: TemplateTraits | None = None
    scripted: ScriptedUpstream | None = None
    server: SGLangServer | None = None

    @property
    def model(self) -> str:
        return self.options.model

    @property
    def pool(self) -> UpstreamPool | None:
        """``engine.urls``: the pool ``upstream`` is (the node tells it when a session closes); None otherwise."""
        return self.upstream if isinstance(self.upstream, UpstreamPool) else None

    async def close(self) -> None:
        """Close the upstream connections and stop a launched server (idempotent)."""
        try:
            await self.upstream.close()
        finally:
            if self.server is not None:
                server, self.server = self.server, None
                await asyncio.get_running_loop().run_in_executor(None, server.stop)


def upstream_options(config: EngineConfig, model: str) -> UpstreamOptions:
    """What the gateway sends the engine with (before the probe fixes the dialect); `polar doctor` probes with it too,
    so its check calls the server as a run would."""
    return UpstreamOptions(
        dialect=dialect(config.upstream_dialect()),
        model=model,
        chat_template_kwargs=config.chat_template_kwargs,
        max_tokens_cap=config.max_tokens_cap,
        extra_body=config.extra_body,
        reasoning=config.reasoning,
    )


def load_tokenizer(config: EngineConfig) -> ChatTokenizer:
    source = config.tokenizer_source()
    assert source is not None  # checked by the recipe model
    template = Path(config.chat_template) if config.chat_template else None
    return ChatTokenizer.load(source, chat_template=template)


def token_in_of(tokenizer: ChatTokenizer) -> TokenIn:
    return TokenIn(tokenizer.template, tokenizer.vocab, tokenizer.turn_ends)


async def _probed(
    handle: EngineHandle, config: EngineConfig, template: ChatTemplate | None, executor: Executor | None
) -> EngineHandle:
    # the probes only call post_json, which every upstream kind has
    if handle.pool is not None:
        await _probe_workers(handle, handle.pool)
    else:
        handle.options = replace(handle.options, dialect=await probe_dialect(handle.upstream, handle.options))
        if handle.scripted is None:
            await probe_tools(handle.upstream, handle.options)
    handle.traits = await template_traits(handle, config, template, executor)
    log.info("chat template traits: %s", ", ".join(handle.traits.held) or "none")
    return handle


async def _probe_workers(handle: EngineHandle, pool: UpstreamPool) -> None:
    """Every worker of a pool on its own: the token fields (all in the same dialect) and calls that offer tools."""
    found = {}
    for worker in pool.workers:
        found[worker.url] = await on_worker(worker.url, probe_dialect(worker.client, handle.options))
        await on_worker(worker.url, probe_tools(worker.client, replace(handle.options, dialect=found[worker.url])))
    names = {d.name for d in found.values()}
    if len(names) > 1:
        listed = ", ".join(f"{url}: {d.name}" for url, d in found.items())
        raise UpstreamError(f"engine.urls: the servers fill different token fields ({listed}): run one release")
    handle.options = replace(handle.options, dialect=found[pool.workers[0].url])


async def on_worker(url: str, step: Awaitable[T]) -> T:
    """``step``, whose upstream error is re-raised naming the worker ``url`` it came from."""
    try:
        return await step
    except UpstreamError as exc:
        raise UpstreamError(f"engine worker {url}: {exc.message}", status=exc.status, kind=exc.kind) from exc


async def template_traits(
    handle: EngineHandle, config: EngineConfig, template: ChatTemplate | None, executor: Executor | None
) -> TemplateTraits:
    """Declared in the recipe, else detected by rendering the local template, else probed on the server."""
    if config.template_traits is not None:
        return TemplateTraits.from_mapping(config.template_traits)
    if template is not None:
        traits = await asyncio.get_running_loop().run_in_executor(executor, detect_traits, template)
    else:
        traits = await probe_traits(handle.upstream, handle.options)
    return with_server_rules(traits, handle.options.dialect)


async def open_engine(config: EngineConfig, run_dir: Path, *, executor: Executor | None = None) -> EngineHandle:
    """The engine ``config`` names, started if need be and probed; the caller must `EngineHandle.close` it."""
    loop = asyncio.get_running_loop()
    if config.kind in ("gold", "noop"):
        tokenizer = await loop.run_in_executor(executor, load_tokenizer, config)
        model = config.model or f"polar-{config.kind}"
        scripted = ScriptedUpstream(POLICIES[config.kind], tokenizer, model, executor=executor, latency=config.latency)
        handle = EngineHandle(
            config.kind, scripted, upstream_options(config, model), config.gpu_count(), tokenizer.eot_id
        )
        handle.scripted = scripted
        handle.token_in = token_in_of(tokenizer) if config.token_in else None
        return await _probed(handle, config, tokenizer.template, executor)
    local = await loop.run_in_executor(executor, load_tokenizer, config) if config.tokenizer_source() else None
    token_in = token_in_of(local) if local is not None and config.token_in else None
    if config.urls is not None:
        return await _open_pool(config, token_in, local.template if local is not None else None, executor)
    server: SGLangServer | None = None
    if config.launches():
        assert config.sglang is not None
        server = await launch_sglang(config.sglang, run_dir / "logs" / "sglang.log")
        url = server.url
    else:
        assert config.url is not None
        url = upstream_root(config.url)
    client = UpstreamClient(url, timeout=config.upstream_timeout)
    handle = EngineHandle(
        config.kind, client, upstream_options(config, "default"), config.gpu_count(), server=server, token_in=token_in
    )
    try:
        name = config.model or (config.sglang.served_model_name if config.sglang is not None else None)
        handle.options = replace(handle.options, model=name or await served_model(client))
        await _probed(handle, config, local.template if local is not None else None, executor)
    except BaseException:
        await handle.close()
        raise
    log.info("engine %s at %s: model %s, dialect %s", config.kind, url, handle.model, handle.options.dialect.name)
    return handle


async def _open_pool(
    config: EngineConfig, token_in: TokenIn | None, template: ChatTemplate | None, executor: Executor | None
) -> EngineHandle:
    """``engine.urls``: one pool over the running servers, each of which must serve the same model with token ids."""
    urls = config.server_urls()
    pool = UpstreamPool(urls, timeout=config.upstream_timeout)
    handle = EngineHandle(config.kind, pool, upstream_options(config, "default"), config.gpu_count(), token_in=token_in)
    try:
        served = {url: await on_worker(url, served_model(w.client)) for url, w in zip(urls, pool.workers, strict=True)}
        if len(set(served.values())) > 1:
            listed = ", ".join(f"{url}: {name}" for url, name in served.items())
            raise UpstreamError(f"engine.urls: the servers serve different models ({listed})")
        handle.options = replace(handle.options, model=config.model or served[urls[0]])
        await _probed(handle, config, template, executor)
    except BaseException:
        await handle.close()
        raise
    log.info(
        "engine %s at %d servers (%s): model %s, dialect %s",
        config.kind,
        len(urls),
        ", ".join(urls),
        handle.model,
        handle.options.dialect.name,
    )
    return handle
