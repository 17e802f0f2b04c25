"""A recipe-defined harness, for real: a script written by ``files:``, run in a container, through the gateway.

The harness is a few lines of JavaScript run by Pi's bundled Node (``bundle: pi``; the base image has no
interpreter of its own): it POSTs one OpenAI chat completion to ``{gateway_url}/v1/chat/completions`` with the
session key from its environment, writes the answer into the repository and a log into its droppings. The capture
must hold the call with token ids, the patch the file (and not the droppings), and the hostile instruction must
have arrived as one argument, unexpanded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from polar_cli.capture import read_capture_dir
from polar_cli.errors import RuntimeFailure
from polar_cli.harness import Wiring
from polar_cli.harness.custom import load_harness_config, resolve_adapter
from polar_cli.harness.session import SessionSpec, mount_bundle, run_session
from polar_cli.runtime.base import Container
from polar_cli.runtime.docker import DockerRuntime
from polar_cli.runtime.images import ensure_bundle_container, harness_image_plan
from tests.integration.harness.conftest import SETUP_HINT
from tests.integration.harness.test_harness_sessions import HOSTILE, PWNED, session_containers, strings
from tests.support.double_wire import Reply
from tests.support.gateway import running_gateway
from tests.support.sglang_double import SGLangDouble

pytestmark = pytest.mark.integration

ANSWER = "written by a custom harness"
SCRIPT = """// a harness without a bundle of its own; a literal placeholder: {{workdir}}
const [base, model, out, instruction] = process.argv.slice(2);
const fs = require("fs");
async function main() {
  const response = await fetch(base + "/v1/chat/completions", {
    method: "POST",
    headers: { "content-type": "application/json", authorization: "Bearer " + process.env.POLAR_SESSION_KEY },
    body: JSON.stringify({ model: model, messages: [{ role: "user", content: instruction }], max_tokens: 64 }),
  });
  const answer = await response.json();
  if (!response.ok) { console.error(JSON.stringify(answer)); process.exit(1); }
  fs.mkdirSync(".custom", { recursive: true });
  fs.writeFileSync(".custom/log.json", JSON.stringify(answer));
  fs.writeFileSync(out, answer.choices[0].message.content);
  console.log("wrote " + out);
}
main().catch((e) => { console.error(e); process.exit(1); });
"""
CONFIG = {
    "api": "openai-chat",
    "bundle": "pi",
    "argv": [
        "/opt/polar/harness/pi/bin/node",
        "/root/polar_harness.js",
        "{gateway_url}",
        "{model}",
        "{workdir}/custom_probe.txt",
        "{instruction}",
    ],
    "env": {"POLAR_SESSION_KEY": "{session_key}"},
    "files": {"/root/polar_harness.js": SCRIPT},
    "droppings": [".custom"],
    "artifacts": ["/root/polar_harness.js"],
}


def test_a_custom_harness_calls_the_gateway_and_its_file_is_in_the_patch(
    runtime: DockerRuntime, base_image: str, tmp_path: Path
) -> None:
    import yaml

    config_file = tmp_path / "harness.yaml"
    config_file.write_text(yaml.safe_dump({"custom_harnesses": {"mine": CONFIG}}))
    adapter = resolve_adapter("mine", load_harness_config(str(config_file)))
    try:
        bundle = mount_bundle(runtime, adapter, build=False)
    except RuntimeFailure as exc:
        pytest.fail(f"{exc}; {SETUP_HINT}")
    # Pi's own bundle data container, the one Pi's sessions mount
    assert bundle == ensure_bundle_container(runtime.client, harness_image_plan("pi").tag)
    seen: dict[str, Any] = {}

    def inspect(container: Container) -> None:
        seen["script"] = container.get_file("/root/polar_harness.js").decode()
        seen["pwned"] = container.exec(["test", "-e", PWNED], timeout=30).exit_code == 0

    session_id = f"it-custom-{tmp_path.name}"
    capture = tmp_path / "capture"
    with SGLangDouble([Reply(ANSWER)]) as upstream, running_gateway(upstream.url, capture) as gateway:
        key = gateway.open_session(session_id)
        spec = SessionSpec(session_id, adapter, base_image, HOSTILE, bundle, timeout=120.0)
        outcome = run_session(runtime, spec, Wiring(gateway.url, key), tmp_path / "artifacts", after_run=inspect)
        gateway.flush()
    assert session_containers(runtime, session_id) == []

    assert outcome.status == "ok", f"{outcome.status} ({outcome.error}):\n{outcome.output[-3000:]}"
    assert "wrote /testbed/custom_probe.txt" in outcome.output
    # the file is in the patch, the harness's own log is not
    assert "+++ b/custom_probe.txt" in outcome.patch and ANSWER in outcome.patch
    assert ".custom" not in outcome.patch
    # the script was written as given ({{workdir}} is a literal {workdir}), and copied out as an artifact
    assert "a literal placeholder: {workdir}\n" in seen["script"]
    assert (tmp_path / "artifacts").exists() and outcome.artifacts
    # one call, captured with token ids; the instruction arrived whole and nothing in it ran
    records = read_capture_dir(capture).get(session_id, [])
    assert [r.status for r in records] == ["ok"], [(r.seq, r.status, r.error) for r in records]
    assert records[0].prompt_ids and records[0].response_ids
    assert any(s == HOSTILE for s in strings(records[0].request))
    assert seen["pwned"] is False
