"""Qwen Code 0.24.4: OpenAI Chat Completions with `--auth-type openai`, auto-approving with `--yolo`."""

from __future__ import annotations

from polar_cli.harness.base import HOME, HarnessAdapter, Launch, Wiring, base_env, json_file, node_argv

NAME = "qwen-code"
BUNDLE = f"/opt/polar/harness/{NAME}"
DEFAULT_MODEL = "qwen3-coder-plus"


def settings() -> dict[str, object]:
    # usage statistics go to an Aliyun RUM endpoint on every run; nothing else needs changing
    return {"privacy": {"usageStatisticsEnabled": False}}


def no_relaunch_env() -> dict[str, str]:
    # Qwen Code re-executes itself to size its heap from the host's memory (blind to the container's limit): ~1 s
    return {"QWEN_CODE_NO_RELAUNCH": "1"}


def build(instruction: str, wiring: Wiring, workdir: str) -> Launch:
    env = {
        **base_env(wiring),
        **no_relaunch_env(),
        "OPENAI_BASE_URL": wiring.gateway_url.rstrip("/") + "/v1",
        "OPENAI_API_KEY": wiring.session_key,
        "OPENAI_MODEL": wiring.model or DEFAULT_MODEL,
        "QWEN_CODE_SUPPRESS_YOLO_WARNING": "1",
    }
    # `--prompt=TEXT`: one token, so yargs never reads a leading dash in the instruction as a flag
    argv = [*node_argv(BUNDLE, "qwen"), "--auth-type", "openai", "--yolo", f"--prompt={instruction}"]
    return Launch(
        argv=tuple(argv),
        env=env,
        files={f"{HOME}/.qwen/settings.json": json_file(settings())},
        workdir=workdir,
        artifacts=(f"{HOME}/.qwen/tmp", f"{HOME}/.qwen/projects"),
        droppings=(".qwen",),
    )


ADAPTER = HarnessAdapter(
    name=NAME, package="@qwen-code/qwen-code", shell_tool="run_shell_command", build=build, api="openai_chat"
)
