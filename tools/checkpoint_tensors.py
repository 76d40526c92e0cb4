"""Write a checkpoint's tensors (name, dtype, shape) into the JSON file model.tensorsFile names.

    python -m tools.checkpoint_tensors meta-llama/Llama-3.1-8B-Instruct --out models/Llama-3.1-8B-Instruct.tensors.json
    python -m tools.checkpoint_tensors /path/to/checkpoint-dir --out my-model.tensors.json
    python -m tools.checkpoint_tensors gs://my-models/llama-3.1-8b --out my-model.tensors.json
    python -m tools.checkpoint_tensors deepseek-ai/DeepSeek-V3.2 --compact --out models/tensors/DeepSeek-V3.2.json

A Hub repository is read through huggingface_hub's safetensors metadata functions (HTTP range reads of each file's
header; HF_TOKEN for gated models); a gs:// prefix through the Cloud Storage JSON API's range reads (planner/gcs.py,
Application Default Credentials); a local directory from its .safetensors files' headers. No weight is read.
--compact writes a row per run of tensors that differ only in their layer / expert indices and share dtype and shape
(`model.layers.{3-61}.mlp.experts.{0-255}.down_proj.weight`): DeepSeek-V3.2's 92,425 tensors are 50 rows, a file to
review and commit beside model.configFile; the plan expands it to the same tensors.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from planner.checkpoint import hub_tensors, read_directory, write_tensors_file  # noqa: E402
from planner.gcs import gcs_tensors  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", help="a Hugging Face repo id, a gs://bucket/prefix, or a local checkpoint directory")
    parser.add_argument("--revision", default="main", help="branch, tag or commit on the Hub (default: main)")
    parser.add_argument("--out", type=Path, required=True, help="the JSON file to write")
    parser.add_argument("--compact", action="store_true",
                        help="one row per run of tensors differing only in layer / expert indices")
    args = parser.parse_args(argv)
    local = Path(args.source)
    try:
        if local.is_dir():
            files = sorted(p.name for p in local.glob("*.safetensors"))
            if not files:
                print(f"error: source {args.source}: no .safetensors files in this directory", file=sys.stderr)
                return 2
            tensors, where = read_directory(local), str(local)
        elif args.source.startswith("gs://"):
            tensors, files = gcs_tensors(args.source)
            where = args.source
        else:
            tensors, files = hub_tensors(args.source, args.revision)
            where = f"{args.source}@{args.revision}"
    except Exception as exc:  # network, auth, not found, a malformed header: one line, the source named
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"error: source {args.source}: could not read the safetensors headers ({reason})", file=sys.stderr)
        return 2
    write_tensors_file(tensors, where, args.out, files, compact=args.compact)
    print(f"wrote {len(tensors)} tensors of {len(files)} file(s) from {where} to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
