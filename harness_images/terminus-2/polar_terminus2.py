"""terminus2-run --task=TEXT: one Terminus-2 task (Harbor's own agent, PyPI `harbor`), headless, in this machine.

Harbor runs Terminus-2 from outside a sandbox: the agent drives a tmux session through the environment's `exec`. Run
inside the sandbox instead (as Polar runs every harness), the environment is this machine: `LocalEnvironment` runs each
`exec` with `bash -c` here, in the working directory, with the bundle's tmux first on PATH; file transfers are local
copies. The agent itself is Harbor's
`Terminus2` as it ships, with Harbor's own defaults but two: `record_terminal_session=False` (asciinema is not in the
bundle; recording is best-effort in Harbor too) and the model's endpoint:

- the model from TERMINUS_MODEL (litellm's `openai/NAME`: OpenAI Chat Completions), its endpoint from
  TERMINUS_API_BASE, the key from OPENAI_API_KEY (litellm's own variable for the `openai/` provider);
- the logs (its trajectory and the episodes' prompts and answers) under TERMINUS_LOGS_DIR.

Exit 0 when the agent finished (it marked the task complete or ran out of turns), 1 when it raised, 2 on bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import sys
from pathlib import Path


# the bundle's tmux (harness_images/terminus-2/Dockerfile), beside bin/ of the interpreter running this
TMUX_DIR = Path(sys.executable).resolve().parent.parent / "bin-tmux"


def local_environment(workdir: str, logs_dir: Path) -> object:
    from harbor.environments.base import BaseEnvironment, ExecResult
    from harbor.models.trial.paths import TrialPaths

    class LocalEnvironment(BaseEnvironment):
        """This machine as Harbor's environment: commands run here, files are copied here."""

        def __init__(self) -> None:  # no task, compose file or container to describe
            self.default_user = None
            self.logger = logging.getLogger("terminus2-run")
            self.session_id = "local"
            self.trial_paths = TrialPaths(logs_dir)

        @staticmethod
        def type() -> str:  # type: ignore[override]
            return "local"

        def _validate_definition(self) -> None:
            return None

        async def start(self, force_build: bool) -> None:
            return None

        async def stop(self, delete: bool) -> None:
            return None

        async def upload_file(self, source_path: Path | str, target_path: str) -> None:
            Path(target_path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source_path, target_path)

        async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
            shutil.copytree(source_dir, target_dir, dirs_exist_ok=True)

        async def download_file(self, source_path: str, target_path: Path | str) -> None:
            Path(target_path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source_path, target_path)

        async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
            shutil.copytree(source_dir, target_dir, dirs_exist_ok=True)

        async def exec(
            self,
            command: str,
            cwd: str | None = None,
            env: dict[str, str] | None = None,
            timeout_sec: int | None = None,
            user: str | int | None = None,
        ) -> ExecResult:
            proc = await asyncio.create_subprocess_exec(
                "bash",
                "-c",
                command,
                cwd=cwd or workdir,
                # the bundle's tmux first: Terminus-2 runs `tmux ...` through here; the instance may have none
                env={**os.environ, "PATH": f"{TMUX_DIR}:{os.environ.get('PATH', '/usr/bin:/bin')}", **(env or {})},
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            try:
                out, err = await asyncio.wait_for(proc.communicate(), timeout=timeout_sec)
            except TimeoutError:
                proc.kill()
                await proc.wait()
                return ExecResult(stdout="", stderr=f"timed out after {timeout_sec}s", return_code=124)
            return ExecResult(
                stdout=out.decode(errors="replace"), stderr=err.decode(errors="replace"), return_code=proc.returncode
            )

    return LocalEnvironment()


async def run(task: str, workdir: str) -> None:
    from harbor.agents.terminus_2 import Terminus2
    from harbor.models.agent.context import AgentContext

    logs_dir = Path(os.environ.get("TERMINUS_LOGS_DIR") or Path.home() / ".terminus-2")
    (logs_dir / "agent").mkdir(parents=True, exist_ok=True)
    environment = local_environment(workdir, logs_dir)
    agent = Terminus2(
        logs_dir=logs_dir / "agent",
        model_name=os.environ["TERMINUS_MODEL"],
        api_base=os.environ.get("TERMINUS_API_BASE") or None,
        record_terminal_session=False,
    )
    await agent.setup(environment)  # type: ignore[arg-type]
    context = AgentContext()
    await agent.run(task, environment, context)  # type: ignore[arg-type]
    print(f"terminus2-run: {context.n_input_tokens} input, {context.n_output_tokens} output tokens", file=sys.stderr)


def main() -> int:
    parser = argparse.ArgumentParser(prog="terminus2-run", description=__doc__.split("\n", 1)[0])
    parser.add_argument("--task", required=True, help="the instruction; glue it (--task=TEXT) when it starts with -")
    args = parser.parse_args()
    if not os.environ.get("TERMINUS_MODEL"):
        parser.error("set TERMINUS_MODEL")
    asyncio.run(run(args.task, os.getcwd()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
