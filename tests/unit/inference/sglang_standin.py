"""A stand-in for `python -m sglang.launch_server`: takes its flags, serves /health (503 while "warming up", then 200),
/model_info, /v1/models and /v1/chat/completions with SGLang 0.5.23's token fields. Stdlib only.

    python sglang_standin.py --model-path M --host H --port P [...]    env: STANDIN_WARMUP_503=N, STANDIN_EXIT=code
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

health_calls = 0


def chat_answer(request: dict[str, Any], served: str) -> dict[str, Any]:
    return {
        "id": request.get("rid") or "standin",
        "object": "chat.completion",
        "created": 0,
        "model": served,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "OK", "reasoning_content": None, "tool_calls": None},
                "logprobs": {"content": [{"token": t, "bytes": [], "logprob": -0.5, "top_logprobs": []}
                                         for t in ("OK", "<|im_end|>")]},
                "finish_reason": "stop",
                "matched_stop": 151645,
                "prompt_token_ids": [151644, 872, 198, 151645],
                "response_token_ids": [3925, 151645],
            }
        ],
        "usage": {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6},
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--served-model-name")
    args, rest = parser.parse_known_args()
    served = args.served_model_name or args.model_path
    warmup = int(os.environ.get("STANDIN_WARMUP_503", "2"))
    print(f"standin: argv {sys.argv[1:]}", flush=True)
    if "STANDIN_EXIT" in os.environ:
        print("standin: CUDA error: no GPU found", flush=True)
        raise SystemExit(int(os.environ["STANDIN_EXIT"]))

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
            global health_calls
            if self.path == "/health":
                health_calls += 1
                if health_calls <= warmup:
                    self.send(503, {"detail": "warming up"})
                else:
                    self.send(200, {})
            elif self.path == "/model_info":
                self.send(200, {"model_path": args.model_path, "tool_call_parser": "qwen3_coder"})
            elif self.path == "/v1/models":
                self.send(200, {"object": "list", "data": [{"id": served}]})
            else:
                self.send(404, {"detail": "no route"})

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            request = json.loads(self.rfile.read(length) or b"{}")
            if self.path == "/v1/chat/completions" and request.get("return_token_ids"):
                self.send(200, chat_answer(request, served))
            else:
                self.send(404, {"detail": "no route"})

        def log_message(self, format: str, *a: Any) -> None:
            print("standin: " + format % a, flush=True)

    server = ThreadingHTTPServer((args.host, args.port), Handler)
    print(f"standin: listening on {args.host}:{args.port}, extra flags {rest}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
