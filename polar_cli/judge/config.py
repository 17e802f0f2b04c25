"""The recipe's ``judge:`` section (docs/judge.md): which model scores sessions against which rubric, how the
transcript is cut, and how the judge's score combines with the tests' reward."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from polar_cli.errors import ConfigError

JudgeMode = Literal["weighted", "gate"]
ChunkCombine = Literal["mean", "min"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, frozen=True)


class JudgeWeights(_Strict):
    tests: float = Field(default=0.5, ge=0)
    """Weight of the tests' reward (1.0 resolved, else 0.0) in mode ``weighted``."""
    judge: float = Field(default=0.5, ge=0)
    """Weight of the judge's score (0..1) in mode ``weighted``."""

    @model_validator(mode="after")
    def _some_weight(self) -> JudgeWeights:
        if self.tests + self.judge <= 0:
            raise ValueError("weights: tests + judge must be above 0")
        return self


class JudgeConfig(_Strict):
    rubric: str
    """The rubric file (YAML; relative to the recipe file): ``criteria``, each with ``name``, ``description`` and
    ``weight`` (docs/judge.md "Rubric")."""
    url: str | None = None
    """Base URL of an OpenAI-compatible Chat Completions endpoint (with or without /v1; http or https). None: the
    run's own engine answers the judge's calls (never through the gateway, so they are never captured)."""
    model: str | None = None
    """Model name sent to ``url`` (needed with ``url``; None with the engine: the engine's served model)."""
    api_key_env: str | None = None
    """Name of the environment variable holding the endpoint's API key (sent as a Bearer token); the key itself is
    never written in a recipe or a row."""
    mode: JudgeMode = "gate"
    """gate: accepted only if the tests pass AND the judge's score >= ``threshold`` (reward: the tests' reward, 0.0
    when the gate refuses); weighted: reward = weighted mean of the tests' reward and the judge's score, accepted
    when it is >= ``threshold``."""
    threshold: float = Field(default=0.5, ge=0, le=1)
    """The acceptance bar on the judge's score (gate) or on the combined reward (weighted)."""
    weights: JudgeWeights = Field(default_factory=JudgeWeights)
    """mode=weighted: the weights of the tests' reward and the judge's score (normalised by their sum)."""
    tool_output_chars: int = Field(default=2000, ge=100)
    """Cap on each tool output in the transcript (its head and tail kept, the middle cut and marked)."""
    message_chars: int = Field(default=4000, ge=100)
    """Cap on each other message (user, assistant text, tool-call arguments) in the transcript."""
    include_system: bool = False
    """Show the harness's system prompts to the judge (they are the harness's words, not the agent's; long)."""
    chunk_chars: int = Field(default=48000, ge=1000)
    """A transcript longer than this is scored in chunks of at most this many characters, each with the task."""
    chunk_combine: ChunkCombine = "mean"
    """How per-chunk scores of a criterion combine: mean (each chunk weighted by its characters) or min."""
    retries: int = Field(default=3, ge=0)
    """Further tries of a chunk whose call failed or whose answer could not be parsed; after them the session is a
    ``judge_error`` (a machinery error, retried by the next run; never a reward of 0)."""
    timeout: float = Field(default=300.0, gt=0)
    """Seconds one judge call may take."""
    max_tokens: int = Field(default=1024, ge=16)
    """``max_tokens`` of each judge call."""
    temperature: float = Field(default=0.0, ge=0)
    """``temperature`` of each judge call (0: as reproducible as the endpoint allows)."""
    structured: bool = True
    """Ask for the answer's JSON schema as ``response_format`` (vLLM, SGLang and OpenAI constrain decoding to it)."""
    extra_body: dict[str, Any] | None = None
    """More fields for each judge call's body (e.g. ``{chat_template_kwargs: {enable_thinking: false}}``)."""

    @field_validator("rubric")
    @classmethod
    def _rubric_reads(cls, path: str) -> str:
        from polar_cli.judge.rubric import load_rubric

        try:
            load_rubric(path)
        except ConfigError as exc:
            raise ValueError(str(exc)) from exc
        return path

    @model_validator(mode="after")
    def _endpoint(self) -> JudgeConfig:
        if self.url is not None and not self.model:
            raise ValueError("url needs model (the judge model's name at that endpoint)")
        if self.url is None and self.api_key_env is not None:
            raise ValueError("api_key_env is for an endpoint given by url; the run's engine needs none")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"url must be http:// or https://, got {self.url!r}")
        if self.message_chars >= self.chunk_chars or self.tool_output_chars >= self.chunk_chars:
            raise ValueError("chunk_chars must be above message_chars and tool_output_chars")
        return self
