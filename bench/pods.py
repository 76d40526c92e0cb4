#!/usr/bin/env python3
"""Render the pods the GPU benchmark starts "as declared": the program's own objects for a stack per layout.

    python3 bench/pods.py [--out bench/pods] [--config models/Llama-3.1-8B-Instruct.json]

For each layout of `STACKS` it runs the Pulumi program through Pulumi's mocks runtime (no cloud, no CLI) on
the dev stack with the benchmark's model and vLLM settings, and writes OUT/<layout>.json: every Kubernetes
object the program declares. `bench/run.py --pods OUT` then runs the LeaderWorkerSet's leader (and worker)
templates through tools/pod_runner.py: UID 10001 with no passwd entry, read-only root, the rendered env,
mounts and probes, each pod in its own network namespace. Runs where Pulumi is installed (`make bench-pods`);
the GPU host needs only the JSON files.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BENCH_VLLM = {"maxModelLen": 8192, "gpuMemoryUtilization": 0.9, "dtype": "bfloat16", "kvCacheDtype": "auto"}
"""The settings bench/run.py passes by default (--max-model-len, --gpu-memory-utilization, --dtype, ...)."""
H200 = {"type": "nvidia-h200-141gb", "machineType": "a3-ultragpu-8g", "zones": ["us-central1-a"]}
ONE_GPU_NODES = {"type": "nvidia-h100-80gb", "machineType": "a3-highgpu-1g", "zones": ["us-central1-a"],
                 "provisioning": "spot", "spotMultiNode": True}
"""GCE sells no one-GPU H200 machine; a group of one-GPU nodes is planned on A3 High's 1-GPU shape (sold as Spot or
flex-start only; a Spot group needs the opt-in since issue 32). The pods' command, env, mounts and probes do not
depend on the GPU model (only nodeSelector and resources do)."""
TWO_H100 = {"type": "nvidia-h100-80gb", "machineType": "a3-highgpu-2g", "zones": ["us-central1-a"],
            "provisioning": "spot"}
"""A one-node, two-GPU group (bench/layouts.py's dp2-ep on a two-H100 host)."""
STACKS: dict[str, dict[str, Any]] = {
    "tp1": {"accelerator": H200, "parallelism": {"tensor": 1, "pipeline": 1}},
    # Weights from config.json alone, as bench/layouts.py runs its other layouts.
    "dp2-ep": {"accelerator": TWO_H100, "parallelism": {"tensor": 1, "data": 2, "expert": True},
               "vllm": {"extraArgs": ["--load-format", "dummy"]}},
    # Two one-GPU pods; bench/run.py's TCP layouts pass the same flag (vLLM's own all-reduce would use NVLink).
    "pp2-across-nodes-tcp": {"accelerator": ONE_GPU_NODES, "parallelism": {"tensor": 1, "pipeline": 2},
                             "vllm": {"extraArgs": ["--disable-custom-all-reduce"]}},
}
"""Bench layout -> stack sections on top of the dev stack; the layout names are bench/run.py's."""


def stack_config(config_json: Path, layout: str, vllm: dict[str, Any] | None = None) -> dict[str, Any]:
    """The whole stack config (gcp: keys too) of the dev stack with the benchmark's model, vLLM settings (bench/run.py's
    defaults, `vllm` overriding) and layout."""
    from tools.plan import read_stack_file

    base = read_stack_file(ROOT / "Pulumi.dev.yaml")
    extra = STACKS[layout]
    sections = {
        "vllm-gke:accelerator": extra["accelerator"],
        "vllm-gke:model": {"id": f"bench/{config_json.stem}", "configFile": str(config_json.resolve()),
                           "servedName": config_json.stem.lower()},
        "vllm-gke:vllm": {**BENCH_VLLM, **(vllm or {}), **extra.get("vllm", {})},
        "vllm-gke:parallelism": extra["parallelism"],
    }
    return {**base, **sections}


def render(config_json: Path, out: Path, vllm: dict[str, Any] | None = None,
           layouts: tuple[str, ...] = ("tp1", "pp2-across-nodes-tcp")) -> list[Path]:
    from tools.mocks import run_program

    out.mkdir(parents=True, exist_ok=True)
    written = []
    for layout in layouts:
        objects = run_program(stack_config(config_json, layout, vllm)).kubernetes_objects()
        path = out / f"{layout}.json"
        path.write_text(json.dumps({"layout": layout, "config": str(config_json.name), "objects": objects},
                                   indent=1) + "\n")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "pods")
    parser.add_argument("--config", type=Path, default=ROOT / "models" / "Llama-3.1-8B-Instruct.json")
    parser.add_argument("--max-model-len", type=int, default=BENCH_VLLM["maxModelLen"],
                        help="as bench/run.py's --max-model-len")
    parser.add_argument("--gpu-memory-utilization", type=float, default=BENCH_VLLM["gpuMemoryUtilization"],
                        help="as bench/run.py's --gpu-memory-utilization")
    parser.add_argument("--layouts", default="tp1,pp2-across-nodes-tcp",
                        help=f"comma-separated, of {', '.join(STACKS)}")
    args = parser.parse_args(argv)
    layouts = tuple(name for name in args.layouts.split(",") if name)
    if unknown := [name for name in layouts if name not in STACKS]:
        print(f"bench/pods.py: --layouts: {', '.join(unknown)} unknown; known: {', '.join(STACKS)}", file=sys.stderr)
        return 2
    if not args.config.is_file():
        print(f"bench/pods.py: --config {args.config}: no such file", file=sys.stderr)
        return 2
    vllm = {"maxModelLen": args.max_model_len, "gpuMemoryUtilization": args.gpu_memory_utilization}
    try:
        written = render(args.config, args.out, vllm, layouts)
    except Exception as exc:  # the program's own one-line config error (pulumi.RunError) or a config.json problem
        print(f"bench/pods.py: {str(exc).strip().splitlines()[-1]}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
