#!/usr/bin/env python3
"""Gemma 4's encoder profile on a real GPU, against the planner's (planner/memory.py gemma4_tower_bytes).

    python3 bench/tower_peak.py models/gemma-4-31B-it.json --accelerator nvidia-h200-141gb --predict-only
    python3 bench/tower_peak.py models/gemma-4-31B-it.json --accelerator nvidia-h200-141gb --out DIR   (on the GPU)

vLLM 0.25.1, the newest the GPU hosts run, cannot start Gemma 4 (docs/benchmarks.md "Held to vLLM 0.32.0's code
only"), but the tower vLLM 0.32.0 runs is transformers' own (gemma4_mm.py builds it with AutoModel.from_config), and
the host has transformers. So this builds that tower from the config's vision_config in bf16 on the GPU (random
weights) and runs the dummy batch of vLLM 0.32.0's encoder profile through it the way gemma4_mm.py does: the batch
the planner sizes (gemma4_items, encoder_items: the images or video frames, each padded to its most patches, with
the real patches of the 224 x 224 dummy image the processor resizes), the tower over chunks of tower_chunk of them
(_process_image_input / _process_video_input), a video's outputs gathered, each image or frame pooled, standardized
and projected to the decoder's width. The measure is torch's peak allocated memory over the run, less what was
allocated before the batch was made, as vLLM's `torch peak memory increase` counts a profile. Each `--extra` is a
set of vLLM flags (vllm.extraArgs) the batch is sized for.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from planner.catalog import ACCELERATORS, GIB  # noqa: E402
from planner.memory import (  # noqa: E402
    default_engine,
    encoder_items,
    gemma4_items,
    gemma4_modality,
    gemma4_tower_bytes,
    tower_chunk,
    with_item_floor,
)
from planner.model_config import parse_hf_config  # noqa: E402

DUMMY_SIDE = 224
"""The side of vLLM's dummy image and video frame for Gemma 4 (Gemma4DummyInputsBuilder: the image processor's size,
None for Gemma 4's, so 224 x 224)."""


def real_patches(side: int, patch: int, pool: int, soft: int) -> int:
    """Patches of a side x side image after the processor's resize to at most soft x pool^2 patches, on a grid of
    patch x pool pixels (Gemma4ProcessingInfo._compute_num_soft_tokens's arithmetic, before its clamp)."""
    unit, most = patch * pool, soft * pool * pool
    scale = math.sqrt(most / ((side / patch) ** 2))
    edge = max(unit, math.floor(side * scale / unit) * unit) // patch
    return min(edge * edge, most)


def batch(config: dict, accelerator: str, extra: tuple[str, ...]) -> dict:
    """What the planner says vLLM 0.32.0's encoder profile runs for this stack, and its bytes."""
    arch = parse_hf_config(config, "tower", "tower_peak")
    engine = with_item_floor(arch, replace(default_engine(ACCELERATORS[accelerator], "0.32.0", extra_args=extra),
                                           max_model_len=8192))
    modality = gemma4_modality(arch, engine)
    _, per_item, patches = gemma4_items(arch, engine)[modality]
    items = encoder_items(arch, engine)
    vision = config["vision_config"]
    soft = patches // arch.encoder_input.pool ** 2
    return {"accelerator": accelerator, "extra": list(extra), "modality": modality, "items": items,
            "units": items * per_item, "patches": patches, "chunk": min(items * per_item,
                                                                       tower_chunk(arch, engine, patches)),
            "real_patches": real_patches(DUMMY_SIDE, vision["patch_size"], vision["pooling_kernel_size"], soft),
            "out": arch.encoder_input.out, "predicted_gib": round(gemma4_tower_bytes(arch, engine, items) / GIB, 3)}


def phase_hooks(tower, before: int, phases: dict) -> None:
    """Record in `phases` the peak GiB over `before` inside the first block's attention and MLP, and the
    allocated GiB at the block's input, on the first chunk (a diagnostic: --phases)."""
    import torch

    block = tower.encoder.layers[0]

    def start(name):
        def hook(module, args, kwargs=None):
            if name not in phases:
                torch.cuda.synchronize()
                phases[f"{name}_input_gib"] = round((torch.cuda.memory_allocated() - before) / GIB, 3)
                torch.cuda.reset_peak_memory_stats()
        return hook

    def stop(name):
        def hook(module, args, output):
            if name not in phases:
                torch.cuda.synchronize()
                phases[name] = round((torch.cuda.max_memory_allocated() - before) / GIB, 3)
        return hook

    for name, module in (("attention", block.self_attn), ("mlp", block.mlp)):
        module.register_forward_pre_hook(start(name))
        module.register_forward_hook(stop(name))


def live_at_peak(snapshot: dict) -> list[dict]:
    """The blocks live at the trace's peak (torch.cuda.memory._snapshot with its history), largest first, each with
    the transformers or torch line that allocated it (a diagnostic: --trace)."""
    import linecache

    trace = next(t for t in snapshot["device_traces"] if t)
    live: dict[int, dict] = {}
    current = peak = 0
    at_peak: dict[int, dict] = {}
    for event in trace:
        if event["action"] == "alloc":
            live[event["addr"]] = event
            current += event["size"]
        elif event["action"] == "free_completed" and event["addr"] in live:
            current -= live.pop(event["addr"])["size"]
        if current > peak:
            peak, at_peak = current, dict(live)

    def site(frames: list[dict]) -> str:
        kept = [f for f in frames if "/transformers/" in f["filename"] or "tower_peak" in f["filename"]][:2]
        return " <- ".join(f"{f['filename'].rsplit('/', 1)[-1]}:{f['line']} "
                           f"{linecache.getline(f['filename'], f['line']).strip()[:90]}" for f in kept)

    blocks = sorted(at_peak.values(), key=lambda e: -e["size"])
    return [{"gib": round(e["size"] / GIB, 4), "site": site(e.get("frames", []))} for e in blocks[:40]]


def measure(config: dict, plan: dict, phases: dict | None = None) -> float:
    """Peak GiB the batch adds while it runs through transformers' Gemma 4 tower on this GPU (bf16, random
    weights); with `phases`, the first block's phases instead of the whole run's peak (phase_hooks)."""
    import torch
    from transformers import AutoConfig, AutoModel

    vision = AutoConfig.for_model(**config["vision_config"])
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        tower = AutoModel.from_config(vision).eval()
        project = torch.nn.Linear(vision.hidden_size, plan["out"], bias=False)
    torch.set_default_dtype(torch.float32)
    units, patches, real = plan["units"], plan["patches"], plan["real_patches"]
    side = math.isqrt(real)
    with torch.inference_mode():  # cuBLAS's workspace, allocated at a process's first matmul, as vLLM's is by then
        project(torch.zeros(1, vision.hidden_size, dtype=torch.bfloat16, device="cuda"))
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    if phases is not None:
        phase_hooks(tower, before, phases)
    with torch.inference_mode():
        values = torch.rand(units, patches, 3 * vision.patch_size ** 2, dtype=torch.bfloat16, device="cuda")
        grid = torch.stack(torch.meshgrid(torch.arange(side), torch.arange(side), indexing="xy"), -1).reshape(-1, 2)
        positions = torch.full((units, patches, 2), -1, dtype=torch.long, device="cuda")
        positions[:, :real] = grid.to("cuda")
        padding = (positions == -1).all(dim=-1)
        outputs = []
        for start in range(0, units, plan["chunk"]):
            stop = start + plan["chunk"]
            embeds = tower.patch_embedder(values[start:stop], positions[start:stop],
                                          padding[start:stop]).to(torch.bfloat16)
            outputs.append(tower.encoder(inputs_embeds=embeds, attention_mask=~padding[start:stop],
                                         pixel_position_ids=positions[start:stop]).last_hidden_state)
            del embeds
        hidden = torch.cat(outputs) if plan["modality"] == "video" else None
        pooled = []
        for unit in range(units):
            states = hidden[unit] if hidden is not None else outputs[unit // plan["chunk"]][unit % plan["chunk"]]
            out, mask = tower.pooler(hidden_states=states.unsqueeze(0), pixel_position_ids=positions[unit:unit + 1],
                                     padding_positions=padding[unit:unit + 1],
                                     output_length=patches // vision.pooling_kernel_size ** 2)
            valid = out[mask]
            if getattr(vision, "standardize", False):
                valid = (valid - tower.std_bias) * tower.std_scale
            pooled.append(valid)
        project(torch.cat(pooled).to(torch.bfloat16))
        torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - before) / GIB


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", type=Path, help="a Gemma 4 config.json (models/...)")
    parser.add_argument("--accelerator", default="nvidia-h200-141gb", choices=sorted(ACCELERATORS))
    parser.add_argument("--extra", action="append", default=[], help="vLLM flags as one string (repeatable)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/tower-peak"))
    parser.add_argument("--predict-only", action="store_true")
    parser.add_argument("--phases", action="store_true",
                        help="record the first block's attention and MLP peaks (a diagnostic run, not a check)")
    parser.add_argument("--trace", action="store_true",
                        help="record the blocks live at the peak (a diagnostic run, not a check)")
    args = parser.parse_args(argv)
    config = json.loads(args.config.read_text())
    if config.get("model_type") != "gemma4":
        parser.error(f"{args.config}: model_type {config.get('model_type')!r}, expected gemma4")
    plans = [batch(config, args.accelerator, tuple(extra.split())) for extra in (args.extra or [""])]
    args.out.mkdir(parents=True, exist_ok=True)
    if args.predict_only:
        (args.out / "predictions.json").write_text(json.dumps(plans, indent=2) + "\n")
        print(json.dumps(plans, indent=2))
        return 0
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:False")
    import torch

    for plan in plans:
        plan["device"] = torch.cuda.get_device_name()
        if args.phases:
            plan["phases"] = {}
            measure(config, plan, plan["phases"])
        if args.trace:
            torch.cuda.memory._record_memory_history(max_entries=2_000_000)
            measure(config, plan)
            plan["live_at_peak"] = live_at_peak(torch.cuda.memory._snapshot())
            torch.cuda.memory._record_memory_history(enabled=None)
        plan["measured_gib"] = round(measure(config, plan), 3)
        plan["error"] = round(plan["predicted_gib"] / plan["measured_gib"] - 1, 4)
        print(json.dumps(plan), flush=True)
    (args.out / "tower_peak.json").write_text(json.dumps(plans, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
