"""Harbor's verifier in the agent's own container, and its reward read where Harbor's convention puts it.

As harbor 0.26.0's `Verifier` does: once the agent is done, stale reward files are removed, tests/ is copied to
/tests (the agent never saw it), ``/tests/test.sh`` runs with its output in /logs/verifier/test-stdout.txt, and the
reward is read from /logs/verifier/reward.json (named values) or else reward.txt (one number, named ``reward``).
No reward file, an unreadable one, a non-finite value or a verifier past its ``timeout_sec`` is an evaluation error
(the session is retried, never silently rejected); a reward below the recipe's threshold is a reject.
"""

from __future__ import annotations

import json
import math
import shlex
import time
from collections.abc import Mapping
from dataclasses import dataclass

from polar_cli.harbor.tasks import SOLUTION_DIR, TESTS_DIR, VERIFIER_DIR, HarborTask
from polar_cli.runtime.base import Container, ContainerSpec, Runtime
from polar_cli.runtime.shell import heredoc_delimiter, needs_encoding
from polar_cli.swe.evaluate import Evaluation, Outcome
from polar_cli.swe.grading import Grade, ResolvedStatus

TEST_STDOUT = f"{VERIFIER_DIR}/test-stdout.txt"
REWARD_JSON = f"{VERIFIER_DIR}/reward.json"
REWARD_TXT = f"{VERIFIER_DIR}/reward.txt"
SETUP_TIMEOUT = 120.0


class RewardError(ValueError):
    """The verifier left no reward, or one that is not a finite number."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """The verifier's result: the `Evaluation` rows and logs read, the named rewards and the one compared."""

    evaluation: Evaluation
    rewards: Mapping[str, float] | None
    reward: float | None


def parse_rewards(json_text: bytes | None, txt_text: bytes | None) -> dict[str, float]:
    """reward.json's named values (a bare number is named ``reward``), else reward.txt's number as ``reward``."""
    if json_text is not None:
        try:
            data = json.loads(json_text)
        except ValueError as exc:
            raise RewardError(f"reward.json is not JSON: {exc}") from exc
        named: dict[str, object] = data if isinstance(data, dict) else {"reward": data}
        if not named:
            raise RewardError("reward.json names no value")
    elif txt_text is not None:
        try:
            named = {"reward": float(txt_text.decode().strip())}
        except ValueError as exc:
            raise RewardError(f"reward.txt is not a number: {txt_text[:100]!r}") from exc
    else:
        raise RewardError(f"no reward file: the verifier wrote neither {REWARD_TXT} nor {REWARD_JSON}")
    out = {}
    for name, value in named.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise RewardError(f"reward {name!r}: {value!r} is not a finite number")
        out[str(name)] = float(value)
    return out


def main_reward(rewards: Mapping[str, float]) -> float:
    """The value compared with the threshold: the one named ``reward``, else the mean of all."""
    return rewards["reward"] if "reward" in rewards else sum(rewards.values()) / len(rewards)


def _read(container: Container, path: str) -> bytes | None:
    try:
        return container.get_file(path)
    except (FileNotFoundError, IsADirectoryError):
        return None


def _evaluation(
    task: HarborTask, model: str, resolved: bool | None, reason: str | None, log: str, start: float
) -> Evaluation:
    outcome: Outcome = "error" if resolved is None else ("resolved" if resolved else "unresolved")
    status = ResolvedStatus.FULL if resolved else ResolvedStatus.NO
    grade = Grade(bool(resolved), status, None, reason)
    return Evaluation(
        task.name, model, outcome, grade, patch_applied=True, reason=reason, seconds=time.monotonic() - start, log=log
    )


def verify(
    container: Container, task: HarborTask, model: str, threshold: float, *, clock_start: float | None = None
) -> Verdict:
    """Run the task's tests in ``container`` (the agent's, after it finished) and read the reward."""
    start = time.monotonic() if clock_start is None else clock_start
    reset = f"rm -rf {TESTS_DIR} && mkdir -p {TESTS_DIR} {VERIFIER_DIR} && rm -f {REWARD_TXT} {REWARD_JSON}"
    setup = container.exec(["sh", "-c", reset], timeout=SETUP_TIMEOUT)
    if setup.exit_code != 0:
        said = setup.output.decode(errors="replace")[-500:]
        return Verdict(
            _evaluation(task, model, None, f"preparing the verifier failed: {said}", said, start), None, None
        )
    container.put_files(task.test_files(), mode=0o755)
    run = f"cd {shlex.quote(task.workdir)} 2>/dev/null; {TESTS_DIR}/test.sh > {TEST_STDOUT} 2>&1"
    result = container.exec(["sh", "-c", run], timeout=task.verifier_timeout, env=dict(task.verifier_env))
    log = (_read(container, TEST_STDOUT) or result.output).decode(errors="replace")
    if result.timed_out:
        why = f"the verifier ran past its {task.verifier_timeout:g} s timeout"
        return Verdict(_evaluation(task, model, None, why, log, start), None, None)
    try:
        rewards = parse_rewards(_read(container, REWARD_JSON), _read(container, REWARD_TXT))
    except RewardError as exc:
        return Verdict(_evaluation(task, model, None, str(exc), log, start), None, None)
    reward = main_reward(rewards)
    resolved = reward >= threshold
    reason = None if resolved else f"reward {reward:g} below the threshold {threshold:g} ({_named(rewards)})"
    return Verdict(_evaluation(task, model, resolved, reason, log, start), rewards, reward)


def _named(rewards: Mapping[str, float]) -> str:
    return ", ".join(f"{k}={v:g}" for k, v in rewards.items())


def write_files_command(files: Mapping[str, bytes]) -> str:
    """Shell text that writes each file byte for byte: a quoted heredoc when plain text, base64 otherwise."""
    parts = []
    for path, data in files.items():
        text = data.decode(errors="replace")
        target = shlex.quote(path)
        parent = shlex.quote(path.rsplit("/", 1)[0] or "/")
        if data == text.encode() and not needs_encoding(text) and text.endswith("\n"):
            parts.append(
                f"mkdir -p {parent} && cat > {target} <<'{heredoc_delimiter(text)}'\n{text}{heredoc_delimiter(text)}\n"
            )
        else:
            import base64

            encoded = base64.encodebytes(data).decode()
            delimiter = heredoc_delimiter(encoded)
            parts.append(f"mkdir -p {parent} && base64 -d > {target} <<'{delimiter}'\n{encoded}{delimiter}\n")
    return "".join(parts)


def oracle_command(task: HarborTask) -> str:
    """Shell text that runs the task's oracle as Harbor's oracle agent does: solution/ copied to /solution, then
    ``solve.sh`` run (in the task's workdir, with task.toml's [solution].env)."""
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in task.solution_env.items())
    run = f"cd {shlex.quote(task.workdir)} && {'env ' + env + ' ' if env else ''}bash {SOLUTION_DIR}/solve.sh"
    return f"{write_files_command(task.solution_files())}{run}"


def error_verdict(task: HarborTask, model: str, reason: str) -> Verdict:
    """A verification that could not run (the runtime failed): an evaluation error, retried by the next run."""
    return Verdict(_evaluation(task, model, None, reason, reason, time.monotonic()), None, None)


APPLY_TIMEOUT = 300.0
AGENT_PATCH = "/tmp/polar-agent.patch"


def verify_patch(
    runtime: Runtime, task: HarborTask, image: str, patch: str, model: str, threshold: float, *, network: str = "none"
) -> Verdict:
    """`polar serve`'s Harbor evaluator: the agent's patch applied in a fresh container of the task's image, then the
    verifier there (serve grades every session in a fresh container: only the patch counts, state the agent left
    outside its workdir does not)."""
    spec = ContainerSpec(image=image, role="eval", network=network, workdir=task.workdir)
    try:
        container = runtime.start(spec)
    except Exception as exc:
        return error_verdict(task, model, f"starting a container of {image} failed: {exc}")
    try:
        if patch.strip():
            container.put_files({AGENT_PATCH: patch.encode()})
            apply = f"cd {shlex.quote(task.workdir)} && git apply --verbose {AGENT_PATCH}"
            result = container.exec(["sh", "-c", apply], timeout=APPLY_TIMEOUT)
            if result.exit_code != 0:
                said = result.output.decode(errors="replace")[-2000:]
                start = time.monotonic()
                return Verdict(_evaluation(task, model, False, "the patch did not apply", said, start), None, None)
        return verify(container, task, model, threshold)
    except Exception as exc:
        return error_verdict(task, model, f"running the verifier failed: {exc or type(exc).__name__}")
    finally:
        container.remove()
