"""How the judge's score meets the tests' reward (docs/judge.md "Combining"): pure functions over a verdict.

gate      accepted only if the tests pass AND the judge's score >= threshold; the row's reward is the tests' reward
          when the gate lets it through, else 0.0. Only sessions the tests accept are judged (the rest cannot pass).
weighted  reward = (w_tests * tests + w_judge * judge) / (w_tests + w_judge), accepted when it is >= threshold.
          Sessions the tests accept and sessions rejected only as ``unresolved`` are judged: a weighted sum may
          accept work whose tests failed, if the weights and threshold say so; every other reject stays one.

A session the judge turns away is rejected with reason ``judge: ...``; one whose tests already rejected it keeps
that reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from polar_cli.judge.config import JudgeConfig, JudgeMode, JudgeWeights

Kind = Literal["accepted", "rejected", "error"]

# The recipe's default weights (``judge.weights``), for a policy made without them: one home for their values.
_DEFAULT_WEIGHTS = JudgeWeights()


@dataclass(frozen=True, slots=True)
class Policy:
    """The recipe's mode, threshold and weights."""

    mode: JudgeMode
    threshold: float
    tests_weight: float = _DEFAULT_WEIGHTS.tests
    judge_weight: float = _DEFAULT_WEIGHTS.judge

    @classmethod
    def of(cls, config: JudgeConfig) -> Policy:
        """The policy a recipe's ``judge:`` section sets."""
        return cls(config.mode, config.threshold, config.weights.tests, config.weights.judge)

    def combine(self, tests: float, judge: float) -> tuple[float, bool]:
        """(the row's reward, whether it passes)."""
        if self.mode == "gate":  # only sessions the tests accepted are judged (`wants`)
            passed = judge >= self.threshold
            return (tests if passed else 0.0), passed
        reward = (self.tests_weight * tests + self.judge_weight * judge) / (self.tests_weight + self.judge_weight)
        return reward, reward >= self.threshold

    def wants(self, kind: Kind, reason: str | None) -> bool:
        """Whether a session with this verdict from its tests is worth a judge's calls."""
        if kind == "accepted":
            return True
        return self.mode == "weighted" and kind == "rejected" and (reason or "").startswith("unresolved:")

    def verdict(
        self, kind: Kind, reason: str | None, tests: float, judge: float, trainable: bool
    ) -> tuple[Kind, str | None]:
        """The verdict once the judge has scored (the status is unchanged)."""
        if not self.wants(kind, reason):
            return kind, reason
        reward, passed = self.combine(tests, judge)
        if passed:
            if not trainable:
                return "rejected", "no_trainable_call: no model call has token ids"
            return "accepted", None
        if kind == "rejected":
            return kind, reason
        if self.mode == "gate":
            return "rejected", f"judge: score {judge:.3f} below the threshold {self.threshold:g}"
        return "rejected", (
            f"judge: reward {reward:.3f} below the threshold {self.threshold:g} (tests {tests:g}, judge {judge:.3f})"
        )
