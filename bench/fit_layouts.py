"""The fit of planner/throughput.py's efficiencies on measured layouts, and its check on layouts it was not fitted on.

    python bench/fit_layouts.py            print THROUGHPUT_FIT fitted on the batches marked in_fit, every row's error
    python bench/fit_layouts.py --check    the same, exit 1 when planner/throughput.py's THROUGHPUT_FIT differs

The rows are docs/benchmarks/results.json "layouts": batches of layouts served on one host (output tokens per second
from vLLM's benchmark client, the KV tokens each engine's log reported). A batch is fitted on when it says
`in_fit`; the others are predicted with the constants as they are and report their errors (a validation batch is
predicted and committed before it runs). The fit minimises the squared log error of tokens per GPU over the in-fit
rows, from each row's measured KV tokens (so the throughput model is fitted, not the memory model), by a coordinate
search over the four constants in log space.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from planner.catalog import ACCELERATORS  # noqa: E402
from planner.layout import Fit, Layout, fit  # noqa: E402
from planner.memory import default_engine, kv_dtype_bytes, model_weight_bytes  # noqa: E402
from planner.model_config import load_architecture  # noqa: E402
from planner.throughput import THROUGHPUT_FIT, ThroughputFit, Workload, estimate  # noqa: E402

RESULTS = ROOT / "docs" / "benchmarks" / "results.json"


@dataclass(frozen=True)
class Row:
    batch: str
    name: str
    in_fit: bool
    measured: float
    """Output tokens per second per GPU."""
    predict: Any
    """ThroughputFit -> predicted tokens per second per GPU from the measured KV tokens."""


def layout_of(spec: dict[str, Any]) -> Layout:
    return Layout(spec.get("tp", 1), spec.get("pp", 1), 1, spec.get("dp", 1), spec.get("ep", False))


def rows(results: dict[str, Any]) -> list[Row]:
    out = []
    for batch in results.get("layouts", {}).get("batches", []):
        arch, _ = load_architecture("bench/model", "main", str(ROOT / batch["config"]), None, ROOT)
        acc = ACCELERATORS[batch["accelerator"]]
        engine = default_engine(acc, batch["vllm"])
        weights = model_weight_bytes(arch, "bfloat16")
        kv_bytes = kv_dtype_bytes("auto", "bfloat16", arch, engine)
        for row in batch["rows"]:
            if row.get("output_tokens_per_s_per_gpu") is None or not row.get("kv_cache_tokens_measured"):
                continue
            layout = layout_of(row["layout"])
            planned = fit(arch, acc, layout, batch["gpu_memory_utilization"], weights, kv_bytes,
                          batch["max_model_len"], engine)
            measured_fit = Fit(planned.weights_per_gpu, planned.usable_per_gpu, planned.kv_bytes_per_token,
                               row["kv_cache_tokens_measured"], layout.dp)
            requests = -(-batch["prompts"] // row["layout"].get("replicas", 1))
            work = Workload(batch["input_len"], batch["output_len"], requests)

            def predict(c: ThroughputFit, arch=arch, acc=acc, layout=layout, weights=weights, got=measured_fit,
                        engine=engine, work=work) -> float:
                return estimate(arch, acc, layout, weights, got, engine, work, c).tokens_per_s_per_gpu

            out.append(Row(batch["name"], row["name"], bool(batch.get("in_fit")), row["output_tokens_per_s_per_gpu"],
                           predict))
    return out


def loss(data: list[Row], c: ThroughputFit) -> float:
    return sum(math.log(max(r.predict(c), 1e-9) / r.measured) ** 2 for r in data)


BOUNDS = {"step_seconds": (1e-4, 0.05), "memory_efficiency": (0.2, 1.0), "matrix_efficiency": (0.05, 1.0),
          "collective_seconds": (1e-6, 1e-3)}


def fit_constants(data: list[Row], start: ThroughputFit = THROUGHPUT_FIT) -> ThroughputFit:
    best, best_loss = start, loss(data, start)
    step = 1.0
    while step > 0.01:
        improved = False
        for f in fields(ThroughputFit):
            for direction in (1, -1):
                value = getattr(best, f.name) * math.exp(direction * step)
                low, high = BOUNDS[f.name]
                if not low <= value <= high:
                    continue
                candidate = replace(best, **{f.name: float(f"{value:.3g}")})
                got = loss(data, candidate)
                if got < best_loss - 1e-12:
                    best, best_loss, improved = candidate, got, True
        if not improved:
            step /= 2
    return best


def literal(c: ThroughputFit) -> str:
    return ("THROUGHPUT_FIT = ThroughputFit(" + ", ".join(f"{f.name}={getattr(c, f.name)!r}" for f in fields(c))
            + ")")


def report(results: dict[str, Any]) -> tuple[ThroughputFit, list[dict[str, Any]]]:
    data = rows(results)
    fitted = fit_constants([r for r in data if r.in_fit])
    table = [{"batch": r.batch, "layout": r.name, "in_fit": r.in_fit, "measured": r.measured,
              "predicted": round(r.predict(fitted)), "error": round(r.predict(fitted) / r.measured - 1, 4)}
             for r in data]
    return fitted, table


TWO_GPU_MACHINE = {"nvidia-h100-80gb": "a3-highgpu-2g", "nvidia-a100-80gb": "a2-ultragpu-2g",
                   "nvidia-tesla-a100": "a2-highgpu-2g"}
"""The two-GPU machine of each GPU the layout runs are made on (planner/catalog.py)."""


def predicted_batch(config: str, accelerator: str, layout_names: list[str], max_model_len: int, input_len: int,
                    output_len: int, prompts: int, vllm: str = "0.25.1") -> dict[str, Any]:
    """The planner's numbers for a layout run before it runs: each layout's KV tokens per engine and output tokens
    per GPU (this benchmark's prompt count), and the layout the automatic choice takes on a two-GPU machine."""
    from bench.harness import LAYOUTS
    from planner import sizing
    from planner.config import build_settings

    arch, _ = load_architecture("bench/model", "main", str(ROOT / config), None, ROOT)
    acc = ACCELERATORS[accelerator]
    engine = default_engine(acc, vllm)
    weights = model_weight_bytes(arch, "bfloat16")
    kv_bytes = kv_dtype_bytes("auto", "bfloat16", arch, engine)
    rows_out = []
    for name in layout_names:
        bench = LAYOUTS[name]
        layout = Layout(bench.tp, bench.pp, 1, bench.dp, bench.ep)
        got = fit(arch, acc, layout, 0.9, weights, kv_bytes, max_model_len, engine)
        work = Workload(input_len, output_len, -(-prompts // bench.replicas))
        est = estimate(arch, acc, layout, weights, got, engine, work) if got.weights_fit else None
        rows_out.append({"name": name, "kv_cache_tokens_predicted": got.kv_tokens if got.weights_fit else None,
                         "weights_gib_per_gpu_predicted": round(got.weights_per_gpu / 2**30, 2),
                         "predicted_tokens_per_s_per_gpu": round(est.tokens_per_s_per_gpu) if est else None})
    raw = {"cluster": {"name": "bench", "location": "us-central1", "create": False},
           "accelerator": {"type": accelerator, "machineType": TWO_GPU_MACHINE[accelerator], "provisioning": "spot",
                           "zones": ["us-central1-a"]},
           "model": {"id": "bench/model", "configFile": str(ROOT / config)},
           "parallelism": {"typicalInputTokens": input_len, "typicalOutputTokens": output_len},
           "vllm": {"image": f"vllm/vllm-openai:v{vllm}", "maxModelLen": max_model_len, "dtype": "bfloat16"}}
    plan = sizing.plan(build_settings(raw, ROOT))
    choice = {(1, 1, False): "tp1", (2, 1, False): "tp2-one-node", (1, 2, True): "dp2-ep"}.get(
        (plan.tensor_parallel_size, plan.data_parallel_size, plan.expert_parallel), "other")
    if choice == "tp1" and "replicas-2x-tp1" in layout_names:
        choice = "replicas-2x-tp1"  # a TP=1 replica: two of them on the two GPUs
    return {"config": config, "accelerator": accelerator, "vllm": vllm, "max_model_len": max_model_len,
            "input_len": input_len, "output_len": output_len, "prompts": prompts, "planner_choice": choice,
            "compared": [o.as_dict() for o in plan.layouts_compared], "rows": rows_out}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    fitted, table = report(json.loads(args.results.read_text()))
    for row in table:
        print(f"{row['batch']:<40} {row['layout']:<16} {'fit' if row['in_fit'] else 'held out':<9} "
              f"measured {row['measured']:>8.0f}  predicted {row['predicted']:>8.0f}  {row['error']:+.1%}")
    print(literal(fitted))
    if args.check and fitted != THROUGHPUT_FIT:
        print(f"planner/throughput.py has {literal(THROUGHPUT_FIT)}; paste the line above", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
