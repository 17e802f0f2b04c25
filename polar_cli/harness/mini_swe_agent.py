"""mini-swe-agent 2.4.6 (PyPI `mini-swe-agent`): OpenAI Chat Completions through litellm, one `bash` tool, linear
history; `mini --yolo --exit-immediately` runs headless and returns once the model submits."""

from __future__ import annotations

from polar_cli.harness.base import HOME, HarnessAdapter, Launch, Wiring, base_env, json_file, python_argv

NAME = "mini-swe-agent"
BUNDLE = f"/opt/polar/harness/{NAME}"
CONFIG_DIR = f"{HOME}/.config/mini-swe-agent"
CONFIG = f"{CONFIG_DIR}/polar.yaml"
TRAJECTORY = f"{CONFIG_DIR}/last_mini_run.traj.json"
DEFAULT_MODEL = "polar-model"


def config(wiring: Wiring) -> dict[str, object]:
    """Merged over the builtin mini.yaml (JSON is YAML): the gateway as litellm's OpenAI endpoint."""
    return {
        # `openai/` makes litellm speak OpenAI Chat to api_base whatever the model is called
        "model": {
            "model_name": f"openai/{wiring.model or DEFAULT_MODEL}",
            "model_kwargs": {"api_base": wiring.gateway_url.rstrip("/") + "/v1"},
            # litellm has no price for the gateway's model: cost 0 instead of aborting the run
            "cost_tracking": "ignore_errors",
        },
    }


def quiet_env() -> dict[str, str]:
    return {
        # skip the first-run setup wizard, which prompts for a default model and key
        "MSWEA_CONFIGURED": "1",
        "MSWEA_GLOBAL_CONFIG_DIR": CONFIG_DIR,
        "MSWEA_COST_TRACKING": "ignore_errors",
        # litellm fetches its model price map from GitHub at import; the copy it ships is enough
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }


def build(instruction: str, wiring: Wiring, workdir: str) -> Launch:
    options = [
        "--config",
        "mini.yaml",
        "--config",
        CONFIG,
        # execute every command without confirmation; end when the model submits instead of asking for a new task
        "--yolo",
        "--exit-immediately",
        # the default $3 limit means nothing at cost 0 (no prices for the gateway's model): off
        "--cost-limit",
        "0",
        "--output",
        TRAJECTORY,
    ]
    return Launch(
        argv=python_argv(BUNDLE, "mini", options, "--task", instruction),
        env={**base_env(wiring), **quiet_env(), "OPENAI_API_KEY": wiring.session_key},
        files={CONFIG: json_file(config(wiring))},
        workdir=workdir,
        artifacts=(TRAJECTORY,),
    )


ADAPTER = HarnessAdapter(name=NAME, package="mini-swe-agent", shell_tool="bash", build=build, api="openai_chat")
