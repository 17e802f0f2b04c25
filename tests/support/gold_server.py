"""The gold engine as a server process that answers like SGLang 0.5.23 over HTTP: a stand-in for a launched SGLang
that the fault tests can kill, restart and lose (it is a process with a port, as SGLang is).

    python -m tests.support.gold_server --model-path M --host H --port P --manifest instances.jsonl [sglang flags]

It takes `launch_server`'s flags (so Polar's launcher starts it as ``engine.sglang.launcher``), serves ``/health``,
``/model_info``, ``/v1/models``, ``/abort_request`` and ``/v1/chat/completions`` (``input_ids`` honoured), and
answers each chat call with the gold policy for the manifest instance whose problem statement the conversation holds
(a server over HTTP never learns the gateway's session). ``--pid-file`` writes its pid. What it cannot show: SGLang's
scheduler, its real warm-up and the way a GPU process dies (it dies as any process does).
"""

from __future__ import annotations

import argparse
import json
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from polar_cli.inference.gold import POLICIES, Task
from polar_cli.inference.scripted import ScriptedUpstream
from polar_cli.inference.tokenizers import ChatTokenizer
from polar_cli.swe.manifest import Instance, load_manifest


def task_for(request: dict[str, Any], instances: list[Instance], workdir: str) -> Task | None:
    text = json.dumps(request.get("messages") or [], ensure_ascii=False)
    for instance in instances:
        if (
            instance.problem_statement.strip()
            and json.dumps(instance.problem_statement.strip(), ensure_ascii=False)[1:-1] in text
        ):
            return Task(instance.instance_id, instance.patch, workdir)
    return None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--served-model-name")
    parser.add_argument("--manifest", required=True)
    parser.add_argument("--tokenizer", default="qwen3")
    parser.add_argument("--workdir", default="/testbed")
    parser.add_argument("--pid-file")
    args, _sglang_flags = parser.parse_known_args()
    served = args.served_model_name or args.model_path
    instances = load_manifest(Path(args.manifest))
    engine = ScriptedUpstream(POLICIES["gold"], ChatTokenizer.load(args.tokenizer), served)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def send(self, status: int, payload: Any) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path in ("/health", "/health_generate"):
                self.send(200, {})
            elif self.path in ("/model_info", "/get_model_info"):
                self.send(200, {"model_path": args.model_path, "is_generation": True})
            elif self.path == "/v1/models":
                self.send(200, {"object": "list", "data": [{"id": served, "object": "model"}]})
            else:
                self.send(404, {"detail": "no route"})

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            request = json.loads(self.rfile.read(length) or b"{}")
            if self.path == "/abort_request":
                self.send(200, {})
            elif self.path == "/v1/chat/completions" and isinstance(request.get("messages"), list):
                self.send(200, engine.answer(request, task_for(request, instances, args.workdir)))
            else:
                self.send(404, {"object": "error", "message": f"no route {self.path}", "code": 404})

        def log_message(self, format: str, *a: Any) -> None:
            pass

    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    if args.pid_file:
        Path(args.pid_file).write_text(str(os.getpid()))
    print(f"gold server: listening on {args.host}:{args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
