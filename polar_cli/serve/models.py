"""What a trainer sends `polar serve`: the TaskRequest, validated with unknown keys refused everywhere.

A task is one prompt for a GRPO group: an instruction in an image, a SWE-style instance (a whole manifest row, or a
manifest and an instance id), or a Harbor task folder (``harbor_task``), run ``num_samples`` times as independent
sessions. Everything a session needs that the task does not say comes from the service's configuration
(`serve.config.ServeConfig`).

The request is checked twice: by these models (types, ranges, unknown keys; a 400 naming the field), then resolved
against the service (`serve.tasks.resolve`: the manifest row parsed, the harness known, the evaluator possible for
what was given), again a 400 naming the field.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from polar_cli.harness.custom import CustomHarnessConfig
from polar_cli.swe.tamper import TamperMode

# task ids name files in the state directory and appear in URLs: a safe alphabet, no leading dot
# fullmatch: `$` would match before a trailing newline (a file `results/t1\n.jsonl`, callbacks never delivered)
TASK_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,127}")
TestStatusName = Literal["PASSED", "FAILED", "SKIPPED", "ERROR"]
# sampling fields a task may set per sample; the gateway puts them over the harness's own values
SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "min_p", "max_tokens", "repetition_penalty")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, frozen=True)


class InstanceRef(_Strict):
    manifest: str
    """A manifest file the service can read (.json/.jsonl/.parquet), or a datasets name where a hub is reachable."""
    instance_id: str = Field(min_length=1)
    """The row to run."""


class HarnessSpec(_Strict):
    name: str = Field(min_length=1)
    """A harness the service offers (`serve.harnesses`), or the name of ``custom``."""
    custom: CustomHarnessConfig | None = None
    """A harness defined here, without code (as a recipe's ``custom_harnesses.NAME``)."""
    agent_timeout: float | None = Field(default=None, gt=0)
    """Seconds the harness process may run (None: what is left of the session's timeout)."""
    model: str | None = None
    """The model name the harness is told (None: its adapter's default; the gateway serves its own model anyway)."""


class TaskRuntime(_Strict):
    image: str | None = None
    """The container image (needed with ``instruction``; an instance has its own)."""
    workdir: str | None = None
    """Where the harness works (None: the service's ``runtime.workdir``)."""
    cpus: float | None = Field(default=None, gt=0)
    memory_mb: int | None = Field(default=None, ge=64)
    output_limit_mb: int | None = Field(default=None, ge=1)
    network: str | None = Field(default=None, min_length=1)
    """gateway-only | host | bridge | a Docker network (None: the service's)."""


class BuilderSpec(_Strict):
    strategy: Literal["prefix_merging", "per_request"] | None = None
    """None: the service's ``builder.strategy``."""
    token_in: bool | None = None
    """Send continuing calls as exact ids (needs an engine with ``token_in``); False turns it off for this task."""
    drift: Literal["strict", "tolerant"] | None = None


class SwebenchEvaluator(_Strict):
    type: Literal["swebench"] = "swebench"
    tamper: TamperMode | None = None
    """None: the service's ``eval.tamper``."""
    network: str | None = None
    timeout: float | None = Field(default=None, gt=0)


class CommandEvaluator(_Strict):
    type: Literal["command"] = "command"
    command: str = Field(min_length=1)
    """A shell command run in a fresh container of the image, in the workdir, after the patch is applied."""
    log_parser: str = "parse_log_pytest"
    """A SWE-bench log parser name (``parse_log_pytest``, ``parse_log_django``, ...) that reads per-test statuses."""
    expected: dict[str, TestStatusName] = Field(min_length=1)
    """Test name -> the status it must have; reward 1.0 when every one has it, else 0.0."""
    timeout: float | None = Field(default=None, gt=0)


class HarborEvaluator(_Strict):
    type: Literal["harbor"] = "harbor"
    """A Harbor task's verifier (``harbor_task``'s tests/test.sh) on the agent's patch in a fresh container; the reward
    is its ``reward`` value (else the mean of its named values), all of them in the report."""
    reward_threshold: float = 1.0
    """The report's ``resolved``: the reward is at least this."""


class SessionCompletedEvaluator(_Strict):
    type: Literal["session_completed"] = "session_completed"
    """Reward 1.0 when the harness ended normally (exit 0, in time), else 0.0: no tests."""


Evaluator = Annotated[
    SwebenchEvaluator | CommandEvaluator | HarborEvaluator | SessionCompletedEvaluator, Field(discriminator="type")
]


class Sampling(_Strict):
    seed_base: int | None = Field(default=None, ge=0)
    """Sample i is sent with ``seed = seed_base + i`` on every model call (None: no seed)."""
    temperature: float | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = None
    min_p: float | None = Field(default=None, ge=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1)
    repetition_penalty: float | None = Field(default=None, gt=0)

    def for_sample(self, index: int) -> dict[str, Any]:
        """The fields sample ``index`` sends upstream."""
        fields = {k: getattr(self, k) for k in SAMPLING_FIELDS if getattr(self, k) is not None}
        if self.seed_base is not None:
            fields["seed"] = self.seed_base + index
        return fields


class TrainerSpec(_Strict):
    """How the trainer wants each sample's row (`serve.shaping`)."""

    masked_reward: Literal["null", "zero"] | None = None
    """A masked session's ``reward``: ``null`` (TRL: no reward, advantage 0) or ``zero`` (None: the service's
    ``service.masked_reward``)."""
    rows: Literal["all", "main"] = "all"
    """``all``: every trace of the sample; ``main``: exactly one, the main trace, with ``env_mask`` (TRL's loss
    mask)."""
    on_policy_only: bool = False
    """Mask samples whose calls saw more than one weight version (``masked_reason: off_policy``)."""


class TaskRequest(_Strict):
    """One task: ``num_samples`` sessions of one harness on one prompt, graded by one evaluator."""

    task_id: str
    """Chosen by the client: resubmitting the same id with the same body is idempotent, another body is a 409."""
    instruction: str | None = None
    """What the harness is asked. With ``instance``: a format string over {problem_statement}, {repo},
    {instance_id}, {workdir} (None: the problem statement)."""
    instance: dict[str, Any] | InstanceRef | None = None
    """A manifest row (SWE-Gym / SWE-bench fields), or ``{manifest, instance_id}``."""
    harbor_task: str | None = Field(default=None, min_length=1)
    """A Harbor task folder the service can read (`polar_cli.harbor`): its instruction.md, image (built beforehand,
    e.g. by ``polar validate`` on its folder), workdir, timeouts, resources and verifier."""
    num_samples: int = Field(default=1, ge=1, le=1024)
    """Sessions in the group."""
    harness: str | HarnessSpec
    """A harness name, or its settings."""
    runtime: TaskRuntime = Field(default_factory=TaskRuntime)
    builder: BuilderSpec = Field(default_factory=BuilderSpec)
    evaluator: Evaluator | None = None
    """None: ``swebench`` for an instance, ``session_completed`` for an instruction."""
    timeout_seconds: float | None = Field(default=None, gt=0)
    """Seconds per session from the start of its INIT (not from submission) to the end of its run (None: the
    service's ``timeouts.session``)."""
    priority: int = 0
    """Higher runs first; equal priorities run in submission order."""
    early_stop_min_usable_sessions: int | None = Field(default=None, ge=1)
    """Once this many sessions are usable (completed or timed out, not errors), the rest are cut and returned as
    fully masked placeholders, so the group keeps its size."""
    sampling: Sampling = Field(default_factory=Sampling)
    max_sampled_tokens: int | None = Field(default=None, ge=1)
    """The most tokens the model may sample over all of a session's calls: each call's ``max_tokens`` is lowered to
    what is left, and once it is used up the gateway answers further calls with a context-length error in the
    harness's API (`gateway.budget`); the session's ``stats.token_budget_exhausted`` then says so."""
    trainer: TrainerSpec = Field(default_factory=TrainerSpec)
    callback_url: str | None = None
    """POSTed the TaskResult once the task is done (at least once, ``Idempotency-Key: <task_id>``)."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Passed through untouched into every result."""

    @field_validator("task_id")
    @classmethod
    def _task_id(cls, value: str) -> str:
        if not TASK_ID.fullmatch(value):
            raise ValueError("1-128 characters of A-Z a-z 0-9 _ . : -, not starting with . : or -")
        return value

    @field_validator("instance", mode="before")
    @classmethod
    def _instance_ref(cls, value: Any) -> Any:
        # a mapping that names a manifest is a reference (a manifest row has no such field), checked as one
        if isinstance(value, dict) and "manifest" in value:
            return InstanceRef.model_validate(value)
        return value

    @field_validator("callback_url")
    @classmethod
    def _callback(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^/\s]+", value):
            raise ValueError("an http:// or https:// URL")
        return value

    @model_validator(mode="after")
    def _prompt(self) -> TaskRequest:
        if self.harbor_task is not None and self.instance is not None:
            raise ValueError("give instance or harbor_task, not both")
        if self.instruction is None and self.instance is None and self.harbor_task is None:
            raise ValueError("give instruction, instance or harbor_task")
        if self.instance is None and self.harbor_task is None and self.runtime.image is None:
            raise ValueError("runtime.image: needed with an instruction and no instance")
        if self.harbor_task is None and isinstance(self.evaluator, HarborEvaluator):
            raise ValueError("evaluator: harbor runs a Harbor task's verifier; give harbor_task")
        if self.instance is None and isinstance(self.evaluator, SwebenchEvaluator):
            raise ValueError("evaluator: swebench grades an instance; give instance, or use command/session_completed")
        n = self.early_stop_min_usable_sessions
        if n is not None and n > self.num_samples:
            raise ValueError(f"early_stop_min_usable_sessions: {n} is more than num_samples ({self.num_samples})")
        return self

    def harness_spec(self) -> HarnessSpec:
        return HarnessSpec(name=self.harness) if isinstance(self.harness, str) else self.harness

    def evaluator_spec(self) -> SwebenchEvaluator | CommandEvaluator | HarborEvaluator | SessionCompletedEvaluator:
        if self.evaluator is not None:
            return self.evaluator
        if self.harbor_task is not None:
            return HarborEvaluator()
        return SwebenchEvaluator() if self.instance is not None else SessionCompletedEvaluator()


class PauseRequest(_Strict):
    mode: Literal["drain", "abort"] = "drain"


class WeightsRequest(_Strict):
    weight_version: str = Field(min_length=1, max_length=256)
    """Stamped on every capture record and trajectory produced from now on."""
    weights_path: str | None = Field(default=None, min_length=1)
    """A checkpoint directory (safetensors in the model's layout) every engine server loads (`serve.weights`); None:
    the version is only stamped (the trainer loaded the weights itself)."""
    lora: str | None = Field(default=None, min_length=1)
    """Load ``weights_path`` as this LoRA adapter, in place (vLLM), instead of full weights."""
    mode: Literal["drain", "abort"] = "drain"
    """How the calls in flight end before the load (when the service is not paused already)."""
    verify: bool = True
    """Probe each server before and after the load: the probe's log-probabilities must move."""
    expect_probe: list[float] | None = None
    """The trainer's own log-probabilities of the probe (`inference.control.PROBE_IDS`, each id after those before
    it) under the new weights: each server's must match them (``probe_tolerance``), not only move."""
    probe_tolerance: float = Field(default=0.02, gt=0)
