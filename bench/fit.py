"""The fit of the planner's memory outside the KV cache (planner/sizing.py) from the GPU rows in
docs/benchmarks/results.json, written down so it can be re-run and checked.

Each constant is fitted on the rows named here, from vLLM's own profiling lines (`torch peak memory increase`,
`non-torch forward increase memory`, `CUDA graph memory`, `Graph capturing finished ... took`):

- dense peak (PEAK_BASE_GIB, PEAK_PER_LOGITS, PEAK_PER_HIDDEN): least squares over the rows without experts or
  latent attention (all served by Model Runner V2 on 0.25.1);
- V1 sampler (V1_SAMPLER_PER_LOGITS): the MoE rows without latent attention that vLLM 0.25.1 runs on the V1 runner,
  after the dense peak and the MoE workspace (taken from vLLM's source, not fitted);
- latent attention (MLA_PEAK_PER_HEAD_GIB): the MLA rows, after the dense peak;
- non-torch memory, the baseline before profiling, the dense CUDA-graph line and the V1 graph estimates.

The rows are every started checkpoint up to the last validation batch; a new batch is predicted with these constants
before it runs (`python bench/calibrate.py --predict`) and only then joins this set. `python bench/fit.py` prints the
constants, each row's residual and its leave-one-out residual; tests/unit/test_fit.py holds planner/sizing.py's
constants to this fit.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from planner.architecture import ModelArchitecture, parse_hf_config  # noqa: E402
from planner.catalog import ACCELERATORS, GIB  # noqa: E402
from planner.sizing import PEAK_FIT_SETTINGS, Layout, default_engine, moe_workspace_bytes, runner_v2  # noqa: E402

RESULTS = ROOT / "docs" / "benchmarks" / "results.json"
PEAK = re.compile(r"torch peak memory increase: ([\d.]+)GiB")
NON_TORCH = re.compile(r"non-torch forward increase memory: ([\d.]+)GiB")
NON_KV = re.compile(r"Total non KV cache memory: ([\d.]+)GiB")
V1_GRAPHS = re.compile(r"^CUDA graph memory: ([\d.]+) GiB")


@dataclass(frozen=True)
class Row:
    model: str
    arch: ModelArchitecture
    peak: float
    non_torch: float
    non_kv: float
    available: float
    graphs_estimate: float | None
    """What the V1 runner subtracted for CUDA graphs (its `CUDA graph memory` line); None on V2."""
    graphs_captured: float | None
    """`Graph capturing finished ... took N GiB` (V2 runs)."""
    v2: bool
    source: str

    @property
    def logits(self) -> float:
        return PEAK_FIT_SETTINGS[0] * self.arch.vocab_size * 4 / GIB

    @property
    def hidden(self) -> float:
        return PEAK_FIT_SETTINGS[1] * self.arch.hidden_size * 2 / GIB

    @property
    def workspace(self) -> float:
        return moe_workspace_bytes(self.arch, Layout(1, 1, 1), ENGINE) / GIB

    @property
    def family(self) -> str:
        if self.arch.kv_lora_rank:
            return "mla"
        if self.arch.num_experts:
            return "moe-v2" if self.v2 else "moe-v1"
        return "dense"


ACCELERATOR = "nvidia-h200-141gb"
ENGINE = default_engine(ACCELERATORS[ACCELERATOR], "0.25.1")


def _profile(row: dict[str, Any]) -> str:
    profile = row.get("profile") or []
    return profile if isinstance(profile, str) else " ".join(profile)


def rows(results: dict[str, Any]) -> list[Row]:
    """Every started checkpoint of the calibration and validation runs, once per model (the 32k rows repeat the 8k
    profile)."""
    raw = [(r, "families") for r in results["calibration_families"]["rows"]]
    for batch in results["calibration_validation"]["batches"]:
        raw += [(r, batch["name"]) for r in batch["measured"]]
    seen: dict[str, Row] = {}
    for row, source in raw:
        text = _profile(row)
        if not row.get("kv_cache_tokens_measured") or not PEAK.search(text) or row["model"] in seen:
            continue
        arch = parse_hf_config(row["config"], row["model"], "results.json")
        lines = row.get("cudagraph_lines") or []
        estimate = next((float(m.group(1)) for line in lines if (m := V1_GRAPHS.match(line))), None)
        v2 = runner_v2(arch, ENGINE)
        if estimate is None and not v2:
            estimate = row.get("cudagraph_gib")  # the first rows kept the V1 estimate under this key
        seen[row["model"]] = Row(
            model=row["model"], arch=arch, peak=float(PEAK.search(text).group(1)),
            non_torch=float(NON_TORCH.search(text).group(1)), non_kv=float(NON_KV.search(text).group(1)),
            available=float(row["available_kv_gib_measured"]), graphs_estimate=None if v2 else estimate,
            graphs_captured=row.get("graphs_gib_measured") if v2 else None, v2=v2, source=source)
    return list(seen.values())


def _lstsq(features: list[list[float]], targets: list[float]) -> list[float]:
    """Ordinary least squares by the normal equations (a few unknowns; no numpy in the planner's environment)."""
    n = len(features[0])
    ata = [[sum(f[i] * f[j] for f in features) for j in range(n)] for i in range(n)]
    aty = [sum(f[i] * t for f, t in zip(features, targets, strict=True)) for i in range(n)]
    for col in range(n):  # Gauss-Jordan with partial pivoting
        pivot = max(range(col, n), key=lambda r: abs(ata[r][col]))
        ata[col], ata[pivot] = ata[pivot], ata[col]
        aty[col], aty[pivot] = aty[pivot], aty[col]
        for r in range(n):
            if r != col:
                factor = ata[r][col] / ata[col][col]
                ata[r] = [a - factor * b for a, b in zip(ata[r], ata[col], strict=True)]
                aty[r] -= factor * aty[col]
    return [aty[i] / ata[i][i] for i in range(n)]


def _through_origin(xs: list[float], ys: list[float]) -> float:
    return sum(x * y for x, y in zip(xs, ys, strict=True)) / sum(x * x for x in xs)


def fit(data: list[Row]) -> dict[str, float]:
    """The constants of planner/sizing.py's parts model, from these rows."""
    dense = [r for r in data if r.family == "dense"]
    base, per_logits, per_hidden = _lstsq([[1.0, r.logits, r.hidden] for r in dense], [r.peak for r in dense])

    def dense_peak(r: Row) -> float:
        return base + per_logits * r.logits + per_hidden * r.hidden

    v1 = [r for r in data if r.family == "moe-v1"]
    sampler = _through_origin([r.logits for r in v1], [r.peak - dense_peak(r) - r.workspace for r in v1])
    mla = [r for r in data if r.family == "mla"]
    per_head = _through_origin([float(r.arch.num_attention_heads) for r in mla], [r.peak - dense_peak(r) for r in mla])
    total = ACCELERATORS[ACCELERATOR].memory_bytes * 0.9 / GIB
    on_v2 = [r for r in data if r.v2]
    graphs = [r for r in on_v2 if r.graphs_captured]
    graphs_base, graphs_per_khidden = _lstsq([[1.0, r.arch.hidden_size / 1000] for r in graphs],
                                             [float(r.graphs_captured or 0) for r in graphs])
    return {
        "PEAK_BASE_GIB": base, "PEAK_PER_LOGITS": per_logits, "PEAK_PER_HIDDEN": per_hidden,
        "V1_SAMPLER_PER_LOGITS": sampler, "MLA_PEAK_PER_HEAD_GIB": per_head,
        "NON_TORCH_GIB": sum(r.non_torch for r in data) / len(data),
        "BASELINE_GIB": sum(total - r.non_kv - r.available for r in on_v2) / len(on_v2),
        "GRAPHS_DENSE_BASE_GIB": graphs_base, "GRAPHS_DENSE_PER_KHIDDEN_GIB": graphs_per_khidden,
        "GRAPHS_MOE_GIB": sum(float(r.graphs_estimate or 0) for r in v1) / len(v1),
        "GRAPHS_MLA_GIB": max(float(r.graphs_estimate or 0) for r in mla),
    }


def predicted_peak(r: Row, constants: dict[str, float]) -> float:
    """The peak the fitted constants give this row (without the planner's safety margin)."""
    c = constants
    peak = c["PEAK_BASE_GIB"] + c["PEAK_PER_LOGITS"] * r.logits + c["PEAK_PER_HIDDEN"] * r.hidden
    if r.family == "mla":
        return peak + constants["MLA_PEAK_PER_HEAD_GIB"] * r.arch.num_attention_heads
    if r.family == "moe-v1":
        peak += constants["V1_SAMPLER_PER_LOGITS"] * r.logits
    return peak + r.workspace


def leave_one_out(data: list[Row]) -> dict[str, float]:
    """Each row's peak residual (measured - predicted, GiB) under a fit that did not see it."""
    out = {}
    for r in data:
        rest = [o for o in data if o is not r]
        if r.family != "dense" and not any(o.family == r.family for o in rest) and r.family != "moe-v2":
            continue  # the only row of its family: nothing to fit its term on without it
        out[r.model] = r.peak - predicted_peak(r, fit(rest))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    data = rows(json.loads(args.results.read_text()))
    constants = fit(data)
    for name, value in constants.items():
        print(f"{name} = {value:.4f}")
    loo = leave_one_out(data)
    print(f"\n{'model':40} {'family':7} {'source':13} {'peak':>6} {'fit':>6} {'resid':>6} {'loo':>6}")
    for r in data:
        left = f"{loo[r.model]:+.2f}" if r.model in loo else "-"
        print(f"{r.model[:40]:40} {r.family:7} {r.source:13} {r.peak:6.2f} {predicted_peak(r, constants):6.2f} "
              f"{r.peak - predicted_peak(r, constants):+6.2f} {left:>6}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
