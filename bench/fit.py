"""The fit of the planner's memory outside the KV cache (planner/memory.py) from the GPU rows in
docs/benchmarks/results.json, written down so it can be re-run and checked.

Each constant is fitted on the rows named here, from vLLM's own profiling lines (`torch peak memory increase`,
`non-torch forward increase memory`, `CUDA graph memory`, `Graph capturing finished ... took`), on the features
planner/memory.py computes (peak_features) and through the same formula (fitted_peak_gib):

- the forward phase's constant beside the MLP's activations and three hidden states (FORWARD_BASE_GIB): the median
  over the dense rows (all served by Model Runner V2 on 0.25.1) whose peak neither the sampler line nor the first
  compile's line (planner/memory.py compile_line_gib, not fitted) reaches; the sampler's constant beside the logits
  and the workspace (SAMPLER_BASE_GIB): the median over the Model Runner V2 rows, dense and MoE, without 0.25.1's router
  compile hold, whose peak the sampler sets (above the forward line, the compile line and the latent-attention
  floor); the two fitted together until neither moves;
- 0.25.1's router compile hold (ROUTER_HOLD_PER_QUERY): through the origin over the Model Runner V2 rows with it
  (those 0.25.1 runs there by default, and those bench/calibrate.py --runner v2 started there); the plan keeps it on
  the V1 runner too;
- the V1 runner's attention blocks (V1_ATTENTION_PER_QUERY): the median, per GiB of query, of what the peak leaves
  above the forward line and the workspace over the V1 rows without the hold whose forward sets the peak (above the
  V1 sampler line, planner/memory.py v1_sampler_line_gib, which is vLLM's source and the shared sampler constant);
- non-torch memory, the baseline before profiling (one per GPU it was measured on: the rows run on that GPU), the
  dense CUDA-graph line and the V1 graph estimates (MoE and hybrid: beyond the first FULL capture's split
  accumulators, planner/memory.py split_buffer_bytes, a Theil-Sen line in the graph's pieces, graph_pieces; MLA: per
  1,000 of hidden size, the largest ratio);
- the V2 CUDA graphs of MoE models beyond that line (GRAPHS_MOE_V2_PER_KQUERY_EXCESS): through the origin over the
  non-MLA MoE rows V2 captured, per 1,000 of query width beyond the hidden size, the line taken from the planner's
  own capture_bytes for the deployed engine.

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
import math
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
    MARGIN_FIELDS,
    SAMPLER_LOGITS_COPIES,
    PeakFeatures,
    capture_bytes,
    compile_line_gib,
    default_engine,
    fitted_peak_gib,
    forward_line_gib,
    graph_pieces,
    margin_kind,
    peak_features,
    query_excess,
    runner_v2,
    sampler_line_gib,
    split_buffer_bytes,
    v1_sampler_line_gib,
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
def calibration_engine(v2: bool, router_fake: bool = False, extra_args: tuple[str, ...] = ()) -> EngineSettings:
    """The engine the GPU rows ran: vLLM 0.25.1 on the H200; `v2`: with VLLM_USE_V2_MODEL_RUNNER=1
    (bench/calibrate.py --runner v2); `router_fake`: with 0.32.0's fake of the fused router kernel registered
    (--router-fake); `extra_args`: the flags of bench/calibrate.py --extra."""
    return default_engine(ACCELERATORS[ACCELERATOR], "0.25.1", "v2" if v2 else "default", router_fake, extra_args)


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


def _theil_sen(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(intercept, slope) of the line through (x, y) points by Theil-Sen: the median of the slopes between every two
    points of different x, and the median of y - slope x; one point far off the others moves neither."""
    slopes = [(y2 - y1) / (x2 - x1) for i, (x1, y1) in enumerate(points) for x2, y2 in points[i + 1:] if x2 != x1]
    slope = statistics.median(slopes)
    return statistics.median([y - slope * x for x, y in points]), slope


def fit(data: list[Row], margin_gib: float = FITTED.peak_margin_gib,
        moe_margin_gib: float = FITTED.moe_peak_margin_gib, v1_margin_gib: float = FITTED.v1_peak_margin_gib,
        v1_hold_margin_gib: float = FITTED.v1_hold_peak_margin_gib) -> MemoryFit:
    """The constants of planner/memory.py's parts model from these rows (planner/memory_fit.py MemoryFit), with the
    runners' peak margins (smallest_margin searches them against the KV rows)."""
    dense = [r for r in data if r.family == "dense"]
    on_sampler = [r for r in data if r.v2 and not r.features.router_hold]
    forward, sampler_base = _phases(dense, on_sampler)
    mla = [r for r in data if r.family == "mla" and not r.v2]
    by_default = [r for r in data if not r.model.endswith(FORCED_V2)]
    on_v2 = [r for r in by_default if r.v2 and r.available is not None and r.non_kv is not None]
    graphs = [r for r in on_v2 if r.graphs_captured]
    graphs_base, graphs_per_khidden = _lstsq([[1.0, r.arch.hidden_size / 1000] for r in graphs],
                                             [float(r.graphs_captured or 0) for r in graphs])
    plain = [r for r in graphs if not r.arch.num_experts and not r.arch.kv_lora_rank]
    plain_base, plain_per_khidden, plain_per_100_pieces = _lstsq(
        [[1.0, r.arch.hidden_size / 1000, graph_pieces(r.arch, Layout(1, 1, 1)) / 100] for r in plain],
        [float(r.graphs_captured or 0) for r in plain])
    v1 = [r for r in data if not r.v2]
    growths = [(float(graph_pieces(r.arch, Layout(1, 1, 1))),
                float(r.graphs_estimate or 0) - split_buffer_bytes(r.arch, Layout(1, 1, 1), ENGINE) / GIB)
               for r in v1 if r.source != "ablation" and not r.arch.kv_lora_rank]
    growth_base, growth_per_piece = _theil_sen(growths)
    without_terms = MemoryFit(
        sampler_base_gib=sampler_base, forward_base_gib=forward, v1_attention_per_query=0.0,
        router_hold_per_query=0.0,
        non_torch_gib=sum(r.non_torch for r in by_default) / len(by_default),
        baseline_gib_by_gpu=tuple((gpu, _baseline([r for r in on_v2 if r.accelerator == gpu]))
                                  for gpu in sorted({r.accelerator for r in on_v2})),
        graphs_dense_base_gib=graphs_base, graphs_dense_per_khidden_gib=graphs_per_khidden,
        graphs_plain_base_gib=plain_base, graphs_plain_per_khidden_gib=plain_per_khidden,
        graphs_plain_per_100_pieces_gib=plain_per_100_pieces, graphs_moe_v2_per_kquery_excess=0.0,
        graphs_v1_growth_base_gib=growth_base, graphs_v1_growth_per_100_pieces_gib=100 * growth_per_piece,
        graphs_mla_per_khidden_gib=max(float(r.graphs_estimate or 0) / (r.arch.hidden_size / 1000) for r in mla),
        peak_margin_gib=margin_gib, moe_peak_margin_gib=moe_margin_gib,
        v1_peak_margin_gib=v1_margin_gib, v1_hold_peak_margin_gib=v1_hold_margin_gib)
    held = [r for r in data if r.v2 and r.features.router_hold]
    [hold] = _lstsq([[r.features.query] for r in held],
                    [r.peak - fitted_peak_gib(r.features, without_terms) for r in held])
    with_hold = replace(without_terms, router_hold_per_query=hold)
    attention = _v1_attention(v1, with_hold)
    wide = [r for r in data if r.v2 and r.arch.num_experts and not r.arch.kv_lora_rank and r.graphs_captured]
    [graphs_excess] = _lstsq([[query_excess(r.arch, Layout(1, 1, 1)) / 1000] for r in wide],
                             [float(r.graphs_captured or 0) - capture_bytes(r.arch, Layout(1, 1, 1), DEPLOYED,
                                                                              without_terms) / GIB for r in wide])
    return replace(with_hold, v1_attention_per_query=attention,
                   graphs_moe_v2_per_kquery_excess=graphs_excess)


def literal(fitted: MemoryFit) -> str:
    """`FITTED = MemoryFit(...)` as planner/memory_fit.py writes it (4 decimals, the margin's 2)."""
    lines = []
    for field in fields(fitted):
        value = getattr(fitted, field.name)
        if field.name == "baseline_gib_by_gpu":
            text = "(" + ", ".join(f'("{gpu}", {gib:.4f})' for gpu, gib in value) + ")"
        else:
            text = f"{value:.2f}" if field.name in MARGIN_FIELDS.values() else f"{value:.4f}"
        lines.append(f"    {field.name}={text},")
    return "FITTED = MemoryFit(\n" + "\n".join(lines) + "\n)"


FORWARD_GAP_GIB = 0.03
"""A dense row is the forward line's where its peak is more than this above the sampler and compile lines (the
sampler's constant, about 0.07 GiB, is within it twice over)."""


def _phases(dense: list[Row], on_sampler: list[Row]) -> tuple[float, float]:
    """The forward line's constant and the sampler's, fitted together until neither moves: the forward's, the median of
    peak - MLP activations - hidden states over the dense rows whose peak neither the sampler line nor the compile line
    (not fitted) reaches within FORWARD_GAP_GIB; the sampler's, the median of peak - logits copies - workspace over the
    V2 rows without a router hold whose peak the sampler sets (its line, on the workspace, above the forward line's,
    the compile line and the latent-attention floor). Both start at 0."""
    forward = base = 0.0
    for _ in range(100):
        c = replace(FITTED, forward_base_gib=forward, sampler_base_gib=base)
        on_forward = [r for r in dense
                      if r.peak > max(sampler_line_gib(r.features, c), compile_line_gib(r.features)) + FORWARD_GAP_GIB]
        new_forward = statistics.median(r.peak - forward_line_gib(r.features, replace(c, forward_base_gib=0.0))
                                        for r in on_forward)
        c = replace(c, forward_base_gib=new_forward)
        sets = [r for r in on_sampler
                if sampler_line_gib(r.features, c) > forward_line_gib(r.features, c)
                and sampler_line_gib(r.features, c) + r.features.workspace
                > max(compile_line_gib(r.features), r.features.mla)]
        new_base = statistics.median(r.peak - SAMPLER_LOGITS_COPIES * r.features.logits - r.features.workspace
                                     for r in sets)
        if (new_forward, new_base) == (forward, base):
            break
        forward, base = new_forward, new_base
    return forward, base


def _v1_attention(v1: list[Row], c: MemoryFit) -> float:
    """The V1 runner's attention blocks per GiB of query: the median, over the V1 rows without the router compile hold
    (how much that holds depends on when Python's collector runs, so those rows set nothing else) whose peak is more
    than FORWARD_GAP_GIB above the V1 sampler line on the workspace and above the compile line, of what the peak
    leaves above the forward line and the workspace, per GiB of query."""
    on_forward = [r for r in v1 if not r.features.router_hold
                  and r.peak - r.features.workspace > FORWARD_GAP_GIB + max(
                      v1_sampler_line_gib(r.features, c), compile_line_gib(r.features) - r.features.workspace)]
    return statistics.median((r.peak - r.features.workspace - forward_line_gib(r.features, c)) / r.features.query
                             for r in on_forward)


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


def peak_floor(data: list[Row], fitted: MemoryFit, step: float = 0.01, kind: str = "v2") -> tuple[float, str]:
    """The largest peak the parts model leaves under among the rows of one margin kind (margin_kind: Model Runner
    V2, the V1 runner, the V1 runner with the router hold), rounded up to `step`, and that row: the margin covers it
    whatever the pool (a row's KV error scales with 1 / its pool, so a large-pool row under by 0.2 GiB passes the KV
    bound while the same miss on a small pool would not)."""
    under, name = max((r.peak - fitted_peak_gib(r.features, fitted), r.model) for r in data
                      if margin_kind(r.features) == kind)
    return max(0.0, math.ceil(round(under / step, 6)) * step), f"{name} {under:+.2f} GiB"


def smallest_margin(results: dict[str, Any], fitted: MemoryFit = FITTED, step: float = 0.01,
                    kind: str = "v2", floor: float = 0.0) -> tuple[float, str]:
    """The margin of one kind (MARGIN_FIELDS): the smallest multiple of `step`, from `floor` (peak_floor) on, under
    which no row of kv_rows of that kind is more than OVER_BOUND over with the other constants of `fitted`, and the
    row that is over at one step less (the one that sets it; none where the floor sets it)."""
    rows = []
    for r, gpu, forced in kv_rows(results):
        arch = parse_hf_config(r["config"], r["model"], "results.json")
        if margin_kind(peak_features(arch, Layout(1, 1, 1), calibration_engine(forced))) == kind:
            rows.append((arch, gpu, r["max_model_len"], r["kv_cache_tokens_measured"], f"{r['model']}:{r['layers']}",
                         forced))
    setter = ""
    for i in range(round(floor / step), round(2.0 / step) + 1):
        candidate = replace(fitted, **{MARGIN_FIELDS[kind]: round(i * step, 6)})
        error, name = max(((single_gpu_fit(a, gpu, 0.9, length, fitted=candidate,
                                            runner="v2" if forced else "default").kv_tokens
                            - measured) / measured, name) for a, gpu, length, measured, name, forced in rows)
        if error <= OVER_BOUND:
            return getattr(candidate, MARGIN_FIELDS[kind]), setter
        setter = f"{name} at {error:+.2%} with {getattr(candidate, MARGIN_FIELDS[kind]):.2f} GiB"
    raise ValueError(f"no {MARGIN_FIELDS[kind]} up to 2 GiB keeps every row within +{OVER_BOUND:.1%}: {setter}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    results = json.loads(args.results.read_text())
    data = rows(results)
    unmargined = fit(data)
    floors = {kind: peak_floor(data, unmargined, kind=kind) for kind in MARGIN_FIELDS}
    margins = {kind: smallest_margin(results, unmargined, kind=kind, floor=floors[kind][0]) for kind in MARGIN_FIELDS}
    constants = replace(unmargined, **{MARGIN_FIELDS[kind]: margin for kind, (margin, _) in margins.items()})
    print("# planner/memory_fit.py")
    print(literal(constants))
    for kind, field in MARGIN_FIELDS.items():
        setter = margins[kind][1]
        print(f"# {field}: at least the largest {kind} peak under the model ({floors[kind][1]}); no KV row of "
              f"{kind} over +{OVER_BOUND:.1%} above it{'; set by ' + setter if setter else ''}")
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
