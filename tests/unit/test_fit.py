"""The planner's memory outside the KV cache is the fit bench/fit.py makes from the GPU rows in results.json: the
constants in planner/memory_fit.py are that fit, each part is fitted on the rows it names, and the runner rule and the
MoE workspace follow vLLM's source."""

import json
import re
import subprocess
import sys
import warnings
from dataclasses import FrozenInstanceError, fields, replace
from pathlib import Path

import pytest

from bench.fit import (
    DEPLOYED,
    PEAK,
    _lstsq,
    calibration_engine,
    fit,
    fit_name,
    leave_one_out,
    literal,
    peak_floor,
    rows,
    smallest_margin,
)
from planner.catalog import ACCELERATORS, GIB
from planner.errors import ConfigError
from planner.layers import cut_layers
from planner.layout import Layout
from planner.memory import (
    MARGIN_FIELDS,
    V1_SAMPLER_LOGITS_COPIES,
    cudagraph_bytes,
    default_engine,
    fitted_peak_gib,
    graph_counts,
    graph_pieces,
    graph_scale,
    moe_parallel_bytes,
    moe_workspace_bytes,
    parts_model_applies,
    peak_features,
    runner_v2,
    split_buffer_bytes,
)
from planner.memory_fit import FITTED, MemoryFit
from planner.model_config import parse_hf_config
from planner.sizing import single_gpu_fit
from tests.helpers import arch, batch_extra

ROOT = Path(__file__).resolve().parents[2]
RESULTS = json.loads((ROOT / "docs" / "benchmarks" / "results.json").read_text())
DATA = rows(RESULTS)
H200 = ACCELERATORS["nvidia-h200-141gb"]


FIT = fit(DATA)


@pytest.mark.parametrize("name", [f.name for f in fields(MemoryFit) if f.name != "peak_margin_gib"])
def test_memory_constants_are_the_fit_of_the_measured_rows(name):
    ours, refit = getattr(FITTED, name), getattr(FIT, name)
    if name == "baseline_gib_by_gpu":
        assert [gpu for gpu, _ in ours] == [gpu for gpu, _ in refit], "re-run python bench/fit.py: a GPU was added"
        ours, refit = [gib for _, gib in ours], [gib for _, gib in refit]
    assert ours == pytest.approx(refit, abs=6e-4), f"re-run python bench/fit.py: {name}"


def test_the_fit_is_printed_as_the_object_the_planner_holds():
    """bench/fit.py writes what planner/memory_fit.py holds: its literal evaluates to a MemoryFit equal to the fit at
    four decimals, and the planner's object is frozen (nothing assigns to it in place)."""
    printed = literal(FIT)
    assert printed.startswith("FITTED = MemoryFit(")
    namespace: dict = {"MemoryFit": MemoryFit}
    exec(printed, namespace)
    printed_fit = namespace["FITTED"]
    for field in fields(MemoryFit):
        if field.name != "baseline_gib_by_gpu":
            assert getattr(printed_fit, field.name) == pytest.approx(getattr(FIT, field.name), abs=0.006), field.name
    assert dict(printed_fit.baseline_gib_by_gpu) == pytest.approx(dict(FIT.baseline_gib_by_gpu), abs=1e-4)
    with pytest.raises(FrozenInstanceError):
        FITTED.peak_margin_gib = 0.0  # type: ignore[misc]


def test_each_part_is_fitted_on_its_own_rows():
    families = {r.family for r in DATA}
    assert {"dense", "moe-v1", "mla", "moe-v2"} <= families
    assert sum(r.family == "dense" for r in DATA) >= 12 and sum(not r.v2 for r in DATA) >= 8
    assert len({r.model for r in DATA}) == len(DATA), "one row per checkpoint"
    assert not any(r.source == "ablation" and r.v2 for r in DATA)


OVER_FITTED = {
    # model: why its profiled peak is further than 0.6 GiB from the fit (both below it: the planner reserves more)
    "GLM-4.5": "the plan keeps the router compile hold (1.38 GiB) under its V1 sampler; in run t6 the collector "
               "freed the hold (1.54 GiB) before the sampler's softmax, so its peak was the float32 logits on the hold "
               "(3.86) where GLM-4.5-Air's held through the sampler (4.64)",
}


def test_the_fit_explains_every_peak_and_holds_out_of_sample():
    constants = fit(DATA)
    for r in DATA:
        residual = r.peak - fitted_peak_gib(r.features, constants)
        assert abs(residual) < 0.6 or (r.model in OVER_FITTED and -1.0 < residual < 0), (r.model, residual)
    loo = leave_one_out(DATA)
    assert len(loo) == len(DATA)
    assert max(abs(v) for m, v in loo.items() if m not in OVER_FITTED and m not in LEVERAGE) < 0.7
    for model, (bound, _why) in LEVERAGE.items():
        assert abs(loo[model]) < bound, model


LEVERAGE = {
    "GLM-4.5-Air [V2]": (1.6, "the one row in the fit whose profile kept vLLM 0.25.1's router compile hold "
                              "(Moonlight [V2], the other with that router, kept none): without it the hold term is "
                              "fitted on Moonlight alone"),
    # model: its leave-one-out bound (GiB), and why it is wider than the others' 0.7
    "DeepSeek-V3": (1.1, "one of the few V1 rows whose forward sets the peak, the only one with 128 query heads"),
}


def test_the_v1_attention_term_is_what_the_head_ablation_measured():
    """GLM-4.5-Air cut to 8 layers, 96 heads against 64: the fitted term moves the peak by the measured step's
    order (0.32 GiB), and the planner's peak grows with the query width only where the V1 runner profiles."""
    by_model = {r.model: r for r in DATA}
    wide, narrow = by_model["GLM-4.5-Air"], by_model["GLM-4.5-Air-heads64"]
    step = wide.peak - narrow.peak
    fitted = fitted_peak_gib(wide.features, fit(DATA)) - fitted_peak_gib(narrow.features, fit(DATA))
    assert 0.25 < step < 0.4 and 0.5 * step < fitted < 2.5 * step
    dense = arch("Qwen3-8B")
    v2 = peak_features(dense, Layout(1, 1, 1), default_engine(H200, "0.25.1"))
    assert not v2.v1 and fitted_peak_gib(v2, fit(DATA)) == fitted_peak_gib(
        peak_features(parse_hf_config({**json.loads((ROOT / "models" / "Qwen3-8B.json").read_text()),
                                        "num_attention_heads": 64}, "wide", "x"), Layout(1, 1, 1),
                      default_engine(H200, "0.25.1")), fit(DATA))


def test_least_squares_recovers_known_coefficients():
    xs = [[1.0, float(i), float(i * i % 7)] for i in range(9)]
    ys = [0.5 - 2.0 * x[1] + 3.0 * x[2] for x in xs]
    assert _lstsq(xs, ys) == pytest.approx([0.5, -2.0, 3.0])


def test_vllm_0_25_runs_moe_on_v1_except_its_v2_list_and_0_32_runs_all_on_v2():
    old, new = default_engine(H200, "0.25.1"), default_engine(H200, "0.32.0")
    assert runner_v2(arch("Qwen3-8B"), old) and not runner_v2(arch("Mixtral-8x7B-Instruct-v0.1"), old)
    assert runner_v2(arch("Qwen1.5-MoE-A2.7B-Chat"), old)  # Qwen2MoeForCausalLM: DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES
    assert not runner_v2(arch("Qwen3-Next-80B-A3B-Instruct"), old)  # hybrid
    assert all(runner_v2(arch(n), new) for n in ("Mixtral-8x7B-Instruct-v0.1", "Qwen3-Next-80B-A3B-Instruct"))


def test_moe_workspace_is_tritons_two_buffers_and_mxfp4_keeps_none():
    mixtral = arch("Mixtral-8x7B-Instruct-v0.1")  # M = 8192 tokens, top-2, I = 14336, K = 4096
    engine = default_engine(H200, "0.25.1")
    expected = (8192 * 2 * max(14336, 4096) + 8192 * 2 * max(2 * 14336, 4096)) * 2
    assert moe_workspace_bytes(mixtral, Layout(1, 1, 1), engine) == expected
    assert moe_workspace_bytes(mixtral, Layout(2, 1, 1), engine) == (8192 * 2 * 7168 + 8192 * 2 * 14336) * 2
    assert moe_workspace_bytes(arch("gpt-oss-20b"), Layout(1, 1, 1), engine) == 0
    assert moe_workspace_bytes(arch("Qwen3-8B"), Layout(1, 1, 1), engine) == 0
    assert expected / GIB == pytest.approx(1.3125)


def test_an_moe_checkpoint_cut_to_its_dense_layers_keeps_no_expert_memory():
    """DeepSeek-V3 cut to its first three layers (first_k_dense_replace 3): vLLM builds DeepseekV2MLP below that index
    and DeepseekV2MoE from it (model_executor/models/deepseek_v2.py; its class only warns when none is built), so no
    FusedMoE layer runs, the workspace (allocated at its first request, v1/worker/workspace.py
    _ensure_workspace_size) is never taken and no router compiles. The plan had kept the workspace and the router
    hold for it (the issue's "160-expert MoE cut to 3 layers": 1.5 GiB over-reserved); one layer more brings both
    back. (GLM-4.5's class refuses such a cut: tests/engine/test_vllm_refusals.py.)"""
    engine = default_engine(H200, "0.25.1")
    v3 = json.loads((ROOT / "models" / "DeepSeek-V3.json").read_text())
    dense, first_moe = (parse_hf_config(cut_layers(v3, n), "v3", "x") for n in (3, 4))
    assert dense.num_experts == 256 and dense.moe_layers == 0 and first_moe.moe_layers == 1
    one, two = Layout(1, 1, 1), Layout(2, 1, 1)
    assert moe_workspace_bytes(dense, one, engine) == 0 and moe_parallel_bytes(dense, two) == 0
    assert not peak_features(dense, one, engine).router_hold
    assert moe_workspace_bytes(first_moe, one, engine) > 0 and moe_parallel_bytes(first_moe, two) > 0
    assert peak_features(first_moe, one, engine).router_hold


def test_a_batch_with_entries_still_to_run_stays_out_of_the_fit():
    """Its predictions validate the planner that made them, so its first rows must not refit that planner."""
    results = json.loads((ROOT / "docs" / "benchmarks" / "results.json").read_text())
    finished = rows(results)
    batch = json.loads(json.dumps(next(b for b in results["calibration_validation"]["batches"]
                                       if b["name"] == "validation 5")))
    batch.update(name="validation x", pending=["models/a.json"])
    for r in batch["measured"]:
        r["model"] += "-again"
    results["calibration_validation"]["batches"].append(batch)
    assert [r.model for r in rows(results)] == [r.model for r in finished]
    batch["pending"] = []
    assert len(rows(results)) == len(finished) + len(batch["measured"])


PENDING = sorted((ROOT / "docs" / "benchmarks").glob("validation*-predictions*.json"))
HELD_OUT = [b for b in RESULTS["calibration_validation"]["batches"] if b.get("held_out")]
def _counted(batch: dict) -> list[dict]:
    """The predictions of a held-out batch whose runs count: a row excluded (a rule corrected from it after the run)
    checks no planner and is kept for the record only."""
    excluded = {r["model"] for r in batch["measured"] if r.get("excluded")}
    return [p for p in batch["predictions"]
            if p["entry"].split(":")[0].rsplit("/", 1)[-1].removesuffix(".json") not in excluded]


UNCHECKED_BY_A_RUN = "graphs_gib_predicted_0_32"
"""What vLLM 0.32.0 would keep out of the KV cache for CUDA graphs: recorded with each prediction, but no run checks
it there (0.32.0 cannot start on the GPU hosts, and 0.25.1's V2 keeps nothing out for graphs), so a ran batch stays a
check of today's planner when only this moves; test_moe_graphs_on_v2_... checks it against the captured graphs."""


def _checked(row: dict) -> dict:
    return {k: v for k, v in row.items() if k != UNCHECKED_BY_A_RUN}


def _did_not_start(batch: dict) -> set[tuple[str, str]]:
    """(config file stem, layers) of a batch's rows vLLM did not start."""
    return {(r["model"], str(r["layers"])) for r in batch["measured"] if not r.get("kv_cache_tokens_measured")}


def _entry_key(entry: str) -> tuple[str, str]:
    path, _, layers = entry.partition(":")
    return path.rsplit("/", 1)[-1].removesuffix(".json"), layers if layers.isdigit() else "all"


COMMITTED = [(p.name, json.loads(p.read_text()), False, set()) for p in PENDING] + [
    (b["name"], {"settings": b["settings"], "rows": _counted(b)}, True, _did_not_start(b)) for b in HELD_OUT
    if not b.get("withdrawn_planner")]
"""A held-out batch marked withdrawn_planner checked a planner that was withdrawn after its run (validation 21); its
predictions are kept as made, and its rows check today's planner, fixed before it ran, in
tests/engine/test_families.py."""


def _predict_in_a_fresh_interpreter(entry: str, args: tuple) -> dict:
    """bench/calibrate.py predict_row for one entry in a new Python process; a ConfigError there is raised here."""
    code = ("import json, sys; from bench.calibrate import predict_row; from planner.errors import ConfigError\n"
            "entry, args = json.loads(sys.argv[1])\n"
            "try: print(json.dumps(predict_row(entry, *args[:-1], tuple(args[-1]))))\n"
            "except ConfigError as e: print(json.dumps({'ConfigError': str(e)}))")
    proc = subprocess.run([sys.executable, "-c", code, json.dumps([entry, list(args)])], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=True)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if "ConfigError" in out:
        raise ConfigError(out["ConfigError"])
    return out


@pytest.mark.parametrize("committed, ran, refused", [(c, ran, x) for _, c, ran, x in COMMITTED],
                         ids=[n for n, *_ in COMMITTED])
def test_committed_predictions_are_what_todays_planner_predicts(committed, ran, refused):
    """A batch predicted and committed before its run validates the planner only while that planner still predicts
    the same numbers: a change that moves them must re-predict (bench/calibrate.py --predict-only) and commit again
    before the run, and once it has run as a held-out batch, a change that moves them makes it no longer a check of
    today's planner (take it into the fit and hold out a new batch). Today's planner may refuse, or promise no
    tokens to, only a checkpoint vLLM did not start (validation 30: GLM-4.5 cut to its dense layers, which vLLM's
    class refuses; validation 34: Mamba-Codestral-7B on an H100, whose graph-estimate cache did not fit).

    In one full `make test` process (a125343) DeepSeek-V3.2:4 of validation 35 once predicted differently than alone,
    cause not found (not reproduced after each test directory in turn, 2026-11-28). A prediction that differs here is
    therefore made again in a fresh interpreter: the planner is held to that one, and a difference between the two is
    a warning naming the entry, so a leak of state between tests shows in the log without failing the check."""
    from bench.calibrate import predict_row

    s = committed["settings"]
    args = (s["accelerator"], s["gpu_memory_utilization"], s["max_model_len"], s["dtype"], s["kv_cache_dtype"],
            s.get("runner", "default"), s.get("router_fake", False), list(s.get("extra", ())))
    for row in committed["rows"]:
        try:
            today = predict_row(row["entry"], *args[:-1], tuple(args[-1]))
            if (_checked(today) != _checked(row)) if ran else today != row:
                fresh = _predict_in_a_fresh_interpreter(row["entry"], args)
                if fresh != today:
                    warnings.warn(f"{row['entry']}: predicted {today} in this process, {fresh} in a fresh one: "
                                  "state leaked from an earlier test", stacklevel=1)
                today = fresh
        except ConfigError:
            assert _entry_key(row["entry"]) in refused, f"{row['entry']}: refused, but vLLM started it"
            continue
        if today["kv_cache_tokens_predicted"] == 0 and row["kv_cache_tokens_predicted"]:
            assert _entry_key(row["entry"]) in refused, f"{row['entry']}: no tokens today, but vLLM started it"
            continue
        assert (_checked(today) == _checked(row)) if ran else today == row, (row["entry"], today, row)


def test_a_held_out_batch_stays_out_of_the_fit():
    """No fit row comes from a held-out batch. A held-out row may be another cut of a model the fit has (validation 23:
    GLM-4.5-Air:10 beside validation 18's :8); the fit keeps its own row of that model."""
    assert HELD_OUT, "the constants in planner/memory_fit.py are checked by a batch they were not fitted on"
    started = [(b, r) for b in HELD_OUT for r in b["measured"]
               if r.get("config") and r.get("kv_cache_tokens_measured") and not r.get("excluded")]
    assert started and not {r.source for r in DATA} & {b["name"] for b in HELD_OUT}
    fitted = {(r.model, r.source) for r in DATA}
    for b, r in started:
        assert (fit_name(r), b["name"]) not in fitted


def test_some_predictions_are_waiting_while_a_batch_has_entries_pending():
    if any(b.get("pending") for b in RESULTS["calibration_validation"]["batches"]):
        assert PENDING


def test_the_peak_margin_is_the_smallest_that_keeps_every_fit_row_within_the_over_bound():
    """peak_margin_gib is not chosen by hand: bench/fit.py searches it in 0.01 GiB steps over the calibration rows and
    the batches in the fit (not the held-out ones, which check it)."""
    for kind, field in MARGIN_FIELDS.items():
        floor, under = peak_floor(DATA, FITTED, kind=kind)
        assert floor > 0 and under
        assert smallest_margin(RESULTS, kind=kind, floor=floor)[0] == pytest.approx(getattr(FITTED, field)), kind
    assert smallest_margin(RESULTS, floor=0.0)[0] < FITTED.peak_margin_gib, "the floor sets the V2 margin today"
    assert FITTED.v1_peak_margin_gib < FITTED.v1_hold_peak_margin_gib, "the hold's timing needs the larger margin"
    assert FITTED.peak_margin_gib < FITTED.moe_peak_margin_gib, "the MoE workspace's V2 rows need the larger margin"
    # the search hands the planner a copy per candidate (fitted=), which takes FITTED when given none
    arch = parse_hf_config(RESULTS["calibration_families"]["rows"][0]["config"], "row", "results.json")
    tokens = [single_gpu_fit(arch, "nvidia-h200-141gb", 0.9, 8192, **extra).kv_tokens
              for extra in ({}, {"fitted": FITTED},
                            {"fitted": replace(FITTED, peak_margin_gib=FITTED.peak_margin_gib + 1,
                                               moe_peak_margin_gib=FITTED.moe_peak_margin_gib + 1,
                                               v1_peak_margin_gib=FITTED.v1_peak_margin_gib + 1,
                                               v1_hold_peak_margin_gib=FITTED.v1_hold_peak_margin_gib + 1)})]
    assert tokens[0] == tokens[1] > tokens[2]


def test_only_0_25s_router_compile_holds_and_only_for_the_biased_grouped_router():
    """GLM-4.5-Air cut to 8 layers on Model Runner V2 (validation 18) profiled 3.40 GiB where the sampler's logits on
    the workspace make about 1.9: vLLM 0.25.1's first grouped_topk compile kept the rest (docs/benchmarks.md "Peak
    traces", run h). Qwen3's router (softmax, no bias) takes no such path and its rows fit without the term; vLLM
    0.32.0 plans none for any model."""
    by_model = {r.model: r for r in DATA}
    glm, qwen = by_model["GLM-4.5-Air [V2]"], by_model["Qwen3-30B-A3B [V2]"]
    assert glm.features.router_hold and not qwen.features.router_hold
    without = replace(FITTED, router_hold_per_query=0.0)
    assert glm.peak - fitted_peak_gib(glm.features, without) > 1.0
    assert abs(glm.peak - fitted_peak_gib(glm.features, FITTED)) < 0.1
    assert abs(qwen.peak - fitted_peak_gib(qwen.features, FITTED)) < 0.1
    deployed = peak_features(glm.arch, Layout(1, 1, 1), DEPLOYED)
    assert not deployed.router_hold
    assert fitted_peak_gib(deployed, FITTED) == fitted_peak_gib(deployed, without)


def _graphs_planned(row: dict, fitted: MemoryFit) -> float:
    """What vLLM 0.32.0's plan takes the CUDA-graph capture of this row's model at TP=1 to take, GiB (capture_bytes:
    without what 0.32.0's estimate adds beyond the capture, full_graph_extrapolation_bytes, which a capture's `took`
    does not show)."""
    from planner.memory import capture_bytes

    a = parse_hf_config(row["config"], row["model"], "x")
    return capture_bytes(a, Layout(1, 1, 1), default_engine(H200), fitted) / GIB


V2_MOE_GRAPHS_HELD_OUT = [r for b in HELD_OUT for r in b["measured"]
                          if r.get("runner_v2") and r.get("graphs_gib_measured") and not r.get("excluded")
                          and (a := parse_hf_config(r["config"], r["model"], "x")).num_experts and not a.kv_lora_rank]
GRAPHS_OVER = {"dbrx-instruct": 0.7}
"""Held-out rows the plan keeps more graph memory for than V2 captured (the safe side), and by how much at most: DBRX
(validation 17, served as a dense model on V2) captured 0.54 GiB where the line gives 1.22 at its 6,144 hidden size."""


@pytest.mark.parametrize("row", V2_MOE_GRAPHS_HELD_OUT, ids=lambda r: r["model"])
def test_moe_graphs_on_v2_are_planned_within_0_3_gib_of_the_held_out_captures(row):
    """The CUDA graphs Model Runner V2 captured for each non-MLA MoE model of the held-out batches (validation 19-21:
    their captures not in the fit), against what the 0.32.0 plan keeps out of the KV cache for them: none more than
    0.25 GiB short, none more than 0.3 over but DBRX. The dense line alone left GLM-4.5 (96 query heads of 128 on
    5,120) 0.82 GiB short."""
    measured = row["graphs_gib_measured"]
    planned = _graphs_planned(row, FITTED)
    assert -0.25 <= planned - measured <= GRAPHS_OVER.get(row["model"], 0.3), (planned, measured)


V2_DENSE_GRAPHS_HELD_OUT = [r for b in HELD_OUT for r in b["measured"]
                            if r.get("runner_v2") and r.get("graphs_gib_measured") and not r.get("excluded")
                            and not (a := parse_hf_config(r["config"], r["model"], "x")).num_experts
                            and not a.kv_lora_rank]


def test_dense_graphs_on_v2_are_planned_within_0_4_gib_short_of_the_held_out_captures():
    """The CUDA graphs Model Runner V2 captured for each model without experts or latent attention in the held-out
    batches (their captures not in the fit), against what the 0.32.0 plan keeps out of the KV cache for them (the
    plain plane in the hidden width and the graph's pieces): none more than 0.4 GiB short, none more than 0.6 over
    (the over rows ran at fewer sequences than the plane's default-size captures), mean within 0.05. The hidden-only
    line they replaced left HRM-Text's 128 attention runs 0.94 GiB short and the deep cuts of Llama-3.1-70B and
    Qwen2.5-72B 0.37-0.40."""
    misses = [row["graphs_gib_measured"] - _graphs_planned(row, FITTED) for row in V2_DENSE_GRAPHS_HELD_OUT]
    assert len(misses) >= 50 and max(misses) <= 0.4 and min(misses) >= -0.6, (max(misses), min(misses))
    assert abs(sum(misses) / len(misses)) <= 0.05
    line = replace(FITTED, graphs_plain_base_gib=FITTED.graphs_dense_base_gib, graphs_plain_per_100_pieces_gib=0.0,
                   graphs_plain_per_khidden_gib=FITTED.graphs_dense_per_khidden_gib)
    [hrm] = [r for r in V2_DENSE_GRAPHS_HELD_OUT if r["model"] == "hrm-text-1b"]
    assert hrm["graphs_gib_measured"] - _graphs_planned(hrm, line) > 0.9


def test_the_moe_graph_term_is_what_closes_glm_4_5s_gap():
    [glm] = [r for r in V2_MOE_GRAPHS_HELD_OUT if r["model"] == "GLM-4.5"]
    without = replace(FITTED, graphs_moe_v2_per_kquery_excess=0.0)
    assert glm["graphs_gib_measured"] - _graphs_planned(glm, without) > 0.75
    assert abs(glm["graphs_gib_measured"] - _graphs_planned(glm, FITTED)) < 0.1


MLA_ON_V2 = [r for b in RESULTS["calibration_validation"]["batches"] for r in b["measured"]
             if r.get("runner_v2") and r.get("kv_cache_tokens_measured") and not r.get("excluded")
             and parse_hf_config(r["config"], r["model"], "x").kv_lora_rank]
MLA_BUFFERS_SET_FROM = {"deepseek-v2", "deepseek-v2-fp8-block", "kimi-k2-bf16"}
"""The captures whose traces set mla_graph_buffers (two split buffers, three with FP8 blocks; docs/benchmarks.md
"Peak traces"); the others check it."""


MLA_GRAPHS_UNDER = {"deepseek-v2-heads80": 1.8}
"""Latent-attention captures the plan keeps less for than vLLM took, and by how much at most: validation 22 (held out)
refuted the two-buffer rule at 80 heads (7.88 GiB taken, 6.09 planned; the V1 estimate planned 3.06)."""


@pytest.mark.parametrize("row", MLA_ON_V2, ids=lambda r: f"{r['model']}-{r['layers']}")
def test_latent_attention_graphs_on_v2_are_planned_within_1_05_gib_over_and_the_known_under(row):
    """Every latent-attention model Model Runner V2 captured (8 rows: 16 to 128 heads, BF16 and FP8 blocks, 1.17 to
    12.52 GiB): the 0.32.0 plan keeps at least what was captured and at most 1.05 GiB more, but the 80-head row of
    validation 22 (MLA_GRAPHS_UNDER). The V1 estimate it kept before planned DeepSeek-V3:5 8.2 GiB short."""
    measured, planned = row["graphs_gib_measured"], _graphs_planned(row, FITTED)
    assert -MLA_GRAPHS_UNDER.get(row["model"], 0.0) <= planned - measured <= 1.05, (planned, measured)
    if row["model"] in MLA_GRAPHS_UNDER:
        assert planned - measured < 0, "a row now planned on the safe side leaves MLA_GRAPHS_UNDER"


def test_the_mla_graph_rule_is_checked_by_captures_it_was_not_set_from():
    checked = [r for r in MLA_ON_V2 if r["model"] not in MLA_BUFFERS_SET_FROM]
    assert {r["model"] for r in checked} >= {"DeepSeek-V3", "Kimi-K2-Instruct", "Moonlight-16B-A3B-Instruct",
                                             "DeepSeek-V2-Lite-Chat", "deepseek-v2-heads80"}


@pytest.mark.parametrize("row", MLA_ON_V2, ids=lambda r: f"{r['model']}-{r['layers']}")
def test_the_mla_profile_term_is_a_floor_under_vllms_peak(row):
    """mla_profile_bytes (vLLM's profile-time context allocation and the layer's tensors, from its source) never exceeds
    the profiled `torch peak memory increase` by more than 0.05 GiB, and where it is the peak (DeepSeek-V2-shaped and
    DeepSeek-V3, 128 heads; DeepSeek-V2-shaped with 80, held out in validation 22) it is within 0.05 GiB of it; the
    query-excess term alone left them 0.5-0.9 GiB short."""
    a = parse_hf_config(row["config"], row["model"], "x")
    f = peak_features(a, Layout(1, 1, 1), default_engine(H200, "0.25.1", "v2"))
    peak = float(PEAK.search(" ".join(row["profile"])).group(1))
    assert f.mla <= peak + 0.05
    if a.num_attention_heads in (80, 128):
        assert abs(f.mla - peak) <= 0.05 and fitted_peak_gib(f, FITTED) == f.mla
        without = fitted_peak_gib(replace(f, mla=0.0), FITTED)
        assert peak - without > 0.45


@pytest.mark.parametrize("trace, entry", [("deepseek-v2-2.t1.json", "bench/configs/deepseek-v2.json:2"),
                                          ("deepseek-v2-3.t1.json", "bench/configs/deepseek-v2.json:3")])
def test_the_mla_profile_term_is_the_traced_peak_with_the_workspace_only_after_an_moe_layer(trace, entry):
    """The allocator traces of DeepSeek-V2-shaped cut to 2 and 3 layers (docs/benchmarks/peak-traces): with its one
    MoE layer last (:2) the MLA layers ran before the MoE workspace existed and the peak was the context and the
    layer's tensors alone (4.74 GiB); with an MoE layer before the last attention (:3) the workspace was live too
    (5.68). mla_profile_bytes gives both within 0.02 GiB."""
    from bench.calibrate import entry_config, parse_entry
    from planner.memory import attention_after_experts, mla_profile_bytes

    traced = json.loads((ROOT / "docs" / "benchmarks" / "peak-traces" / trace).read_text())
    config, layers, text = parse_entry(entry)
    a = parse_hf_config(entry_config(config, layers, text), "deepseek-v2", "x")
    engine = default_engine(H200, "0.25.1", "v2")
    assert attention_after_experts(a) == (layers == 3)
    assert abs(mla_profile_bytes(a, Layout(1, 1, 1), engine) / GIB - traced["peak_gib"]) <= 0.02
    assert ("v1/worker/workspace.py" in " ".join(traced["by_site_gib"])) == (layers == 3)


DENSE_TRACES = [r for r in RESULTS["calibration_peak_traces"]["rows"] if r["run"] in ("t5", "v26")]


@pytest.mark.parametrize("row", DENSE_TRACES, ids=lambda r: f"{r['entry']}-{r['run']}")
def test_the_dense_peak_is_the_traced_phase(row):
    """The allocator traces of ten dense models (docs/benchmarks.md "Peak traces", runs t5 and v26): where the peak is
    in the first compile, its block is the embedding table on the GPU (PeakFeatures.embedding) and the peak is
    compile_line_gib, not fitted; the sampler's peak is its line; and on every row the planner's peak is not below
    the traced one by more than the V2 margin. Mistral-Large-2407:8's forward holds the MLP's gate-up output and its
    activation (PeakFeatures.mlp, 2 : 1) beside three hidden states (FORWARD_HIDDEN_COPIES): the forward line, set
    from this trace after validation 26 ran, and checked by validation 27."""
    from bench.calibrate import entry_config, parse_entry
    from planner.memory import FORWARD_HIDDEN_COPIES, compile_line_gib, forward_line_gib, sampler_line_gib

    traced = json.loads((ROOT / row["trace"]).read_text())
    config, layers, text = parse_entry(row["entry"])
    a = parse_hf_config(entry_config(config, layers, text), "traced", "x")
    f = peak_features(a, Layout(1, 1, 1), default_engine(H200, "0.25.1"))
    assert not f.v1 and not f.moe and traced["peak_gib"] == pytest.approx(row["peak_logged_gib"], abs=0.01)
    if row["phase"].startswith("compile"):
        assert traced["largest"][0]["gib"] == pytest.approx(f.embedding, abs=1e-3)
        assert "standalone_compile" in traced["largest"][0]["frames"][0]
        assert compile_line_gib(f) == pytest.approx(traced["peak_gib"], abs=0.01)
    elif row["phase"] == "sampler":
        assert sampler_line_gib(f, FITTED) == pytest.approx(traced["peak_gib"], abs=0.03)
    else:
        blocks = [b["gib"] for b in traced["largest"]]
        assert blocks[:5] == pytest.approx([f.mlp * 2 / 3, f.mlp / 3, *[f.hidden] * FORWARD_HIDDEN_COPIES], abs=1e-3)
        assert forward_line_gib(f, FITTED) == pytest.approx(traced["peak_gib"], abs=0.03)
    assert fitted_peak_gib(f, FITTED) + FITTED.peak_margin_gib >= traced["peak_gib"]


FIRST_CAPTURE = re.compile(r"Estimated (FULL|PIECEWISE) CUDA graph memory: ([\d.]+) MiB first-capture \+ \((\d+)-1\) "
                           r"\S+ ([\d.]+) MiB per-graph")
V1_ESTIMATES = [({**r, "_batch": b["name"], "_extra": batch_extra(b)},
                 {m.group(1): m for line in r["graph_estimate_lines"] if (m := FIRST_CAPTURE.search(line))})
                for b in RESULTS["calibration_validation"]["batches"] for r in b["measured"]
                if r.get("graph_estimate_lines") and not r.get("runner_v2") and r.get("kv_cache_tokens_measured")]


SPLIT_NOT_TAKEN = {
    "gpt-oss-120b": "validation 29 (H200, held out): its first FULL capture took 0 MiB where the rule plans 256 (64 "
                    "heads of 64); FlashAttention 3 served it, with attention sinks and sliding and full layers mixed, "
                    "and kept no split accumulators. The plan keeps them (the safe side: 0.20 GiB of V1 estimate over)",
    "gpt-oss-20b": "validation 33 (H100, held out): 2 MiB, as gpt-oss-120b",
}
"""V1 rows whose first FULL capture held less than the split accumulators the rule plans, and why."""
SMALL_FIRST_FULL = {
    ("validation 48", "nemotron-nano-9b"): "--max-num-seqs 32: its first FULL capture (32 sequences) took 2 MiB where "
                                           "the rule plans 20 (40 heads of 128); at vLLM's default sizes (validation "
                                           "12) it took the accumulators",
    ("validation 50", "falcon-h1-7b"): "--max-num-seqs 64: 2 MiB where the rule plans 12 (12 heads of 128); 98 MiB in "
                                       "validation 46 at the default sizes (96 planned)",
    ("validation 50", "qwen3.5-0.8b-base"): "--max-num-seqs 64: 2 MiB where the rule plans 16 (8 heads of 256); 132 "
                                            "MiB at the default sizes (validation 45; 128 planned)",
    ("validation 55", "gemma-3-4b-it"): "--max-num-seqs 128, the V1 runner: 4 MiB where the rule plans 32 (8 heads of "
                                        "256); the other four attention models of validations 55 and 57 at 128 took "
                                        "their accumulators",
    ("validation 57", "gemma-3-12b-it"): "--max-num-seqs 128, the V1 runner: 4 MiB where the rule plans 64 (16 heads "
                                         "of 256), as Gemma-3-4B in validation 55",
    ("validation 64", "gemma-3-4b-it"): "--max-num-seqs 256 --max-num-batched-tokens 2048, the V1 runner: 4 MiB where "
                                        "the rule plans 64 (8 heads of 256), as in validation 55",
    ("validation 72", "gemma-3-4b-it"): "--max-num-seqs 128 --max-num-batched-tokens 2048, the V1 runner: 4 MiB where "
                                        "the rule plans 32, as in validation 55",
    ("validation 73", "gemma-3-4b-it"): "the same settings as validation 72 without pan-and-scan: 4 MiB",
}
"""V1 rows at a --max-num-seqs whose first FULL capture held less than the split accumulators, and why: at 32-64
sequences three of four attention models' first FULL capture kept 2 MiB (Nemotron-H-8B at 64 kept its 32 and 2 more),
at 128 the two Gemma 3 wrappers 4 MiB. The plan keeps the accumulators, the safe side: at most 64 MiB at these
batches."""


@pytest.mark.parametrize(("row", "modes"), V1_ESTIMATES, ids=[f"{r['model']}-{r['layers']}" for r, _ in V1_ESTIMATES])
def test_the_v1_graph_estimates_first_full_capture_is_flashattentions_split_accumulator(row, modes):
    """vLLM's debug lines of every V1 row (MoE, hybrids and pure Mamba, H100 and H200): the largest FULL graph's
    first capture took the split accumulators split_buffer_bytes gives, but SPLIT_NOT_TAKEN (SPLITS_FOR_GRAPHS x 512
    x heads x head width x 4 bytes; 0 without attention), and at most 48 MiB more (0-4 MiB on the attention models;
    Kimi-Linear 22, the Mamba models' own 2-42); and vLLM's logged total is that first capture (or PIECEWISE's, where
    larger) plus each mode's growth times its further graphs, the form v1_graph_estimate_bytes plans."""
    a = parse_hf_config(row["config"], row["model"], "x")
    full = float(modes["FULL"].group(2))
    planned = split_buffer_bytes(a, Layout(1, 1, 1), calibration_engine(False, extra_args=row["_extra"])) / 2**20
    if row["model"] in SPLIT_NOT_TAKEN or (row["_batch"], row["model"]) in SMALL_FIRST_FULL:
        assert full < planned, "a row now within the rule leaves SPLIT_NOT_TAKEN / SMALL_FIRST_FULL"
    else:
        assert 0 <= full - planned <= 48, (full, planned)
    # the total as the estimate logs it, from the run's CUDA-graph lines or, where those kept other lines (validation
    # 85's Kimi-Linear:9), from the estimate's own debug line
    totals = [float(m.group(1)) for line in row["cudagraph_lines"] + row["graph_estimate_lines"]
              if (m := re.search(r"(?:^|Estimated )CUDA graph memory: ([\d.]+) GiB", line))]
    total = totals[0]
    first = max(float(m.group(2)) for m in modes.values())
    growth = sum((int(m.group(3)) - 1) * float(m.group(4)) for m in modes.values())
    assert (first + growth) / 1024 == pytest.approx(total, abs=0.006)


def test_the_v1_graph_estimate_keeps_the_split_accumulator_and_the_growth_line():
    """GLM-4.5-Air (96 heads of 128) against its 64-head ablation: the plan's V1 estimate differs by the 256 MiB of
    32 heads' accumulators, as vLLM's did (0.85 against 0.60 GiB); the growth is the line in the pieces (8 here)."""
    wide, narrow = (parse_hf_config(cut_layers(json.loads((ROOT / path).read_text()), 8), "x", "x")
                    for path in ("models/GLM-4.5-Air.json", "bench/configs/glm-4.5-air-heads64.json"))
    engine = calibration_engine(False)
    step = (cudagraph_bytes(wide, Layout(1, 1, 1), engine) - cudagraph_bytes(narrow, Layout(1, 1, 1), engine)) / GIB
    assert step == pytest.approx(0.25)
    growth = FITTED.graphs_v1_growth_base_gib + FITTED.graphs_v1_growth_per_100_pieces_gib * 8 / 100
    assert graph_pieces(narrow, Layout(1, 1, 1)) == 8 and graph_pieces(narrow, Layout(1, 2, 1)) == 4
    assert cudagraph_bytes(narrow, Layout(1, 1, 1), engine) / GIB == pytest.approx(0.5 + growth)


GROWTH_OVER_THE_LINE = {
    "lfm2-1.2b": "validation 15: 20 MiB a PIECEWISE graph, a segment torch's allocator kept for its projections "
                 "(docs/benchmarks.md \"V1 CUDA-graph estimate traces\")",
    "jamba-1.5-mini": "validation 13: 14 MiB a PIECEWISE graph, a segment the allocator kept (the same traces)",
}
"""V1 rows outside the fit whose growth is beyond the line by more than the pieces explain, and why."""
FIT_ROWS = {(d.model, d.source) for d in DATA}
V1_HELD_OUT = [(r, modes) for r, modes in V1_ESTIMATES if (fit_name(r), r["_batch"]) not in FIT_ROWS
               and not parse_hf_config(r["config"], r["model"], "x").kv_lora_rank
               and parts_model_applies(calibration_engine(False, extra_args=r["_extra"]))]
"""The V1 rows outside the fit at batch settings the parts model, and so the growth line, applies to (validation
64's 2,048 batched tokens take the family reserve: planner/memory.py outside_kv_bytes)."""


@pytest.mark.parametrize(("row", "modes"), V1_HELD_OUT, ids=[f"{r['model']}-{r['layers']}" for r, _ in V1_HELD_OUT])
def test_the_v1_growth_line_holds_on_the_v1_rows_it_was_not_fitted_on(row, modes):
    """The growth vLLM logged (each mode's per-graph growth times its further graphs) on every V1 row outside the fit
    (the line was fitted on the fit's nine at vLLM's default 51 graphs a mode): within 0.20 GiB of
    graphs_v1_growth_base_gib + graphs_v1_growth_per_100_pieces_gib x graph_pieces, scaled by the row's further
    graphs (graph_scale; --max-num-seqs 32 captures 11 + 7, 128 35 + 19), but GROWTH_OVER_THE_LINE, which are over
    it. The graph counts planned are the ones vLLM logged."""
    a = parse_hf_config(row["config"], row["model"], "x")
    engine = calibration_engine(False, extra_args=row["_extra"])
    logged_counts = (int(modes["PIECEWISE"].group(3)), int(modes["FULL"].group(3)))
    # gpt-oss: vLLM's hook captures up to 1,024, which the plan does not take (capture_sizes says why)
    assert logged_counts == ((83, 83) if row["model"].startswith("gpt-oss") else graph_counts(engine))
    logged = sum((int(m.group(3)) - 1) * float(m.group(4)) for m in modes.values()) / 1024
    planned = (FITTED.graphs_v1_growth_base_gib + FITTED.graphs_v1_growth_per_100_pieces_gib
               * graph_pieces(a, Layout(1, 1, 1)) / 100) * graph_scale(engine)
    if row["model"] in GROWTH_OVER_THE_LINE:
        assert logged - planned > 0.20, "a row now on the line leaves GROWTH_OVER_THE_LINE"
    else:
        assert planned == pytest.approx(logged, abs=0.20)


V1_TRACES = {row["entry"]: row for row in RESULTS["calibration_peak_traces"]["rows"] if row["run"] == "t6"}
V1_SAMPLER_SITES = ("v1/sample/", "vocab_parallel_embedding.py")


@pytest.mark.parametrize("entry", ["models/Qwen3-235B-A22B-FP8.json:10", "models/GLM-4.5-Air.json:8"])
def test_the_v1_peak_is_the_traced_sampler_phase(entry):
    """Run t6 (vLLM 0.25.1's V1 runner, H200): at the profile's peak the V1 sampler's blocks are the lm_head's bf16
    logits, three float32 copies and the top-k/top-p buffer (v1_sampler_line_gib without its constant; Qwen3-235B-FP8
    has 32 MiB more at the lm_head's call site), on the MoE workspace; on GLM-4.5-Air what a full collection freed is
    the router compile hold the plan keeps (1.49 GiB against 1.38); the phases then give the logged peak within 0.11
    GiB."""
    trace = json.loads((ROOT / V1_TRACES[entry]["trace"]).read_text())
    from bench.calibrate import entry_config, parse_entry

    a = parse_hf_config(entry_config(*parse_entry(entry)), "traced", "x")
    f = peak_features(a, Layout(1, 1, 1), calibration_engine(False))
    assert f.v1
    sampler = sum(gib for site, gib in trace["by_site_gib"].items() if any(s in site for s in V1_SAMPLER_SITES))
    assert sampler == pytest.approx(V1_SAMPLER_LOGITS_COPIES * f.logits + f.topk_buffer, abs=0.035)
    workspace = sum(gib for site, gib in trace["by_site_gib"].items() if site.startswith("v1/worker/workspace.py"))
    assert workspace == pytest.approx(f.workspace, abs=0.01)
    held = trace["gc"]["freed_gib"]
    assert f.router_hold == (held > 1.0)
    if f.router_hold:
        assert held == pytest.approx(FITTED.router_hold_per_query * f.query, abs=0.15)
    assert fitted_peak_gib(f, FITTED) == pytest.approx(V1_TRACES[entry]["peak_logged_gib"], abs=0.11)


def test_the_v1_rows_without_the_router_hold_are_the_sampler_or_the_forward_phase():
    """Every V1 row of the fit whose router takes no compile hold: the phases explain its profiled peak within 0.16
    GiB (the V1 sampler's blocks alone within 0.04 on Qwen3-30B-A3B, gpt-oss, Qwen3-Next, Qwen3-235B-FP8;
    Mixtral-8x22B:8's forward 0.15 under the plan, its attention blocks 2.9 query tensors against the median 4.6); the
    fitted linear V1 terms these replace left -0.52..+0.15."""
    rows = [r for r in DATA if not r.v2 and not r.features.router_hold]
    assert len(rows) >= 7
    for r in rows:
        assert abs(r.peak - fitted_peak_gib(r.features, FITTED)) < 0.16, r.model
