#!/usr/bin/env python3
"""The weights each GPU of a tensor- or pipeline-parallel layout loads, on real GPUs, against the planner's placement
of the checkpoint's tensors (planner/checkpoint.py tensor_groups, planner/memory.py checkpoint_stages).

    python3 bench/shards.py models/Llama-3.2-3B-Instruct.json@1x2 models/Qwen3-30B-A3B.json:24@1x2 --predict-only
    python3 bench/shards.py models/Llama-3.2-3B-Instruct.json@1x2 ... --out DIR     (on a host with the GPUs)

Each argument is a bench/calibrate.py entry with `@TPxPP`. The checkpoint's tensors are the ones transformers builds
for the config (on torch's meta device: names and shapes as a checkpoint written by it stores them, bf16). vLLM
starts on a model directory with that config (random weights, --load-format dummy, eager) and is stopped once every
worker has logged `Model loading took N GiB`; each worker's number is compared with the planner's for its stage
(its tensors, the rotary caches and the load overhead the planner adds), and with what the even split the planner
used before gives.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.calibrate import entry_config, model_dir, parse_entry  # noqa: E402
from bench.harness import Group  # noqa: E402
from planner.architecture import ModelArchitecture  # noqa: E402
from planner.catalog import GIB  # noqa: E402
from planner.checkpoint import tensor_groups  # noqa: E402
from planner.layout import Layout  # noqa: E402
from planner.memory import LOAD_OVERHEAD_GIB, checkpoint_stages, rotary_cache_bytes, routed_fraction  # noqa: E402
from planner.model_config import parse_hf_config  # noqa: E402

LOADED = re.compile(r"^\((\w+) pid=\d+\).*Model loading took ([\d.]+) GiB", re.M)
STAGE = re.compile(r"PP(\d+)")


def parse(arg: str) -> tuple[str, int, int]:
    entry, _, layout = arg.partition("@")
    tp, _, pp = layout.partition("x")
    if not (tp.isdigit() and pp.isdigit()):
        raise SystemExit(f"{arg}: expected ENTRY@TPxPP, e.g. models/Llama-3.2-3B-Instruct.json@1x2")
    parse_entry(entry)
    return entry, int(tp), int(pp)


def checkpoint_tensors(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """{name: {dtype, shape}} of the model transformers builds for this config, as its checkpoint stores it."""
    import torch
    import transformers

    raw = {k: v for k, v in config.items() if k not in ("quantization_config", "auto_map")}
    hf_config = transformers.AutoConfig.for_model(**raw)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf_config, dtype=torch.bfloat16)
    # named_parameters lists a tied lm_head once, under the input table's name, as save_pretrained writes it
    return {name: {"dtype": "BF16", "shape": list(t.shape)} for name, t in model.named_parameters()}


def predict(entry: str, tp: int, pp: int) -> dict[str, Any]:
    config = entry_config(*parse_entry(entry))
    arch = parse_hf_config(config, entry, "bench/shards.py")
    tensors = checkpoint_tensors(config)
    placed = replace(arch, checkpoint_groups=tensor_groups(tensors, arch, "bench/shards.py"))
    total = sum(math.prod(t["shape"]) * 2 for t in tensors.values())
    extra = LOAD_OVERHEAD_GIB + rotary_cache_bytes(arch) / GIB
    layout = Layout(tp, pp, 1)
    return {"entry": entry, "tp": tp, "pp": pp,
            "stages_gib_predicted": [round(sum(s) / GIB + extra, 3) for s in checkpoint_stages(placed, layout)],
            "even_split_gib": round(even_split_bytes(arch, layout, total) / GIB + extra, 3)}


def even_split_bytes(arch: ModelArchitecture, layout: Layout, total: float) -> float:
    """The baseline these runs compare with, the planner's placement before it read tensors or placed the count by
    stage (planner/memory.py counted_groups): everything but the routed experts evenly over tensor x pipeline, the
    routed experts as expert_shard places them, evenly over the stages."""
    routed = total * arch.routed_share()
    experts = routed * routed_fraction(arch, layout) / layout.pp if routed else 0.0
    return (total - routed) / layout.engine_gpus + experts


def measure(entry: str, tp: int, pp: int, work: Path, port: int, timeout: float) -> dict[str, Any]:
    config, layers, text_mode = parse_entry(entry)
    directory, _ = model_dir(work, config, layers, text_mode)
    cmd = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", str(directory), "--load-format", "dummy",
           "--tensor-parallel-size", str(tp), "--pipeline-parallel-size", str(pp), "--max-model-len", "2048",
           "--enforce-eager", "--gpu-memory-utilization", "0.85", "--port", str(port)]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(tp * pp))}
    group = Group(work, f"shards-{directory.name}-{tp}x{pp}")
    proc = group.start("server", cmd, env)
    log_path = proc.log
    start = time.monotonic()
    try:
        while proc.popen.poll() is None and time.monotonic() - start < timeout \
                and len(LOADED.findall(log_path.read_text(errors="replace"))) < tp * pp:
            time.sleep(1)
    finally:
        group.stop(grace=5)  # the whole session, then the GPUs checked free for the next run
    text = log_path.read_text(errors="replace")
    workers = {name: float(gib) for name, gib in LOADED.findall(text)}
    stages: dict[int, float] = {}
    for name, gib in workers.items():
        found = STAGE.search(name)
        stage = int(found.group(1)) if found else 0
        stages[stage] = max(stages.get(stage, 0.0), gib)
    row = {"entry": entry, "tp": tp, "pp": pp, "workers_gib": workers,
           "stages_gib_measured": [stages.get(i) for i in range(pp)], "seconds": round(time.monotonic() - start, 1)}
    if len(workers) < tp * pp:
        row["log_tail"] = text.splitlines()[-30:]
    print(json.dumps(row), flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="ENTRY@TPxPP")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks")
    parser.add_argument("--work", type=Path, default=Path("/tmp/vllm-gke-shards"))
    parser.add_argument("--timeout", type=float, default=240)
    parser.add_argument("--predict-only", action="store_true")
    args = parser.parse_args(argv)
    runs = [parse(a) for a in args.runs]
    args.out.mkdir(parents=True, exist_ok=True)
    if args.predict_only:
        rows = [predict(*run) for run in runs]
        (args.out / "shards-predictions.json").write_text(json.dumps({"rows": rows}, indent=2) + "\n")
        return 0
    args.work.mkdir(parents=True, exist_ok=True)
    rows = [measure(*run, args.work, 8400 + i, args.timeout) for i, run in enumerate(runs)]
    (args.out / "shards.json").write_text(json.dumps({"rows": rows}, indent=2) + "\n")
    return 0 if all(len(r["workers_gib"]) == r["tp"] * r["pp"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
