#!/usr/bin/env python3
"""Wait until a PersistentVolume's disk is attached to no node: the weights snapshot comes only after that.

    wait_detached.py --pv w-<key>-staging [--timeout 1800] [--interval 5] [--api URL]

Pulumi's await of the download Job returns on the Job's Complete condition; kubelet unmounts the staging volume
and the attach-detach controller detaches the disk later. A snapshot taken before that is of a mounted ext4
("needs recovery"): mounted read-only from the image, the PD CSI driver then retries with `noload` and drops the
`read_ahead_kb` option, and the weights load at the default read-ahead. The attach-detach controller deletes the
VolumeAttachment once the CSI driver has detached the disk, so "no VolumeAttachment names this PV, three polls in
a row" is "the disk has no users". Standard library only; in a pod it reads the API server address, token and CA
of its service account (list on volumeattachments.storage.k8s.io). Exit 0 once detached, 1 with one line on
timeout or an API error, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.request

ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
PATH = "/apis/storage.k8s.io/v1/volumeattachments"
QUIET_POLLS = 3


def log(message: str) -> None:
    print(f"[wait-detached] {message}", flush=True)


def attachments(api: str, pv: str) -> list[str]:
    """Nodes a VolumeAttachment of this PV names (attached or still detaching)."""
    request = urllib.request.Request(api.rstrip("/") + PATH)
    context = None
    if api.startswith("https://"):
        context = ssl.create_default_context(cafile=f"{ACCOUNT}/ca.crt")
        with open(f"{ACCOUNT}/token") as token:
            request.add_header("Authorization", f"Bearer {token.read().strip()}")
    with urllib.request.urlopen(request, timeout=30, context=context) as response:
        items = json.loads(response.read()).get("items") or []
    return [item.get("spec", {}).get("nodeName", "?") for item in items
            if item.get("spec", {}).get("source", {}).get("persistentVolumeName") == pv]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pv", required=True, help="PersistentVolume whose disk must be detached")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--interval", type=float, default=5)
    parser.add_argument("--api", default=None, help="API server URL (default: the in-cluster address)")
    args = parser.parse_args(argv)
    if args.timeout <= 0 or args.interval <= 0:
        parser.error("--timeout and --interval must be positive")
    api = args.api or "https://{}:{}".format(os.environ.get("KUBERNETES_SERVICE_HOST", "kubernetes.default.svc"),
                                             os.environ.get("KUBERNETES_SERVICE_PORT", "443"))
    deadline, quiet, nodes = time.monotonic() + args.timeout, 0, []
    while time.monotonic() < deadline:
        try:
            nodes = attachments(api, args.pv)
        except (OSError, urllib.error.URLError, ValueError) as exc:
            log(f"ERROR: listing VolumeAttachments failed: {exc}")
            return 1
        quiet = 0 if nodes else quiet + 1
        if quiet >= QUIET_POLLS:
            log(f"{args.pv}: attached to no node; the snapshot may be taken")
            return 0
        if nodes:
            log(f"{args.pv}: still attached to {', '.join(nodes)}")
        time.sleep(args.interval)
    log(f"ERROR: {args.pv} still attached to {', '.join(nodes) or 'a node'} after {args.timeout:.0f} s")
    return 1


if __name__ == "__main__":
    sys.exit(main())
