"""images/model-downloader/wait_detached.py against a local server answering the VolumeAttachment list as the
API server does: the snapshot of the staging disk waits for its detach."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "images" / "model-downloader" / "wait_detached.py"


def attachment(pv: str, node: str) -> dict:
    return {"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
            "spec": {"attacher": "pd.csi.storage.gke.io", "nodeName": node, "source": {"persistentVolumeName": pv}}}


def serve(answers: list[list[dict]]):
    """An API server whose successive VolumeAttachment lists are `answers` (the last one repeats)."""
    seen = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(self.path)
            items = answers[min(len(seen) - 1, len(answers) - 1)]
            body = json.dumps({"kind": "VolumeAttachmentList", "items": items}).encode()
            self.send_response(200 if self.path == "/apis/storage.k8s.io/v1/volumeattachments" else 404)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, seen


def run(server, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--api", f"http://127.0.0.1:{server.server_port}",
                           "--interval", "0.05", *args], capture_output=True, text=True, timeout=60)


def test_it_returns_once_the_pv_has_had_no_attachment_for_three_polls():
    other = attachment("w-other", "node-b")
    server, seen = serve([[attachment("w-x-staging", "node-a"), other]] * 2 + [[other]])
    try:
        done = run(server, "--pv", "w-x-staging", "--timeout", "20")
    finally:
        server.shutdown()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "still attached to node-a" in done.stdout and "attached to no node" in done.stdout
    assert len(seen) == 5, "two polls while attached, then three quiet ones"


def test_it_fails_in_one_line_naming_the_node_when_the_disk_stays_attached():
    server, _ = serve([[attachment("w-x-staging", "node-a")]])
    try:
        done = run(server, "--pv", "w-x-staging", "--timeout", "0.5")
    finally:
        server.shutdown()
    assert done.returncode == 1
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("[wait-detached] ERROR: w-x-staging still attached to node-a after"), last


def test_an_unreachable_api_server_fails_at_once():
    done = subprocess.run([sys.executable, str(SCRIPT), "--api", "http://127.0.0.1:9", "--pv", "p"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "listing VolumeAttachments failed" in done.stdout
