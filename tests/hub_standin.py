"""A Hugging Face Hub stand-in over HTTP for huggingface_hub's own client: the file endpoints it calls
(`HEAD|GET /{repo}/resolve/{revision}/{path}`, with the X-Repo-Commit and ETag headers it requires and byte ranges
for safetensors headers), serving repositories from a directory (ROOT/org/name/...). Point HF_ENDPOINT at `url`
in a process that imports huggingface_hub afterwards (it reads HF_ENDPOINT once, at import)."""

from __future__ import annotations

import hashlib
import http.server
import re
import threading
from pathlib import Path

COMMIT = "0123456789abcdef0123456789abcdef01234567"
RESOLVE = re.compile(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$")


class HubStandIn:
    def __init__(self, root: Path):
        self.root = root
        self.requests: list[tuple[str, str, str | None]] = []
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *_: object) -> None:
                hub.requests.append((self.command, self.path, self.headers.get("Range")))

            def _file(self) -> Path | None:
                match = RESOLVE.match(self.path.split("?")[0])
                if not match or match.group(2) != "main":
                    return None
                path = hub.root / match.group(1) / match.group(3)
                return path if path.is_file() else None

            def _answer(self, status: int, path: Path | None, length: int, extra: dict[str, str]) -> None:
                self.send_response(status)
                if path is None:
                    self.send_header("X-Error-Code", "EntryNotFound")
                else:
                    self.send_header("ETag", f'"{hashlib.sha256(path.read_bytes()).hexdigest()}"')
                    self.send_header("X-Repo-Commit", COMMIT)
                for key, value in extra.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(length))
                self.end_headers()

            def do_HEAD(self) -> None:
                path = self._file()
                self._answer(200 if path else 404, path, path.stat().st_size if path else 0, {})

            def do_GET(self) -> None:
                path = self._file()
                if path is None:
                    self._answer(404, None, 0, {})
                    return
                data = path.read_bytes()
                wanted = self.headers.get("Range")
                if wanted:
                    first, last = (int(v) for v in wanted.removeprefix("bytes=").split("-"))
                    last = min(last, len(data) - 1)
                    body = data[first:last + 1]
                    self._answer(206, path, len(body), {"Content-Range": f"bytes {first}-{last}/{len(data)}"})
                else:
                    body = data
                    self._answer(200, path, len(body), {})
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> HubStandIn:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)
