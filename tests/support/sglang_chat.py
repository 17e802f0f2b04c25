"""SGLang 0.5.23's ``/v1/chat/completions`` path on a real chat template, for the test double (`SGLangDouble`).

SGLang's own code runs wherever it runs without a GPU:

- the request is SGLang's ``ChatCompletionRequest``; each message is ``model_dump()``-ed and goes through
  serving_chat's ``normalize_assistant_tool_call_arguments`` and ``normalize_tool_content`` and jinja_template_utils'
  ``process_content_for_template_format`` with the format ``detect_jinja_template_content_format`` finds;
- the template is rendered by transformers' ``apply_chat_template`` (what SGLang's tokenizer calls) and the text
  encoded with the template's vocabulary (tests/support/templates.py);
- the answer's message is what SGLang's ``ReasoningParser`` and ``FunctionCallParser`` make of the sampled text;
- the template's reasoning mode comes from SGLang's ``template_detection``, whose rules also name the parsers
  ``--reasoning-parser auto`` / ``--tool-call-parser auto`` would pick (`DEFAULT_PARSERS` is pinned to them by a test).

serving_chat.py imports the scheduler (model configs, torchvision, CUDA kernels) at module level, so on a CPU its
module-level helpers are compiled from the installed file itself (`_serving_chat_helpers`): SGLang's code, not a copy.
The glue between those steps (which kwargs and tools reach the template, the retry with function-only tools, the
error each failure answers, when the parsers run) follows ``OpenAIServingChat._convert_to_internal_request``,
``_process_messages``, ``_apply_jinja_template`` and ``_build_chat_response``: methods of a server object that needs
a tokenizer manager, so they are followed here, not called.

Not modelled: multimodal content (media parts are refused by the text-only models anyway), SGLang's tool-message
reordering (it only reorders runs that carry media), grammar-constrained output for ``tool_choice`` required or named
(the double samples the template's own call syntax, as a structural-tag constraint makes a model do), and
``skip_special_tokens`` (the sampled text is decoded whole: the six templates' turns hold no special token that the
real tokenizers mark as skipped, the end-of-turn token aside, which SGLang trims as the matched stop).
"""

from __future__ import annotations

import ast
import copy
import json
import sys
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

import jinja2
import orjson
import sglang
from sglang.srt.entrypoints.openai.protocol import (
    ChatCompletionMessageGenericParam,
    ChatCompletionRequest,
    Tool,
    ToolChoice,
)
from sglang.srt.function_call.function_call_parser import FunctionCallParser
from sglang.srt.parser.jinja_template_utils import (
    detect_jinja_template_content_format,
    process_content_for_template_format,
)
from sglang.srt.parser.reasoning_parser import ReasoningParser
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from tests.support import templates
from tests.support.chatml_ids import Piece

# (tool-call parser, reasoning parser) per template: what SGLang's auto-detection picks (qwen3: "qwen", the same
# Qwen25Detector as "qwen25", the name SGLang's Qwen3 docs use)
DEFAULT_PARSERS: Mapping[str, tuple[str | None, str | None]] = {
    "qwen3": ("qwen25", "qwen3"),
    "qwen3.5": ("qwen3_coder", "qwen3"),
    "qwen3.6-unsloth": ("qwen3_coder", "qwen3"),
    "nemotron-3-super": ("qwen3_coder", "nemotron_3"),
    "gpt-oss": ("gpt-oss", "gpt-oss"),
    "gemma-4": ("gemma4", "gemma4"),
    # SGLang detects no parser for the Mistral family or Llama 3.1: served with `auto`, their calls stay text
    "ministral-3": (None, None),
    "ministral-3-reasoning": (None, None),
    "devstral-small-2507": (None, None),
    "glm-4.6": ("glm45", "glm45"),
    "deepseek-v3.1": ("deepseekv31", "deepseek-r1"),
    "kimi-k2": ("kimi_k2", "kimi_k2"),
    "minimax-m2": ("minimax-m2", "minimax"),
    "llama-3.1": (None, None),
}
# Templates the double cannot answer on, and why; it renders their prompts (the parity tests run on all fourteen)
UNSAMPLED: Mapping[str, str] = {
    # a GLM turn has no end token of its own: the model stops on the next turn's opener; `ChatTokenizer` now ends a
    # sampled turn there (docs/fidelity.md, "Token-in mode"), but no answering case is written for it yet
    "glm-4.6+qwen3.5-vocab": "its turn ends on the next turn's opener: no answering case written yet",
    # the turn rendered after the `<think></think>` generation prompt comes out as
    # `<think>` + the call + `</think>`, not the call syntax DeepSeek-V3.1 samples: not yet worked out
    "deepseek-v3.1+v3-vocab": "the sampled tool-call turn is not the syntax the model writes",
}
SAMPLED_NAMES = tuple(n for n in templates.NAMES if n not in UNSAMPLED)
# SGLang keys some behaviour on the checkpoint's model_type (hf_config), which a template alone does not carry
MODEL_TYPES: Mapping[str, str] = {"gpt-oss": "gpt_oss", "gemma-4": "gemma4"}
UNSET: Any = object()
FinishReason = Literal["stop", "length", "tool_calls"]

SERVING_CHAT = Path(sglang.__file__).parent / "srt" / "entrypoints" / "openai" / "serving_chat.py"
_HELPERS = ("parse_tool_call_arguments", "normalize_assistant_tool_call_arguments", "normalize_tool_content")


@cache
def _serving_chat_helpers() -> Mapping[str, Callable[..., Any]]:
    """serving_chat's pre-template helpers: imported where SGLang is whole, else compiled from its installed source."""
    try:
        from sglang.srt.entrypoints.openai import serving_chat

        return {name: getattr(serving_chat, name) for name in _HELPERS}
    except ImportError:
        pass
    tree = ast.parse(SERVING_CHAT.read_text())
    defs: list[ast.stmt] = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in _HELPERS]
    if {d.name for d in defs if isinstance(d, ast.FunctionDef)} != set(_HELPERS):
        raise ImportError(f"{SERVING_CHAT} no longer defines {', '.join(_HELPERS)}")
    namespace: dict[str, Any] = {"orjson": orjson, "Any": Any}
    exec(compile(ast.Module(body=defs, type_ignores=[]), str(SERVING_CHAT), "exec"), namespace)
    return {name: namespace[name] for name in _HELPERS}


@contextmanager
def _absent_modules_stubbed(*names: str) -> Iterator[None]:
    """Import-time stand-ins for modules that cannot be imported on a CPU, removed again afterwards."""
    added = []
    for name in names:
        if name not in sys.modules:
            sys.modules[name] = types.ModuleType(name, "stand-in: never called by the code the double uses")
            added.append(name)
    try:
        yield
    finally:
        for name in added:
            sys.modules.pop(name, None)


@cache
def template_detection() -> types.ModuleType:
    """SGLang's template_detection; its server-args hooks (never used here) import the model configs."""
    try:
        from sglang.srt.parser import template_detection as module
    except ImportError:
        hooks = ("sglang.srt.arg_groups.muse_spark_hook", "sglang.srt.arg_groups.overrides")
        with _absent_modules_stubbed(*hooks):
            for hook in hooks:
                stub = sys.modules[hook]
                for attr in ("muse_spark_chat_template_default", "declare_resolution", "resolving_view"):
                    setattr(stub, attr, _never_called)
            from sglang.srt.parser import template_detection as module
    found: types.ModuleType = module
    return found


def _never_called(*_: Any, **__: Any) -> Any:
    raise NotImplementedError("a server-args hook the double never calls")


class Refusal(Exception):
    """SGLang's error answer to a request it cannot serve: the status, ``message`` and ``type`` of its ErrorResponse."""

    def __init__(self, status: int, message: str, err_type: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type


@dataclass(frozen=True)
class Prompt:
    """What SGLang fed the model for one request."""

    request: ChatCompletionRequest  # after SGLang's own edits (defaults merged, reasoning_effort moved)
    ids: tuple[int, ...]
    text: str | None  # the rendered template; None when the request brought input_ids
    messages: tuple[dict[str, Any], ...] | None  # the messages as the template saw them
    tools: list[dict[str, Any]] | None  # the tools as the template saw them
    kwargs: dict[str, Any]  # the template kwargs beyond messages, tools and add_generation_prompt


@dataclass(frozen=True)
class Answer:
    """One sampled turn and what SGLang's parsers made of it."""

    sampled: tuple[Piece, ...]
    content: str
    reasoning: str | None
    tool_calls: tuple[tuple[str, str], ...]  # (name, arguments JSON) as the tool-call parser returned them
    finish_reason: FinishReason
    matched_stop: int | None
    reasoning_tokens: int


class _TemplateHost:
    """The two things transformers' apply_chat_template asks of its tokenizer: the template and the special tokens."""

    def __init__(self, source: str, special_tokens_map: Mapping[str, str]) -> None:
        self.source = source
        self.special_tokens_map = dict(special_tokens_map)

    def get_chat_template(self, chat_template: str | None = None, tools: Any = None) -> str:
        return chat_template or self.source


class SGLangTemplate:
    """A model behind the double: a real template and vocabulary, and the server's parser flags."""

    def __init__(
        self,
        name: str,
        *,
        tool_call_parser: str | None = UNSET,
        reasoning_parser: str | None = UNSET,
        chat_template_kwargs_default: Mapping[str, Any] | None = None,
    ) -> None:
        self.case = templates.case(name)
        self.family = self.case.file.removesuffix(".jinja")
        self.tokenizer = templates.tokenizer(name)
        self.vocab = self.tokenizer.vocab
        self.source = self.tokenizer.template.source
        default_tool, default_reasoning = DEFAULT_PARSERS[self.family]
        self.tool_call_parser = default_tool if tool_call_parser is UNSET else tool_call_parser
        self.reasoning_parser = default_reasoning if reasoning_parser is UNSET else reasoning_parser
        self.default_kwargs = dict(chat_template_kwargs_default or {})
        self.model_type = MODEL_TYPES.get(self.family, "")
        self.content_format = detect_jinja_template_content_format(self.source)
        self.force_reasoning, self.reasoning_config = template_detection().detect_reasoning_pattern(self.source)
        self._host = _TemplateHost(self.source, self.tokenizer.template.variables)
        self._eot_ids = {int(i): t for t in self.tokenizer.eot_tokens if (i := self.vocab.token_id(t)) is not None}
        if self.tool_call_parser is not None and self.tool_call_parser not in FunctionCallParser.ToolCallParserEnum:
            raise ValueError(f"SGLang has no tool-call parser {self.tool_call_parser!r}")
        if self.reasoning_parser is not None and self.reasoning_parser not in ReasoningParser.DetectorMap:
            raise ValueError(f"SGLang has no reasoning parser {self.reasoning_parser!r}")

    @property
    def eot_id(self) -> int:
        return self.tokenizer.eot_id

    # -- the prompt ------------------------------------------------------------------------------

    def prompt(self, validated: ChatCompletionRequest) -> Prompt:
        """The prompt ids SGLang computes for ``validated`` (a copy is edited, as SGLang edits its request)."""
        request = validated.model_copy(deep=True)
        # _convert_to_internal_request: reasoning_effort moves out of the template kwargs onto the request
        effort = request.chat_template_kwargs.pop("reasoning_effort", None) if request.chat_template_kwargs else None
        if self.model_type == "gpt_oss" and effort == "none":
            raise Refusal(400, f"Harmony does not support reasoning effort {effort}", "BadRequest")
        if effort is not None:
            request.reasoning_effort = effort
        # _process_messages: the server's --default-chat-template-kwargs fill what the request left unset
        if self.default_kwargs:
            merged = dict(request.chat_template_kwargs or {})
            for key, value in self.default_kwargs.items():
                merged.setdefault(key, value)
            request.chat_template_kwargs = merged
            if merged.get("reasoning_effort") is not None and request.reasoning_effort is None:
                request.reasoning_effort = merged["reasoning_effort"]
        tools = self._template_tools(request)
        if request.input_ids is not None:
            return Prompt(request, tuple(request.input_ids), None, None, tools, self._template_kwargs(request))
        messages, kwargs = self._template_messages(request), self._template_kwargs(request)
        messages, prefix = self._last_assistant_message(messages, request)
        text = self._render(messages, tools, kwargs)
        ids = self.vocab.encode(text) + (self.vocab.encode(prefix) if prefix else [])
        return Prompt(request, tuple(ids), text, tuple(messages), tools, kwargs)

    def effective_tools(self, request: ChatCompletionRequest) -> list[Tool]:
        tools = list(request.tools or [])
        for message in request.messages:
            if (
                isinstance(message, ChatCompletionMessageGenericParam)
                and message.role in ("root", "system", "developer")
                and message.tools
            ):
                tools.extend(message.tools)
        return tools

    def _template_tools(self, request: ChatCompletionRequest) -> list[dict[str, Any]] | None:
        if not self.effective_tools(request) or request.tool_choice == "none":
            return None
        if not isinstance(request.tool_choice, str):
            name = request.tool_choice.function.name
            return [t.model_dump() for t in request.tools or [] if t.function.name == name] or None
        return [t.model_dump() for t in request.tools] if request.tools else None

    def _template_messages(self, request: ChatCompletionRequest) -> list[dict[str, Any]]:
        helpers = _serving_chat_helpers()
        messages = [m.model_dump() for m in request.messages]
        try:
            for message in messages:
                helpers["normalize_assistant_tool_call_arguments"](message, strict=True)
        except ValueError as exc:
            raise Refusal(400, str(exc), "BadRequest") from exc
        out = []
        for message in copy.deepcopy(messages):
            if message.get("content") is None:
                message["content"] = ""
            processed = process_content_for_template_format(message, self.content_format, [], [], [], [])
            processed["content"] = helpers["normalize_tool_content"](processed["role"], processed.get("content"))
            out.append(processed)
        return out

    @staticmethod
    def _last_assistant_message(
        messages: list[dict[str, Any]], request: ChatCompletionRequest
    ) -> tuple[list[dict[str, Any]], str | None]:
        # _handle_last_assistant_message: a trailing assistant text becomes the prefix to continue, or a user turn
        if messages and messages[-1].get("role") == "assistant" and isinstance(messages[-1].get("content"), str):
            content = messages[-1]["content"]
            if request.continue_final_message:
                return messages[:-1], content
            return [*messages[:-1], {"role": "user", "content": content}], None
        return messages, None

    def _template_kwargs(self, request: ChatCompletionRequest) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        if request.reasoning_effort is not None:
            kwargs["reasoning_effort"] = request.reasoning_effort
        kwargs.update(request.chat_template_kwargs or {})
        config = self.reasoning_config
        if config is not None and config.effort_kwarg is not None and request.reasoning_effort == "low":
            kwargs.setdefault(config.effort_kwarg, True)
        return kwargs

    def _render(self, messages: Sequence[dict[str, Any]], tools: list[dict[str, Any]] | None, kwargs: Any) -> str:
        try:
            return self.apply_chat_template(messages, tools, kwargs)
        except Exception:
            # SGLang retries with function-only tools (templates such as Mistral's want them unwrapped)
            flat = [t.get("function", t) for t in tools] if tools else None
            try:
                return self.apply_chat_template(messages, flat, kwargs)
            except (jinja2.TemplateError, TypeError) as exc:  # serving_chat's _CHAT_TEMPLATE_CLIENT_ERRORS
                raise Refusal(400, str(exc), "BadRequest") from exc
            except Exception as exc:  # serving_base.handle_request's catch-all
                raise Refusal(500, f"Internal server error: {exc}", "InternalServerError") from exc

    def apply_chat_template(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        kwargs: Mapping[str, Any],
        *,
        add_generation_prompt: bool = True,
    ) -> str:
        """transformers' apply_chat_template(tokenize=False) as SGLang calls it, on this template."""
        text = PreTrainedTokenizerBase.apply_chat_template(
            self._host,  # type: ignore[arg-type]
            [dict(m) for m in copy.deepcopy(messages)],
            tools=[dict(t) for t in tools] if tools else None,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            return_dict=False,
            **kwargs,
        )
        return str(text)

    # -- the answer ------------------------------------------------------------------------------

    def answer(
        self,
        prompt: Prompt,
        content: str,
        reasoning: str | None,
        tool_calls: Sequence[tuple[str, Mapping[str, Any]]],
        *,
        stopped: bool,
    ) -> Answer:
        """The turn a model trained on this template samples, parsed as SGLang's ``_build_chat_response`` does."""
        turn: dict[str, Any] = {"role": "assistant", "content": content}
        if reasoning:
            turn["reasoning_content"] = reasoning  # read by the Qwen, Nemotron and Gemma templates
            turn["thinking"] = reasoning  # read by gpt-oss's
        if tool_calls:
            turn["tool_calls"] = [
                {"id": f"call_{k}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
                for k, (name, args) in enumerate(tool_calls)
            ]
        messages = list(prompt.messages) if prompt.messages is not None else self._context_for_token_in(prompt)
        text = self.tokenizer.sampled_text(messages, prompt.tools, turn, prompt.kwargs)
        ids = self.vocab.encode(text)
        stop = ids[-1] if ids and ids[-1] in self._eot_ids else None
        if stop is None:
            raise ValueError(f"{self.case.name}: the sampled turn does not end with an end-of-turn token: {text!r}")
        if not stopped:
            ids = ids[:-1]  # max_tokens reached: the end-of-turn token was never sampled
        # the detokenizer trims the matched stop token, except gpt-oss's <|call|> under the gpt-oss tool parser
        kept = not stopped or (self.tool_call_parser == "gpt-oss" and self._eot_ids[stop] == "<|call|>")
        output = self.vocab.decode(ids if kept else ids[:-1])
        finish: dict[str, Any] = {"type": "stop", "matched": stop} if stopped else {"type": "length"}
        parsed_reasoning, output = self._parse_reasoning(prompt.request, output)
        calls, output = self._parse_tool_calls(prompt.request, output, finish)
        return Answer(
            sampled=tuple((i, self.vocab.decode([i])) for i in ids),
            content=output or "",
            reasoning=parsed_reasoning or None,
            tool_calls=calls,
            finish_reason=finish["type"],
            matched_stop=finish.get("matched"),
            reasoning_tokens=self._reasoning_tokens(ids),
        )

    def _context_for_token_in(self, prompt: Prompt) -> list[dict[str, Any]]:
        # token-in: SGLang renders nothing, but the turn is still the one the messages call for
        try:
            messages = self._template_messages(prompt.request)
            return self._last_assistant_message(messages, prompt.request)[0]
        except Refusal:
            return [{"role": "user", "content": ""}]

    def _thinking_requested(self, request: ChatCompletionRequest) -> bool:
        # _get_reasoning_from_request, for the template configurations detection yields
        if not self.reasoning_parser:
            return False
        kwargs = request.chat_template_kwargs
        config = self.reasoning_config
        if config is None:
            mode = ReasoningParser.DetectorMap[self.reasoning_parser]().reasoning_default
            if mode == "always":
                return True
            if mode in ("thinking", "enable_thinking"):
                return not kwargs or kwargs.get(mode) is not False
            if mode in ("explicit_thinking", "explicit_enable_thinking"):
                return kwargs is not None and kwargs.get(mode.removeprefix("explicit_")) is True
            return mode == "mistral" and request.reasoning_effort not in (None, "none")
        if config.special_case == "always":
            return True
        if config.special_case == "mistral":
            return request.reasoning_effort not in (None, "none")
        if config.toggle_param is None or config.default_enabled is None:
            return False
        if config.default_enabled:
            return not kwargs or kwargs.get(config.toggle_param) is not False
        return kwargs is not None and kwargs.get(config.toggle_param) is True

    def tool_call_parsing_active(self, request: ChatCompletionRequest) -> bool:
        if not self.tool_call_parser or request._response_parser_json_response_format:
            return False
        if not self.effective_tools(request):
            return bool(FunctionCallParser.ToolCallParserEnum[self.tool_call_parser].parses_without_tools())
        return bool(request.tool_choice != "none")

    def _parse_reasoning(self, request: ChatCompletionRequest, text: str) -> tuple[str | None, str]:
        if not (self.reasoning_parser and request.separate_reasoning):
            return None, text
        parser = ReasoningParser(
            model_type=self.reasoning_parser,
            stream_reasoning=False,
            force_reasoning=self.force_reasoning or self._thinking_requested(request),
            request=request,
            tool_call_parser_active=self.tool_call_parsing_active(request),
        )
        try:
            reasoning, rest = parser.parse_non_stream(text)
        except Exception as exc:
            raise Refusal(500, "Failed to parse reasoning content", "InternalServerError") from exc
        return reasoning, rest

    def _parse_tool_calls(
        self, request: ChatCompletionRequest, text: str, finish: dict[str, Any]
    ) -> tuple[tuple[tuple[str, str], ...], str]:
        """_process_tool_calls: the template's own syntax first, then (required/named) a JSON array."""
        if not self.tool_call_parsing_active(request):
            return (), text
        choice = request.tool_choice
        required = choice == "required" or isinstance(choice, ToolChoice)
        if self.tool_call_parser:
            parser = FunctionCallParser(
                self.effective_tools(request),
                self.tool_call_parser,
                tool_choice=choice,
                prefix=request._response_parser_prefix,
            )
            owns_format = parser.owns_tool_format()
            if (not required or owns_format) and parser.has_tool_call(text):
                try:
                    rest, items = parser.parse_non_stream(text)
                except Exception:
                    return (), text
                if not items:
                    return (), rest
                if finish["type"] == "stop":
                    finish.update(type="tool_calls", matched=None)
                return tuple((item.name, item.parameters) for item in items), rest
            if required and owns_format:
                return (), text
        if not required:
            return (), text
        try:
            data = orjson.loads(text)
        except orjson.JSONDecodeError:
            return (), text
        data = [data] if isinstance(data, dict) else data
        if not isinstance(data, list) or not all(isinstance(d, dict) and "name" in d for d in data):
            return (), text
        if finish["type"] == "stop":
            finish.update(type="tool_calls", matched=None)
        return tuple((d["name"], json.dumps(d.get("parameters", {}), ensure_ascii=False)) for d in data), ""

    def _reasoning_tokens(self, ids: Sequence[int]) -> int:
        # the scheduler counts sampled ids up to and including the reasoning parser's think-end token(s)
        if not self.reasoning_parser:
            return 0
        end = self.vocab.encode(ReasoningParser.DetectorMap[self.reasoning_parser]().think_end_token)
        for at in range(len(ids) - len(end) + 1):
            if end and list(ids[at : at + len(end)]) == end:
                return at + len(end)
        return 0
