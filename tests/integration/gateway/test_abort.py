"""A harness that hangs up mid-call frees the server's slot: the gateway sends SGLang's /abort_request for it."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from polar_cli.capture import read_session
from polar_cli.capture.store import session_file
from tests.support.gateway import running_gateway


class SlowUpstream(BaseHTTPRequestHandler):
    aborted: list[str] = []
    release = threading.Event()

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        if self.path == "/abort_request":
            SlowUpstream.aborted.append(body["rid"])
            payload = b"{}"
        else:
            SlowUpstream.release.wait(20)  # a long generation
            payload = b'{"error": "too late"}'
        self.send_response(200)
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


def test_client_disconnect_aborts_the_upstream_request_and_is_recorded(tmp_path: Path) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), SlowUpstream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with running_gateway(f"http://127.0.0.1:{server.server_address[1]}", tmp_path, model="m") as gw:
            key = gw.open_session("hangup")
            body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
            head = f"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\n"
            with socket.create_connection(("127.0.0.1", gw.port)) as s:
                s.sendall(head.encode() + f"content-length: {len(body)}\r\n\r\n".encode() + body)
                time.sleep(0.5)  # the call is now waiting on the upstream
            deadline = time.time() + 10
            while not SlowUpstream.aborted and time.time() < deadline:
                time.sleep(0.05)
            records = read_session(session_file(gw.capture_dir, "hangup")) if gw.flush() is None else []
        assert len(SlowUpstream.aborted) == 1
        assert records[0].status == "client_error" and "disconnected" in (records[0].error or "")
        assert records[0].normalized is not None and records[0].normalized["rid"] == SlowUpstream.aborted[0]
    finally:
        SlowUpstream.release.set()
        server.shutdown()
