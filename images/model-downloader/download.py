#!/usr/bin/env python3
"""Fill the staging disk with a model's weights and verify them.

    download.py --source huggingface --model ORG/NAME --revision REV --dest /data/model
    download.py --source gcs --gcs-uri gs://bucket/path --dest /data/model
    download.py --source local --from DIR --dest DIR          (tests, air-gapped mirrors)
    ... --code      also the repository's *.py files (model.trustRemoteCode), checked against config.json's auto_map

Standard library only, plus huggingface_hub for --source huggingface and the gcloud CLI for
--source gcs. Idempotent: a completion marker for the same model and revision skips the work.
Verification: config.json present, every *.safetensors header parses and its tensors end
exactly at the end of the file, the total size is at least --min-bytes; with --code, every module
config.json's auto_map names is there. Exit 0 on success,
1 with a one-line reason on any failure, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

MARKER = ".vllm-gke-complete.json"
WEIGHT_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.txt", "*.tiktoken", "*.jinja", "tokenizer*"]
CODE_PATTERNS = ["*.py"]
"""The repository's own Python, taken only with --code: what vLLM's --trust-remote-code imports (auto_map)."""


class DownloadError(Exception):
    """A download or verification failure with a one-line reason."""


def log(message: str) -> None:
    print(f"[model-downloader] {message}", flush=True)


def safetensors_end(path: Path) -> int:
    """Bytes the file must have according to its header; raises DownloadError when the header is broken."""
    size = path.stat().st_size
    with path.open("rb") as handle:
        prefix = handle.read(8)
        if len(prefix) != 8:
            raise DownloadError(f"{path.name}: shorter than a safetensors header ({size} bytes)")
        (header_len,) = struct.unpack("<Q", prefix)
        if header_len > min(size - 8, 100 * 1024 * 1024):
            raise DownloadError(f"{path.name}: header length {header_len} exceeds the file ({size} bytes)")
        try:
            header = json.loads(handle.read(header_len))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise DownloadError(f"{path.name}: header is not valid JSON ({exc})") from None
    ends = [t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"]
    return 8 + header_len + (max(ends) if ends else 0)


def auto_map_modules(config: dict) -> list[str]:
    """The files config.json's auto_map imports ("configuration_decilm.DeciLMConfig" -> configuration_decilm.py;
    an entry may name another repository first, "org/repo--module.Class", which is not in this one)."""
    auto_map = config.get("auto_map")
    entries = auto_map.values() if isinstance(auto_map, dict) else []
    names = [n for e in entries for n in (e if isinstance(e, list) else [e]) if isinstance(n, str) and n]
    return sorted({n.rsplit(".", 1)[0].replace(".", "/") + ".py" for n in names if "--" not in n and "." in n})


def verify(dest: Path, min_bytes: int, code: bool = False) -> dict[str, object]:
    if not (dest / "config.json").is_file():
        raise DownloadError(f"config.json missing in {dest}")
    if code:
        try:
            config = json.loads((dest / "config.json").read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise DownloadError(f"config.json is not valid JSON ({exc})") from None
        missing = [m for m in auto_map_modules(config if isinstance(config, dict) else {}) if not (dest / m).is_file()]
        if missing:
            raise DownloadError(f"config.json's auto_map names {', '.join(missing)}, missing in {dest}")
    shards = sorted(dest.rglob("*.safetensors"))
    if not shards:
        raise DownloadError(f"no *.safetensors files in {dest}")
    total = 0
    for shard in shards:
        expected, actual = safetensors_end(shard), shard.stat().st_size
        if actual != expected:
            raise DownloadError(f"{shard.name}: {actual} bytes on disk, header says {expected} (truncated download?)")
        total += actual
    if total < min_bytes:
        raise DownloadError(f"weights total {total} bytes, expected at least {min_bytes}")
    return {"files": len(shards), "bytes": total}


def fetch(args: argparse.Namespace, dest: Path) -> None:
    if args.source == "local":
        shutil.copytree(args.from_dir, dest, dirs_exist_ok=True)
    elif args.source == "huggingface":
        os.environ.setdefault("HF_XET_HIGH_PERFORMANCE", "1")
        os.environ.setdefault("HF_HUB_ENABLE_HF_TRANSFER", "1")
        from huggingface_hub import snapshot_download

        snapshot_download(args.model, revision=args.revision, local_dir=str(dest),
                          allow_patterns=WEIGHT_PATTERNS + (CODE_PATTERNS if args.code else []),
                          token=os.environ.get("HF_TOKEN") or None,
                          max_workers=16)
    else:
        uri = args.gcs_uri.rstrip("/") + "/*"
        result = subprocess.run(["gcloud", "storage", "cp", "--recursive", uri, str(dest)], check=False)
        if result.returncode:
            raise DownloadError(f"gcloud storage cp {uri} exited {result.returncode}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Download and verify model weights onto the staging disk.")
    parser.add_argument("--source", choices=["huggingface", "gcs", "local"], required=True)
    parser.add_argument("--model", default="", help="Hugging Face repo id (source huggingface)")
    parser.add_argument("--revision", default="main")
    parser.add_argument("--gcs-uri", default="", help="gs://bucket/prefix (source gcs)")
    parser.add_argument("--from", dest="from_dir", type=Path, help="directory to copy (source local)")
    parser.add_argument("--dest", type=Path, required=True)
    parser.add_argument("--min-bytes", type=int, default=0, help="fail when the weights total less")
    parser.add_argument("--code", action="store_true",
                        help="also take the repository's *.py files (the code --trust-remote-code imports)")
    args = parser.parse_args(argv)
    if args.source == "huggingface" and not args.model:
        parser.error("--model is required with --source huggingface")
    if args.source == "gcs" and not args.gcs_uri.startswith("gs://"):
        parser.error("--gcs-uri gs://... is required with --source gcs")
    if args.source == "local" and (args.from_dir is None or not args.from_dir.is_dir()):
        parser.error("--from DIR (an existing directory) is required with --source local")

    identity = {"source": args.source, "model": args.model or args.gcs_uri or str(args.from_dir),
                "revision": args.revision, **({"code": True} if args.code else {})}
    marker = args.dest / MARKER
    try:
        if marker.is_file() and {k: v for k, v in json.loads(marker.read_text()).items() if k in identity} == identity:
            log(f"already complete: {identity['model']}@{args.revision}; verifying only")
        else:
            marker.unlink(missing_ok=True)
            args.dest.mkdir(parents=True, exist_ok=True)
            log(f"downloading {identity['model']}@{args.revision} into {args.dest}")
            fetch(args, args.dest)
        summary = verify(args.dest, args.min_bytes, args.code)
    except DownloadError as exc:
        print(f"[model-downloader] FAILED: {exc}", file=sys.stderr, flush=True)
        return 1
    except Exception as exc:  # network, auth, disk errors: one line, non-zero
        reason = (str(exc).splitlines() or [type(exc).__name__])[0]
        print(f"[model-downloader] FAILED: {type(exc).__name__}: {reason}", file=sys.stderr, flush=True)
        return 1
    marker.write_text(json.dumps({**identity, **summary}))
    # The snapshot is taken from the disk once this container has exited; flush everything first.
    os.sync()
    log(f"verified {summary['files']} safetensors files, {summary['bytes']} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
