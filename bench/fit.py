"""The fit of the planner's memory outside the KV cache (planner/memory.py) from the GPU rows in
docs/benchmarks/results.json, written down so it can be re-run and checked.

Each constant is fitted on the rows named here, from vLLM's own profiling lines (`torch peak memory increase`,
`non-torch forward increase memory`, `CUDA graph memory`, `Graph capturing finished ... took`), on the features
planner/memory.py computes (peak_features) and through the same formula (fitted_peak_gib):

- dense peak, the larger of the sampling phase (PEAK_BASE_GIB, PEAK_PER_LOGITS, PEAK_PER_HIDDEN) and the forward
  phase (FORWARD_BASE_GIB, FORWARD_PER_HIDDEN, FORWARD_PER_MLP): two lines fitted by least squares over the rows
  without experts or latent attention (all served by Model Runner V2 on 0.25.1), each row on the phase that sets it;
- the V1 runner's terms (V1_SAMPLER_PER_LOGITS, V1_ATTENTION_PER_QUERY, V1_WORKSPACE_REUSE): least squares through
  the origin over the rows vLLM 0.25.1 ran on the V1 runner (MoE, MLA, hybrid), after the dense peak and the MoE
  workspace (taken from vLLM's source, not fitted);
- MoE models on Model Runner V2 (those 0.25.1 runs there by default, and those bench/calibrate.py --runner v2
  started there): the sampler's constant beside the logits and the workspace (MOE_V2_SAMPLER_BASE_GIB), the median
  over the rows without 0.25.1's router compile hold whose peak the sampler sets (logits above the forward line, the
  latent-attention floor more than 0.5 GiB below the peak), and that hold (V2_ROUTER_HOLD_PER_QUERY) through the
  origin over the rows with it;
- non-torch memory, the baseline before profiling (one per GPU it was measured on: the rows run on that GPU), the
  dense CUDA-graph line and the V1 graph estimates (MoE: the median; MLA: per 1,000 of hidden size, the largest
  ratio);
- the V2 CUDA graphs of MoE models beyond that line (GRAPHS_MOE_V2_PER_KQUERY_EXCESS): through the origin over the
  non-MLA MoE rows V2 captured, per 1,000 of query width beyond the hidden size, the line taken from the planner's
  own cudagraph_bytes for the deployed engine.

The rows are every started checkpoint up to the last finished validation batch, and the ablations (a checkpoint's
config with one field changed, run to separate two terms); a new batch is predicted with these constants before it
runs (`python bench/calibrate.py --predict-only`) and joins this set once all of it has run, unless it is marked
`held_out`: a batch that checks the constants as they are stays out of their fit, so the constants in
planner/memory_fit.py are the ones it validated (tests/unit/test_fit.py holds today's planner to its predictions). The
next refit takes it in and needs a new held-out batch. `python bench/fit.py` prints `FITTED = MemoryFit(...)` to paste
into planner/memory_fit.py (a new frozen object; nothing is assigned in place), each row's residual and its
leave-one-out residual; tests/unit/test_fit.py holds planner/memory_fit.py's FITTED to it.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import statistics
import sys
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from planner.architecture import ModelArchitecture  # noqa: E402
from planner.catalog import ACCELERATORS, GIB  # noqa: E402
from planner.engine import EngineSettings  # noqa: E402
from planner.layout import Layout  # noqa: E402
from planner.memory import (  # noqa: E402
    MOE_V2_LOGITS_COPIES,
    PeakFeatures,
    cudagraph_bytes,
    default_engine,
    fitted_peak_gib,
    forward_line_gib,
    peak_features,
    query_excess,
    runner_v2,
)
from planner.memory_fit import FITTED, MemoryFit  # noqa: E402
from planner.model_config import parse_hf_config  # noqa: E402
from planner.sizing import single_gpu_fit  # noqa: E402

RESULTS = ROOT / "docs" / "benchmarks" / "results.json"
PEAK = re.compile(r"torch peak memory increase: ([\d.]+)GiB")
NON_TORCH = re.compile(r"non-torch forward increase memory: ([\d.]+)GiB")
NON_KV = re.compile(r"Total non KV cache memory: ([\d.]+)GiB")
V1_GRAPHS = re.compile(r"^CUDA graph memory: ([\d.]+) GiB")


ACCELERATOR = "nvidia-h200-141gb"


@functools.cache
def calibration_engine(v2: bool, router_fake: bool = False) -> EngineSettings:
    """The engine the GPU rows ran: vLLM 0.25.1 on the H200; `v2`: with VLLM_USE_V2_MODEL_RUNNER=1
    (bench/calibrate.py --runner v2); `router_fake`: with 0.32.0's fake of the fused router kernel registered
    (--router-fake)."""
    return default_engine(ACCELERATORS[ACCELERATOR], "0.25.1", v2, router_fake)


ENGINE = calibration_engine(False)
DEPLOYED = default_engine(ACCELERATORS[ACCELERATOR])
"""The deployed image's engine (planner/engine.py DEFAULT_PROFILE), which keeps the V2 graphs out of the KV cache."""


@dataclass(frozen=True)
class Row:
    model: str
    arch: ModelArchitecture
    peak: float
    non_torch: float
    non_kv: float | None
    available: float | None
    graphs_estimate: float | None
    """What the V1 runner subtracted for CUDA graphs (its `CUDA graph memory` line); None on V2."""
    graphs_captured: float | None
    """`Graph capturing finished ... took N GiB` (V2 runs)."""
    v2: bool
    source: str
    accelerator: str = ACCELERATOR
    """The GPU it ran on (the batch's `accelerator`; the H200 where a batch names none)."""
    router_fake: bool = False
    """Run with 0.32.0's fake of the fused router kernel registered (bench/calibrate.py --router-fake)."""

    @property
    def features(self) -> PeakFeatures:
        return peak_features(self.arch, Layout(1, 1, 1), calibration_engine(self.v2, self.router_fake))

    @property
    def family(self) -> str:
        if self.arch.kv_lora_rank:
            return "mla"
        if self.arch.num_experts:
            return "moe-v2" if self.v2 else "moe-v1"
        return "dense"


def _profile(row: dict[str, Any]) -> str:
    profile = row.get("profile") or []
    return profile if isinstance(profile, str) else " ".join(profile)


def batches_in_fit(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The validation batches the constants are fitted on: every one but those with entries still pending or marked
    held_out (predictions still to run, or a check of these constants: neither may refit them)."""
    return [b for b in results["calibration_validation"]["batches"] if not (b.get("pending") or b.get("held_out"))]


def rows(results: dict[str, Any]) -> list[Row]:
    """Every started checkpoint of the calibration and of the finished validation batches (none with entries still
    pending, none held out), once per model (the 32k rows repeat the 8k profile), less the rows marked `excluded` (a
    harness artifact, not vLLM's behaviour on the checkpoint), and the ablation rows. A row run on Model Runner V2
    where 0.25.1 would pick V1 (bench/calibrate.py --runner v2) is its model's other row, named "<model> [V2]"."""
    raw = [(r, "families", ACCELERATOR, False) for r in results["calibration_families"]["rows"]]
    for batch in batches_in_fit(results):
        fake = bool((batch.get("settings") or {}).get("router_fake"))
        raw += [(r, batch["name"], batch.get("accelerator", ACCELERATOR), fake) for r in batch["measured"]]
    raw += [(r, "ablation", ACCELERATOR, False)
            for r in (results.get("calibration_ablations") or {}).get("rows", [])]
    seen: dict[str, Row] = {}
    for row, source, accelerator, router_fake in raw:
        text = _profile(row)
        if not row.get("kv_cache_tokens_measured") or not PEAK.search(text) or row.get("excluded"):
            continue
        arch = parse_hf_config(row["config"], row["model"], "results.json")
        lines = row.get("cudagraph_lines") or []
        estimate = next((float(m.group(1)) for line in lines if (m := V1_GRAPHS.match(line))), None)
        v2 = row.get("runner_v2", runner_v2(arch, ENGINE))  # as logged; the planner's rule for the earliest rows
        model = fit_name(row, arch)
        if model in seen:
            continue
        if estimate is None and not v2:
            estimate = row.get("cudagraph_gib")  # the first rows kept the V1 estimate under this key
        seen[model] = Row(
            model=model, arch=arch, peak=float(PEAK.search(text).group(1)),
            non_torch=float(NON_TORCH.search(text).group(1)), non_kv=float(NON_KV.search(text).group(1)),
            available=row.get("available_kv_gib_measured"), graphs_estimate=None if v2 else estimate,
            graphs_captured=row.get("graphs_gib_measured") if v2 else None, v2=v2, source=source,
            accelerator=accelerator, router_fake=router_fake)
    return list(seen.values())


def fit_name(row: dict[str, Any], arch: ModelArchitecture | None = None) -> str:
    """A measured row's name in the fit: its model, with FORCED_V2 where it ran on Model Runner V2 and vLLM 0.25.1
    would have picked V1."""
    arch = arch or parse_hf_config(row["config"], row["model"], "results.json")
    forced = row.get("runner_v2", False) and not runner_v2(arch, ENGINE)
    return row["model"] + (FORCED_V2 if forced else "")


FORCED_V2 = " [V2]"
"""The name suffix of a row run on Model Runner V2 where vLLM 0.25.1 picks V1 (VLLM_USE_V2_MODEL_RUNNER=1). Such
rows fit the V2 MoE term only: the graph line, the non-torch mean and the baselines keep the rows the held-out batches
checked them with."""


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


def fit(data: list[Row], margin_gib: float = FITTED.peak_margin_gib) -> MemoryFit:
    """The constants of planner/memory.py's parts model from these rows (planner/memory_fit.py MemoryFit), with the
    peak margin `margin_gib` (smallest_margin searches it against the KV rows)."""
    dense = [r for r in data if r.family == "dense"]
    sampling, forward = _two_phases(dense)
    mla = [r for r in data if r.family == "mla" and not r.v2]
    by_default = [r for r in data if not r.model.endswith(FORCED_V2)]
    on_v2 = [r for r in by_default if r.v2 and r.available is not None and r.non_kv is not None]
    graphs = [r for r in on_v2 if r.graphs_captured]
    graphs_base, graphs_per_khidden = _lstsq([[1.0, r.arch.hidden_size / 1000] for r in graphs],
                                             [float(r.graphs_captured or 0) for r in graphs])
    v1 = [r for r in data if not r.v2]
    estimates = [float(r.graphs_estimate or 0) for r in v1 if r.source != "ablation" and not r.arch.kv_lora_rank]
    dense_only = MemoryFit(
        peak_base_gib=sampling[0], peak_per_logits=sampling[1], peak_per_hidden=sampling[2],
        forward_base_gib=forward[0], forward_per_hidden=forward[1], forward_per_mlp=forward[2],
        v1_sampler_per_logits=0.0, v1_attention_per_query=0.0, v1_workspace_reuse=0.0, moe_v2_sampler_base_gib=0.0,
        v2_router_hold_per_query=0.0,
        non_torch_gib=sum(r.non_torch for r in by_default) / len(by_default),
        baseline_gib_by_gpu=tuple((gpu, _baseline([r for r in on_v2 if r.accelerator == gpu]))
                                  for gpu in sorted({r.accelerator for r in on_v2})),
        graphs_dense_base_gib=graphs_base, graphs_dense_per_khidden_gib=graphs_per_khidden,
        graphs_moe_v2_per_kquery_excess=0.0,
        graphs_moe_gib=statistics.median(estimates),
        graphs_mla_per_khidden_gib=max(float(r.graphs_estimate or 0) / (r.arch.hidden_size / 1000) for r in mla),
        peak_margin_gib=margin_gib)
    sampler, attention, reuse = _lstsq(
        [[r.features.logits, r.features.query, r.features.workspace] for r in v1],
        [r.peak - fitted_peak_gib(r.features, dense_only) for r in v1])
    moe_v2 = [r for r in data if r.v2 and r.arch.num_experts]
    sampler_base = statistics.median(
        r.peak - MOE_V2_LOGITS_COPIES * r.features.logits - r.features.workspace for r in moe_v2
        if not r.features.router_hold
        and MOE_V2_LOGITS_COPIES * r.features.logits > forward_line_gib(r.features, dense_only)
        and r.features.mla < r.peak - 0.5)
    without_hold = replace(dense_only, moe_v2_sampler_base_gib=sampler_base)
    held = [r for r in moe_v2 if r.features.router_hold]
    [hold] = _lstsq([[r.features.query] for r in held],
                    [r.peak - fitted_peak_gib(r.features, without_hold) for r in held])
    wide = [r for r in data if r.v2 and r.arch.num_experts and not r.arch.kv_lora_rank and r.graphs_captured]
    [graphs_excess] = _lstsq([[query_excess(r.arch, Layout(1, 1, 1)) / 1000] for r in wide],
                             [float(r.graphs_captured or 0) - cudagraph_bytes(r.arch, Layout(1, 1, 1), DEPLOYED,
                                                                              dense_only) / GIB for r in wide])
    return replace(dense_only, v1_sampler_per_logits=sampler, v1_attention_per_query=attention,
                   v1_workspace_reuse=reuse, moe_v2_sampler_base_gib=sampler_base, v2_router_hold_per_query=hold,
                   graphs_moe_v2_per_kquery_excess=graphs_excess)


def literal(fitted: MemoryFit) -> str:
    """`FITTED = MemoryFit(...)` as planner/memory_fit.py writes it (4 decimals, the margin's 2)."""
    lines = []
    for field in fields(fitted):
        value = getattr(fitted, field.name)
        if field.name == "baseline_gib_by_gpu":
            text = "(" + ", ".join(f'("{gpu}", {gib:.4f})' for gpu, gib in value) + ")"
        else:
            text = f"{value:.2f}" if field.name == "peak_margin_gib" else f"{value:.4f}"
        lines.append(f"    {field.name}={text},")
    return "FITTED = MemoryFit(\n" + "\n".join(lines) + "\n)"


def _two_phases(dense: list[Row]) -> tuple[list[float], list[float]]:
    """The dense peak as the larger of two lines, the sampling phase (1, logits, hidden) and the forward phase
    (1, hidden, mlp): each row is given to the phase that predicts it higher and each line refitted on its rows by
    least squares, until no row changes phase (both start as the fit over every row; at least four rows a phase)."""
    sampling_x = [[1.0, r.features.logits, r.features.hidden] for r in dense]
    forward_x = [[1.0, r.features.hidden, r.features.mlp] for r in dense]
    peaks = [r.peak for r in dense]
    sampling, forward = _lstsq(sampling_x, peaks), _lstsq(forward_x, peaks)
    phases: list[bool] = []
    for _ in range(100):
        new = [_dot(s, sampling) >= _dot(f, forward) for s, f in zip(sampling_x, forward_x, strict=True)]
        if new == phases or min(sum(new), len(new) - sum(new)) < 4:
            break
        phases = new
        sampling = _lstsq([x for x, p in zip(sampling_x, phases, strict=True) if p],
                          [y for y, p in zip(peaks, phases, strict=True) if p])
        forward = _lstsq([x for x, p in zip(forward_x, phases, strict=True) if not p],
                         [y for y, p in zip(peaks, phases, strict=True) if not p])
    return sampling, forward


def _dot(x: list[float], c: list[float]) -> float:
    return sum(a * b for a, b in zip(x, c, strict=True))


def _baseline(on_gpu: list[Row]) -> float:
    """What the GPU held before profiling: 0.9 x its memory less the logged non-KV total and available KV memory (V2
    rows: no graph estimate subtracted), the mean over the rows run on it."""
    total = ACCELERATORS[on_gpu[0].accelerator].memory_bytes * 0.9 / 2**30
    return sum(total - (r.non_kv or 0) - (r.available or 0) for r in on_gpu) / len(on_gpu)


def leave_one_out(data: list[Row]) -> dict[str, float]:
    """Each row's peak residual (measured - predicted, GiB) under a fit that did not see it."""
    out = {}
    for r in data:
        rest = [o for o in data if o is not r]
        if r.family == "moe-v2" and not any(o.family == r.family for o in rest):
            pass  # the V2 MoE row has no term of its own: its workspace is from vLLM's source
        out[r.model] = r.peak - fitted_peak_gib(r.features, fit(rest))
    return out


OVER_BOUND = 0.005
"""The KV bound's over side: the planner may promise at most 0.5% more tokens than vLLM allocated."""


def kv_rows(results: dict[str, Any]) -> list[tuple[dict[str, Any], str, bool]]:
    """(row, GPU, run with VLLM_USE_V2_MODEL_RUNNER=1) of every KV measurement the margin is set on: the calibration
    rows (8k and 32k) and the rows of the validation batches that joined the fit (finished, not held out)."""
    out = [(r, ACCELERATOR, False) for r in results["calibration_families"]["rows"]]
    for batch in batches_in_fit(results):
        forced = batch.get("settings", {}).get("runner") == "v2"
        out += [(r, batch.get("accelerator", ACCELERATOR), forced) for r in batch["measured"]]
    return [(r, gpu, forced) for r, gpu, forced in out if r.get("kv_cache_tokens_measured")]


def smallest_margin(results: dict[str, Any], fitted: MemoryFit = FITTED, step: float = 0.01) -> tuple[float, str]:
    """peak_margin_gib: the smallest multiple of `step` under which no row of kv_rows is more than OVER_BOUND over
    with the other constants of `fitted`, and the row that is over at one step less (the one that sets it)."""
    rows = [(parse_hf_config(r["config"], r["model"], "results.json"), gpu, r["max_model_len"],
             r["kv_cache_tokens_measured"], f"{r['model']}:{r['layers']}", forced)
            for r, gpu, forced in kv_rows(results)]
    setter = ""
    for i in range(round(2.0 / step) + 1):
        candidate = replace(fitted, peak_margin_gib=round(i * step, 6))
        error, name = max(((single_gpu_fit(a, gpu, 0.9, length, fitted=candidate, v2_everywhere=forced).kv_tokens
                            - measured) / measured, name) for a, gpu, length, measured, name, forced in rows)
        if error <= OVER_BOUND:
            return candidate.peak_margin_gib, setter
        setter = f"{name} at {error:+.2%} with {candidate.peak_margin_gib:.2f} GiB"
    raise ValueError(f"no margin up to 2 GiB keeps every row within +{OVER_BOUND:.1%}: {setter}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    results = json.loads(args.results.read_text())
    data = rows(results)
    unmargined = fit(data)
    margin, setter = smallest_margin(results, unmargined)
    constants = replace(unmargined, peak_margin_gib=margin)
    print("# planner/memory_fit.py")
    print(literal(constants))
    print(f"# peak_margin_gib: the smallest with no KV row over +{OVER_BOUND:.1%}; set by {setter}")
    loo = leave_one_out(data)
    print(f"\n{'model':40} {'family':7} {'source':13} {'peak':>6} {'fit':>6} {'resid':>6} {'loo':>6}")
    for r in data:
        left = f"{loo[r.model]:+.2f}" if r.model in loo else "-"
        predicted = fitted_peak_gib(r.features, constants)
        print(f"{r.model[:40]:40} {r.family:7} {r.source:13} {r.peak:6.2f} {predicted:6.2f} "
              f"{r.peak - predicted:+6.2f} {left:>6}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
