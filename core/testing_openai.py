"""A real HTTP server on 127.0.0.1 that speaks the OpenAI chat and embeddings protocol.

Tests point a workspace's provider credentials at `server.url` and exercise the real
client code; nothing is patched.

    with OpenAITestServer() as server:
        server.chat_replies.append("a summary")       # queued replies, in order
        server.chat_handler = lambda body: "..."      # or compute one from the request
        server.embedding_handler = lambda texts: [[...], ...]
        server.fail_next = 2                           # answer 500 to the next two calls
        ...
        server.requests                                # [(path, json body), ...]
        server.request_headers                         # each request's headers, in order
"""

import json
import threading
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class OpenAITestServer:
    def __init__(self):
        self.requests: list[tuple[str, dict]] = []
        self.request_headers: list[dict] = []
        self.chat_replies: deque[str] = deque()
        self.chat_handler = None
        self.embedding_handler = None
        self.fail_next = 0
        self.delay_seconds = 0.0
        self._lock = threading.Lock()
        self._server = None
        self._thread = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self):
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status, payload):
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # The client stopped waiting (a timeout under test): nobody to answer.

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with outer._lock:
                    outer.requests.append((self.path, body))
                    outer.request_headers.append(dict(self.headers))
                    failing = outer.fail_next > 0
                    if failing:
                        outer.fail_next -= 1
                if outer.delay_seconds:
                    import time

                    time.sleep(outer.delay_seconds)
                if failing:
                    self._send(500, {"error": {"message": "injected failure"}})
                    return
                if self.path.endswith("/chat/completions"):
                    self._send(200, outer._chat(body))
                elif self.path.endswith("/embeddings"):
                    self._send(200, outer._embeddings(body))
                else:
                    self._send(404, {"error": {"message": "unknown path"}})

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _chat(self, body: dict) -> dict:
        with self._lock:
            queued = self.chat_replies.popleft() if self.chat_replies else None
        content = queued if queued is not None else (self.chat_handler(body) if self.chat_handler else "ok")
        prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
        return {
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "model": body.get("model", "test"),
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": len(content.split())},
        }

    def _embeddings(self, body: dict) -> dict:
        texts = body.get("input", [])
        if isinstance(texts, str):
            texts = [texts]
        if self.embedding_handler is not None:
            vectors = self.embedding_handler(texts)
        else:
            vectors = [_hash_vector(text, body.get("dimensions") or 8) for text in texts]
        return {
            "object": "list",
            "model": body.get("model", "test"),
            "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)],
            "usage": {"prompt_tokens": 0, "total_tokens": 0},
        }


def _hash_vector(text: str, dimensions: int) -> list[float]:
    import hashlib

    digest = hashlib.sha256(text.encode()).digest()
    return [(digest[i % len(digest)] - 128) / 128 for i in range(dimensions)]
