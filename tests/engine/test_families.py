"""Current model families: every config under models/ plans, each family is read as vLLM reads it, the
planner stays within the GPU calibration (docs/benchmarks/results.json), and families it cannot size are refused."""

import json
from pathlib import Path

import pytest

from bench.fit import FORCED_V2
from planner.errors import ConfigError
from planner.kv_cache import Admission, layer_specs, pool_first_stage
from planner.layers import MXFP4_BYTES_PER_PARAM, cut_layers
from planner.model_config import parse_hf_config
from planner.sizing import families, single_gpu_fit
from tests.helpers import accel, arch, batch_extra, model, sizing

ROOT = Path(__file__).resolve().parents[2]
MODELS = sorted(p.stem for p in (ROOT / "models").glob("*.json"))
RESULTS = json.loads((ROOT / "docs" / "benchmarks" / "results.json").read_text())
CALIBRATED = RESULTS["calibration_families"]["rows"]
VALIDATED = [{**r, "accelerator": batch.get("accelerator", "nvidia-h200-141gb"),
              "runner": (batch.get("settings") or {}).get("runner", "default"),
              "router_fake": (batch.get("settings") or {}).get("router_fake", False),
              "extra": batch_extra(batch)}
             for batch in RESULTS["calibration_validation"]["batches"] for r in batch["measured"]
             if r.get("kv_cache_tokens_measured") and not r.get("excluded")]
"""Every started validation row, with the GPU its batch ran on (H200 unless the batch names another) and the runner
it was started on (bench/calibrate.py --runner v2: Model Runner V2 for every model, as vLLM 0.32.0 runs them)."""

# (model file, accelerator, machine, expected tensor x pipeline x nodes x data-parallel engines): sensible GKE
# machines for each. The MoE models whose one copy leaves too little KV cache on a GPU split their experts over
# data-parallel engines (planner/layout.py auto_layout, docs/planning.md "Data + expert parallelism").
PLANS = {
    "gpt-oss-20b": ("nvidia-h100-80gb", "a3-highgpu-1g", (1, 1, 1, 1)),
    "gpt-oss-120b": ("nvidia-h200-141gb", "a3-ultragpu-8g", (1, 1, 1, 1)),
    "Qwen3-30B-A3B": ("nvidia-h100-80gb", "a3-highgpu-8g", (1, 1, 1, 4)),
    "Qwen3-235B-A22B-FP8": ("nvidia-h200-141gb", "a3-ultragpu-8g", (1, 1, 1, 4)),
    "DeepSeek-V3": ("nvidia-h200-141gb", "a3-ultragpu-8g", (2, 1, 1, 4)),
    "Qwen3-Next-80B-A3B-Instruct": ("nvidia-h200-141gb", "a3-ultragpu-8g", (1, 1, 1, 2)),
    "Meta-Llama-3.1-8B-Instruct-FP8": ("nvidia-l4", "g2-standard-8", (1, 1, 1, 1)),
    "Qwen2.5-7B-Instruct-AWQ": ("nvidia-l4", "g2-standard-8", (1, 1, 1, 1)),
    "Qwen2.5-VL-7B-Instruct": ("nvidia-h100-80gb", "a3-highgpu-1g", (1, 1, 1, 1)),
}


@pytest.mark.parametrize("name", MODELS)
def test_every_model_file_plans(name):
    """At 8,192 tokens, or the model's own context where shorter (OLMo 2, Nemotron-Mini: 4,096)."""
    acc, machine, _ = PLANS.get(name, ("nvidia-h200-141gb", "a3-ultragpu-8g", None))
    length = min(8192, arch(name).max_position_embeddings)
    s = sizing(model=model(name), accelerator=accel(acc, machine), vllm={"maxModelLen": length})
    assert s.kv_cache_tokens_per_replica >= length
    assert s.weights_gib_per_gpu + s.kv_cache_gib_per_gpu < 141


@pytest.mark.parametrize("name", sorted(PLANS))
def test_current_families_plan_on_the_machine_they_need(name):
    acc, machine, layout = PLANS[name]
    s = sizing(model=model(name), accelerator=accel(acc, machine), vllm={"maxModelLen": 8192})
    assert (s.tensor_parallel_size, s.pipeline_parallel_size, s.nodes_per_replica, s.data_parallel_size) == layout
    assert s.expert_parallel == (s.data_parallel_size > 1)


UNDER_COUNTED = {
    # (model, layers): the lowest KV error accepted, and why it is below the -1% bound (the safe side). Every other
    # row of the fit (bench/fit.py) and of the validation batches stays within -1%..+0.5%.
    ("Llama-3.1-70B-Instruct", 40): (-0.014, "calibration_families' row, a warm start: its profile took 12.7 s (the "
                                             "cold starts of its cuts 26-29 s) and had no first-compile block (its "
                                             "1.96 GiB embedding), a compile served from a cache (bench/harness.py "
                                             "cold_env now starts each calibrate run cold); the plan takes a cold "
                                             "start, which validation 27 measured (-0.19%). It stays a fit row: the "
                                             "dense graph line reads its capture (1.63 GiB, as cold); its copy in "
                                             "validation 2 is excluded"),
    ("Qwen2.5-32B-Instruct", "all"): (-0.013, "batch 6 (H100): a KV pool of 8.4 GiB, where the dense V2 peak margin "
                                              "(0.06 GiB) and the load overhead (0.05 GiB, 0.006 loaded beyond its "
                                              "parameters) alone are 1.3%; its fitted peak was exact (1.606 GiB, 1.61 "
                                              "profiled)"),
    ("Qwen2-57B-A14B-Instruct", 14): (-0.012, "batch 6 (H100): a KV pool of 14.2 GiB, where the MoE V2 peak margin "
                                              "(0.20 GiB) and the load overhead are 1.8%"),
    ("Moonlight-16B-A3B-Instruct", "all"): (-0.013, "batch 5 (H100), V1 runner: it held none of the router compile "
                                                    "hold the plan keeps for its biased router (0.34 GiB; neither did "
                                                    "its V2 row), and the V1 hold margin, on a 45 GiB pool: 3.37 GiB "
                                                    "of peak planned, 2.78 profiled"),
    ("GLM-4.5-Air", 12): (-0.085, "validations 33 and 49 (H100, held out, 49 cold), V1 runner: 346,624 tokens both "
                                  "times, a 3.48 GiB profile where the plan keeps 4.54 with 0.25.1's router compile "
                                  "hold, on a 15.9 GiB pool. The hold is live at the sampler's peak only where "
                                  "Python's generation-2 collection comes after it: with the allocator tracer on (49's "
                                  "diagnostic start) it was, 4.63 GiB and -1.22%, as on the H200 (41: -0.26%). 0.32.0 "
                                  "holds none"),
    ("ling-2.5-shaped", 16): (-0.061, "validation 83 (H200, V1 runner): no router compile hold at its latent "
                                      "layer (the logged 15.52 GiB is the layer's holdings alone, 15.50 planned; at "
                                      "8 and 12 layers 0.47 GiB more was held, traced in v92): how much is held "
                                      "depends on when Python's collector runs; the plan keeps the hold (0.69) and "
                                      "the V1 hold margin, on a 13.3 GiB pool"),
    ("ling-2.5-shaped", 12): (-0.014, "validation 84 (H200, V1 runner): the router compile hold the plan keeps "
                                      "at its latent layer (0.69 GiB) and the V1 hold margin (0.23) where 0.47 was "
                                      "held (the logged 15.97 GiB peak, 15.50 of the layer's holdings), on a 37.7 "
                                      "GiB pool"),
    ("kimi-k2-bf16 [V2]", 2): (-0.014, "batch 20 (H200, held out): vLLM 0.25.1's router compile held 0.80 GiB of "
                                       "Kimi-K2 BF16:2's tensors (docs/benchmarks.md \"Peak traces\", run h) where "
                                       "the hold term, fitted on GLM-4.5-Air, plans 1.38; how much is held depends on "
                                       "when Python's collector runs, and 0.32.0 holds none"),
}

OVER_COUNTED = {
    # (model, layers): the highest KV error accepted above the +0.5% bound (the side vLLM would refuse a plan on), and
    # why. The next refit takes the row in; until then the plan promises this much too much for such a model.
    ("Kimi-K2-Instruct [V2]", 4): (0.015, "batch 19 (H200, held out, Model Runner V2): its peak is in latent "
                                          "attention after the first MoE layer, where vLLM 0.25.1's router compile "
                                          "still held about 1.2 GiB (1.25 traced, docs/benchmarks.md \"Peak traces\"); "
                                          "the plan keeps that hold in the sampler phase, not under the latent-"
                                          "attention floor, since DeepSeek-V3:5 with the same router held none there. "
                                          "0.32.0 holds none"),
    ("gemma-3-4b-it", "all"): (0.008, "validation 64 (H200, held out), V1 runner with 512-token graphs: vLLM 0.25.1's "
                                      "V1 CUDA-graph estimate took 24 MiB a graph (1.31 GiB, the plan's line 0.32): "
                                      "its second capture's 9.7 MiB MLP activation fell under the allocator's 10 MiB "
                                      "large-request size and took new 20 MiB segments (docs/benchmarks.md \"V1 "
                                      "CUDA-graph estimate traces\", g2 and g3, which repeated it); its V1 rows at "
                                      "256-token graphs are within (-0.24%)"),
    ("lfm2-1.2b", "all"): (0.013, "batch 15 (H100, held out), V1 runner: its second PIECEWISE capture kept a 20 MiB "
                                  "segment of torch's allocator, which vLLM 0.25.1's V1 estimate multiplied by 50 "
                                  "graphs (1.20 GiB estimated, 0.36 captured; docs/benchmarks.md \"V1 CUDA-graph "
                                  "estimate traces\"), 0.88 GiB more than the growth line in its 16 pieces; the "
                                  "segment is not a function of the config. 0.32.0 serves it on Model Runner V2"),
}


@pytest.mark.parametrize("row", CALIBRATED, ids=lambda r: f"{r['model']}-{r['layers']}-{r['max_model_len']}")
def test_planner_stays_within_the_gpu_calibration(row):
    a = parse_hf_config(row["config"], row["model"], "calibration")
    f = single_gpu_fit(a, "nvidia-h200-141gb", 0.9, row["max_model_len"])
    kv_error = (f.kv_tokens - row["kv_cache_tokens_measured"]) / row["kv_cache_tokens_measured"]
    lowest = UNDER_COUNTED.get((row["model"], row["layers"]), (-0.01, ""))[0]
    assert lowest <= kv_error <= 0.005, f"KV tokens {kv_error:+.2%} against vLLM (never more than 0.5% over)"
    weights_error = f.weights_per_gpu / 2**30 / row["weights_gib_measured"] - 1
    assert abs(weights_error) <= 0.03, f"weights {weights_error:+.2%} against vLLM's Model loading"


def test_calibration_covers_every_family_the_issue_names():
    seen = {label for row in CALIBRATED for label in families(parse_hf_config(row["config"], row["model"], "x"))}
    for family in ("MoE", "MLA", "sliding window", "hybrid linear attention", "multimodal", "quantized mxfp4",
                   "quantized compressed-tensors", "quantized awq"):
        assert family in seen


def test_mxfp4_quantizes_only_the_experts_and_fp8_every_linear_layer():
    oss = arch("gpt-oss-20b")
    parts = oss.parameter_parts()
    assert oss.quantized_parts == {"experts"}
    assert oss.weight_bytes(2.0) == pytest.approx(parts["experts"] * MXFP4_BYTES_PER_PARAM
                                                  + 2 * (sum(parts.values()) - parts["experts"]))
    ds = arch("DeepSeek-V3")
    assert {"attention", "mlp", "experts"} <= ds.quantized_parts and "embeddings" not in ds.quantized_parts
    assert ds.parameter_count() / 1e9 == pytest.approx(671.0, abs=1.0)


def test_awq_and_compressed_tensors_bytes_follow_their_groups():
    awq = arch("Qwen2.5-7B-Instruct-AWQ")
    assert awq.weight_bytes_per_param == pytest.approx(0.5 + (16 + 4) / 8 / 128)
    fp8 = arch("Meta-Llama-3.1-8B-Instruct-FP8")
    assert fp8.weight_bytes_per_param == 1.0 and fp8.quant_method == "compressed-tensors"
    group = json.loads((ROOT / "models" / "Meta-Llama-3.1-8B-Instruct-FP8.json").read_text())
    weights = group["quantization_config"]["config_groups"]["group_0"]["weights"]
    weights.update(num_bits=4, type="int", strategy="group", group_size=64, symmetric=False)
    assert parse_hf_config(group, "w4", "x").weight_bytes_per_param == pytest.approx(0.5 + (16 + 4) / 8 / 64)


def test_layer_patterns_are_read_as_vllm_builds_them():
    assert arch("gpt-oss-20b").kinds[:4] == ("sliding", "full", "sliding", "full")
    assert arch("gpt-oss-20b").window == 128
    nxt = arch("Qwen3-Next-80B-A3B-Instruct")
    assert nxt.kinds[:4] == ("linear", "linear", "linear", "full") and nxt.kinds.count("full") == 12
    gemma = {"model_type": "gemma3_text", "num_hidden_layers": 12, "hidden_size": 1024, "num_attention_heads": 8,
             "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 1000, "max_position_embeddings": 8192,
             "sliding_window": 512, "sliding_window_pattern": 6}
    assert parse_hf_config(gemma, "g", "x").kinds.count("full") == 2
    llama4 = {**gemma, "model_type": "llama4_text", "sliding_window_pattern": None, "attention_chunk_size": 8192,
              "no_rope_layers": [1, 1, 1, 0] * 3}
    a = parse_hf_config(llama4, "l4", "x")
    assert a.kinds[:4] == ("chunked", "chunked", "chunked", "full") and a.window == 8192
    # Qwen2.5's sliding_window is not used: use_sliding_window is false
    assert set(arch("Qwen2.5-VL-7B-Instruct").kinds) == {"full"}


def test_moe_layer_patterns_count_only_sparse_layers():
    ds = arch("DeepSeek-V3")
    assert ds.moe_layers == 61 - 3
    qwen = json.loads((ROOT / "models" / "Qwen3-30B-A3B.json").read_text())
    assert parse_hf_config({**qwen, "mlp_only_layers": [0, 1]}, "q", "x").moe_layers == 46
    assert parse_hf_config({**qwen, "decoder_sparse_step": 2}, "q", "x").moe_layers == 24
    dense_more = parse_hf_config({**qwen, "decoder_sparse_step": 2}, "q", "x").parameter_count()
    assert dense_more < arch("Qwen3-30B-A3B").parameter_count()


def test_hybrid_tokens_depend_on_the_sequence_length_as_in_vllm():
    """Sliding layers hold at most window - 1 + 8192 tokens, so longer sequences raise the reported tokens."""
    one_batch = Admission(in_flight_tokens=8192, state_blocks=1)

    def tokens(model: str, max_len: int) -> int:
        return pool_first_stage(layer_specs(arch(model), 1, 2.0), 1, 100 * 2**30, max_len, one_batch)

    assert tokens("gpt-oss-20b", 32768) > 1.5 * tokens("gpt-oss-20b", 8192)
    assert tokens("Qwen3-30B-A3B", 8192) == tokens("Qwen3-30B-A3B", 32768)


def test_cut_layers_keeps_the_pattern():
    cfg = json.loads((ROOT / "models" / "Qwen3-Next-80B-A3B-Instruct.json").read_text())
    cut = parse_hf_config(cut_layers(cfg, 8), "n", "x")
    assert cut.num_layers == 8 and cut.kinds == ("linear",) * 3 + ("full",) + ("linear",) * 3 + ("full",)
    oss = cut_layers(json.loads((ROOT / "models" / "gpt-oss-20b.json").read_text()), 4)
    assert oss["layer_types"] == ["sliding_attention", "full_attention"] * 2


UNSIZED = [
    ({"layers_block_type": ["mamba", "attention"]}, "layers_block_type"),
    ({"mamba_d_state": 128}, "mamba_d_state"),
    ({"layer_types": ["mamba"] * 48}, "layer_types"),
    ({"layer_types": ["indexed_attention"] * 48}, "layer_types"),
    ({"layer_types": ["linear_attention", "full_attention"] * 24}, "linear_num_key_heads"),
    ({"num_kv_shared_layers": 15, "hidden_size_per_layer_input": 256}, "num_kv_shared_layers"),
    ({"zero_expert_num": 256}, "zero_expert_num"),
]


@pytest.mark.parametrize("change, key", UNSIZED, ids=[k for _, k in UNSIZED])
def test_a_structure_not_sized_yet_plans_with_stated_parallelism_and_a_warning(change, key, tmp_path):
    """vLLM serves these families, so the plan must not stop at them: the config reads with what it marks named, the
    automatic layout is chosen with every layer's KV cache counted as full attention, stated parallelism is taken as
    stated, and either way the plan warns in one line what it could not verify."""
    cfg = {**json.loads((ROOT / "models" / "Qwen3-30B-A3B.json").read_text()), **change}
    arch = parse_hf_config(cfg, "m", "model.configFile")
    assert key in arch.unsized and set(arch.kinds) == {"full"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    section = {"id": "org/m", "configFile": str(path)}
    h100 = accel("nvidia-h100-80gb", "a3-highgpu-8g")
    chosen = sizing(model=section, accelerator=h100, vllm={"maxModelLen": 8192})
    assert chosen.kv_cache_tokens_per_replica >= 8192  # a 61 GiB model on 80 GiB GPUs: full attention fits
    [warning] = [w for w in chosen.warnings if "does not size yet" in w]
    assert key in warning and "counted as full attention" in warning and "\n" not in warning
    planned = sizing(model=section, accelerator=h100, vllm={"maxModelLen": 8192}, parallelism={"tensor": 4})
    assert planned.tensor_parallel_size == 4
    [warning] = [w for w in planned.warnings if "does not size yet" in w]
    assert key in warning and "does not verify the KV tokens" in warning and "\n" not in warning
    stated = sizing(model={**section, "weightsGib": 61.0}, accelerator=h100, vllm={"maxModelLen": 8192},
                    parallelism={"tensor": 4})
    assert stated.weights_gib == 61.0 and any("model.weightsGib as stated" in w for w in stated.warnings)


def test_a_sized_model_gets_no_unsized_warning():
    planned = sizing(model=model("Qwen3-30B-A3B"), accelerator=accel("nvidia-h100-80gb", "a3-highgpu-8g"),
                     vllm={"maxModelLen": 8192})
    assert not any("does not size yet" in w for w in planned.warnings)


def test_an_unknown_quantization_asks_for_model_weights_gib(tmp_path):
    cfg = json.loads((ROOT / "models" / "Qwen2.5-7B-Instruct.json").read_text())
    cfg["quantization_config"] = {"quant_method": "bitsandbytes", "load_in_4bit": True}
    path = tmp_path / "bnb.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(ConfigError) as err:
        sizing(model={"id": "org/bnb", "configFile": str(path)})
    assert err.value.key == "model.weightsGib" and "bitsandbytes" in str(err.value)
    given = sizing(model={"id": "org/bnb", "configFile": str(path), "weightsGib": 5.5})
    assert given.weights_gib == 5.5


@pytest.mark.parametrize("row", VALIDATED, ids=lambda r: f"{r['model']}-{r['layers']}-{r['accelerator']}")
def test_todays_planner_never_over_counts_a_validation_checkpoint(row):
    """Checkpoints measured after their prediction was committed: today's planner must not promise more KV tokens
    than vLLM allocated by more than 0.5% (the side that lets a plan pass that vLLM refuses), and stays within 1%
    under except where the reason is known; weights within 3%."""
    a = parse_hf_config(row["config"], row["model"], "validation")
    forced = row["runner"] == "v2"
    f = single_gpu_fit(a, row["accelerator"], 0.9, row["max_model_len"], runner=row["runner"],
                       router_fake=row["router_fake"], extra_args=row["extra"])
    kv_error = (f.kv_tokens - row["kv_cache_tokens_measured"]) / row["kv_cache_tokens_measured"]
    key = (row["model"] + (FORCED_V2 if forced else ""), row["layers"])
    lowest = UNDER_COUNTED.get(key, (-0.01, ""))[0]
    highest = OVER_COUNTED.get(key, (0.005, ""))[0]
    assert lowest <= kv_error <= highest, f"KV tokens {kv_error:+.2%} against vLLM"
    assert abs(f.weights_per_gpu / 2**30 / row["weights_gib_measured"] - 1) <= 0.03


def test_longcat_flash_plans_sized_where_it_once_planned_wrong():
    """LongCat-Flash (two MLA blocks and two MLPs per layer beside the experts) read as a plain decoder gave plans
    wrong both ways (6,498B parameters for a 560B model), and was then marked unsized. Now its layers are sized:
    transformers' default config (meituan-longcat/LongCat-Flash-Chat's shape) with the keys the published config sets
    counts what vLLM's class builds (test_parameter_counts.py test_longcat_flash_counts_what_vllm_builds), also inside a
    wrapper. zero_expert_num in another family still marks the config unsized, naming the key; Gemma 3n, marked so
    until its layers were sized (test_a_gemma3n_wrapper_plans_its_decoder_and_says_what_it_does_not_count), plans
    sized."""
    from transformers import CONFIG_MAPPING

    from planner.model_config import LONGCAT_REQUIRED

    cfg = {**CONFIG_MAPPING["longcat_flash"]().to_dict(), "architectures": ["LongcatFlashForCausalLM"],
           "zero_expert_type": "identity", "mla_scale_q_lora": True, "mla_scale_kv_lora": True}
    assert set(LONGCAT_REQUIRED) <= set(cfg)
    for read in (parse_hf_config(cfg, "m", "model.configFile"),
                 parse_hf_config({"model_type": "wrapper", "architectures": ["W"], "text_config": cfg}, "m",
                                 "model.configFile")):
        assert not read.unsized and read.parameter_count() == 560_664_980_480
        assert read.kinds == ("full",) * 56 and read.cache_slots == 2
    other = {**CONFIG_MAPPING["deepseek_v3"]().to_dict(), "architectures": ["X"], "zero_expert_num": 4}
    assert "zero_expert_num" in parse_hf_config(other, "m", "model.configFile").unsized


def test_a_gemma3n_wrapper_plans_its_decoder_and_says_what_it_does_not_count(tmp_path):
    """transformers' default Gemma 3n (google/gemma-3n-E4B's shape) in its wrapper: the decoder sized (the last 15
    layers KV-shared, AltUp and LAuReL counted, not unsized), the towers named in one warning when the weights are
    counted from config.json and the model's image and audio inputs are served, none when served text-only."""
    from transformers import CONFIG_MAPPING

    cfg = json.loads(json.dumps({**CONFIG_MAPPING["gemma3n"]().to_dict(),
                                 "architectures": ["Gemma3nForConditionalGeneration"]}, default=str))
    arch = parse_hf_config(cfg, "m", "model.configFile")
    assert not arch.unsized and arch.kv_shared_layers == 15 and arch.modalities == ("image", "audio")
    assert "MobileNetV5" in arch.uncounted_towers
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    section = {"id": "google/gemma-3n-E4B-it", "configFile": str(tmp_path / "config.json")}
    l4 = accel("nvidia-l4", "g2-standard-8")
    served = sizing(model=section, accelerator=l4, vllm={"maxModelLen": 8192})
    [warning] = [w for w in served.warnings if "not in the weights counted" in w]
    assert "MobileNetV5" in warning and "--language-model-only" in warning and "\n" not in warning
    text_only = sizing(model=section, accelerator=l4, vllm={"maxModelLen": 8192,
                                                            "extraArgs": ["--language-model-only"]})
    assert not any("not in the weights counted" in w for w in text_only.warnings)
    stated = sizing(model={**section, "weightsGib": 15.7}, accelerator=l4, vllm={"maxModelLen": 8192})
    assert not any("not in the weights counted" in w for w in stated.warnings)
    path = ROOT / "bench" / "configs" / "gemma-3n-e4b.json"  # the same decoder, unwrapped: no tower to count
    assert parse_hf_config(json.loads(path.read_text()), "m", "model.configFile").uncounted_towers == ""


def test_cut_layers_keeps_the_pattern_of_nemotron_h_and_kimi_linear():
    """A cut NemotronH keeps its first blocks (hybrid_override_pattern is a string, one character a block) and a cut
    Kimi Linear its KDA / full-attention numbers up to the cut (1-based lists in linear_attn_config): uncut, both
    were read as all full attention (transformers refused the longer lists) or with blocks past the cut."""
    configs = ROOT / "bench" / "configs"
    nemotron = parse_hf_config(cut_layers(json.loads((configs / "nemotron-h-8b.json").read_text()), 9), "n", "x")
    assert nemotron.kinds == ("mamba", "none") * 3 + ("mamba", "full", "none")
    kimi = parse_hf_config(cut_layers(json.loads((configs / "kimi-linear-48b-a3b.json").read_text()), 9), "k", "x")
    assert kimi.kinds == ("kda", "kda", "kda", "full") * 2 + ("kda",) and kimi.kda == (32, 128, 4)


def test_a_pipeline_that_parts_a_shared_kv_cache_from_its_layer_is_refused():
    """Gemma 4's KV-shared layers read the cache of an earlier layer on their own GPU: a pipeline split between
    them is refused in one line naming parallelism.pipeline; one stage plans."""
    config = ROOT / "bench" / "configs" / "gemma-4-e2b.json"
    section = {"id": "google/gemma-4-e2b", "configFile": str(config)}
    with pytest.raises(ConfigError) as err:
        sizing(model=section, parallelism={"tensor": 1, "pipeline": 2})
    assert err.value.key == "parallelism.pipeline" and "reads the KV cache of layer" in str(err.value)
    assert "\n" not in str(err.value)
    planned = sizing(model=section)
    assert planned.pipeline_parallel_size == 1 and not any("does not size yet" in w for w in planned.warnings)


def test_a_pipeline_stage_without_an_moe_layer_is_refused_where_vllms_class_needs_one(tmp_path):
    """GLM-4.5 cut to 5 layers (the first 3 dense): vLLM's Glm4MoeForCausalLM builds each stage's layers and raises
    on a stage without an MoE layer (planner/model_config.py NEEDS_AN_MOE_LAYER). Two stages put layers 0-2 on the
    first (get_pp_indices: the remainder on the stages before the last), so the plan is refused in one line naming
    parallelism.pipeline; one stage plans."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cut_layers(json.loads((ROOT / "models" / "GLM-4.5.json").read_text()), 5)))
    section = {"id": "zai-org/GLM-4.5", "configFile": str(path)}
    h200 = accel("nvidia-h200-141gb", "a3-ultragpu-8g")
    with pytest.raises(ConfigError) as err:
        sizing(model=section, accelerator=h200, parallelism={"tensor": 1, "pipeline": 2})
    assert err.value.key == "parallelism.pipeline" and "layers 0-2, all dense" in str(err.value)
    assert "\n" not in str(err.value)
    assert sizing(model=section, accelerator=h200, parallelism={"tensor": 1, "pipeline": 1}).pipeline_parallel_size == 1


def test_a_profiling_cache_over_the_gpu_is_planned_as_vllm_fails_on_it():
    """vLLM estimates its CUDA graphs with a KV cache of min(max_num_seqs, 512) blocks allocated first: 66 GiB of
    Mamba-2 states for Mamba-Codestral-7B, which with its 13.6 GiB of weights an H100 does not hold (validation 34:
    vLLM 0.25.1 ran out of memory there; the same config started on an H200, validation 16). A stated TP=1 on an
    H100 is refused naming the way out; the automatic layout takes more GPUs; fewer sequences or no graphs start at
    TP=1; the H200 plans it at TP=1. No started validation row is near the line (tests: the largest is 0.78 of its
    GPU)."""
    from planner.catalog import ACCELERATORS

    codestral = json.loads((ROOT / "bench" / "configs" / "mamba-codestral-7b.json").read_text())
    m = {"id": "mistralai/Mamba-Codestral-7B-v0.1", "architecture": codestral}
    h100 = accel("nvidia-h100-80gb", "a3-highgpu-8g")
    with pytest.raises(ConfigError) as err:
        sizing(model=m, accelerator=h100, parallelism={"tensor": 1}, vllm={"maxModelLen": 8192})
    assert err.value.key == "parallelism.tensor" and "CUDA graphs" in str(err.value)
    assert "--max-num-seqs" in str(err.value) and "--enforce-eager" in str(err.value)
    auto = sizing(model=m, accelerator=h100, vllm={"maxModelLen": 8192})
    assert auto.tensor_parallel_size * auto.pipeline_parallel_size > 1
    for args in (["--max-num-seqs", "256"], ["--enforce-eager"]):
        one = sizing(model=m, accelerator=h100, parallelism={"tensor": 1},
                     vllm={"maxModelLen": 8192, "extraArgs": args})
        assert one.tensor_parallel_size == 1
    h200 = sizing(model=m, accelerator=accel("nvidia-h200-141gb", "a3-ultragpu-8g"), parallelism={"tensor": 1},
                  vllm={"maxModelLen": 8192})
    assert h200.tensor_parallel_size == 1
    for row in VALIDATED:
        a = parse_hf_config(row["config"], row["model"], "validation")
        f = single_gpu_fit(a, row["accelerator"], 0.9, row["max_model_len"], runner=row["runner"],
                           router_fake=row["router_fake"], extra_args=row["extra"])
        assert f.start_bytes < 0.85 * ACCELERATORS[row["accelerator"]].memory_bytes, row["model"]
    oom = single_gpu_fit(parse_hf_config(codestral, "mamba-codestral-7b", "x"), "nvidia-h100-80gb", 0.9, 8192)
    assert oom.kv_tokens == 0


def test_ling3_is_read_by_its_architecture_and_refused_only_where_vllm_refuses():
    """Ling 3.0 (BailingMoeV3ForCausalLM) and Ling 2.5 share model_type bailing_hybrid, so the planner knows Ling 3.0
    by its architecture. Its checkpoints name remote code (auto_map): where config.json writes every key
    bailing_moe_v3.py reads beyond the common ones (planner/layers.py READ_AS_WRITTEN) it plans sized, where one is
    left to the remote class it plans with the one-line unverified warning. Ling 2.5, of the same model type, puts its
    linear attention by its own rule (no latent tail). no_kda_lora false is
    refused, as vLLM's BailingMoeV3KimiDeltaAttention raises; a layer_group_size of 0 (vLLM's _is_kda_layer divides
    by it) is refused naming the key, a negative one planned as _is_kda_layer takes it (test_engine_kv_vllm.py)."""
    from planner.layers import READ_AS_WRITTEN

    raw = json.loads((ROOT / "bench" / "configs" / "ling-3.0-tiny.json").read_text())
    ling25 = json.loads((ROOT / "bench" / "configs" / "ling-2.5-shaped.json").read_text())
    for config in (raw, ling25):
        remote = {**config, "auto_map": {"AutoConfig": "configuration_bailing.Config"}}
        assert not parse_hf_config(remote, "m", "model.configFile").unsized
        for key in READ_AS_WRITTEN[config["architectures"][0]]:
            left_out = {k: v for k, v in remote.items() if k != key}
            assert "auto_map" in parse_hf_config(left_out, "m", "model.configFile").unsized, key
    ling25 = {**raw, "architectures": ["BailingMoeV2_5ForCausalLM"], "num_hidden_layers": 22}
    group = ("lightning", "lightning", "lightning", "full")
    assert parse_hf_config(ling25, "m", "model.configFile").kinds == group * 5 + ("lightning",) * 2  # no latent tail
    for group in (1, 0, -4):  # vLLM's is_linear_layer: no linear attention unless the group is > 0 (and > 1)
        assert set(parse_hf_config({**ling25, "layer_group_size": group}, "m", "model.configFile").kinds) == {"full"}
    with pytest.raises(ConfigError) as refused:  # `"8" > 0` raises in vLLM's is_linear_layer
        parse_hf_config({**ling25, "layer_group_size": "8"}, "m", "model.configFile")
    assert "layer_group_size" in str(refused.value)
    for key, value in (("no_kda_lora", False), ("layer_group_size", 0)):
        with pytest.raises(ConfigError) as refused:
            parse_hf_config({**raw, key: value}, "m", "model.configFile")
        assert key in str(refused.value) and "\n" not in str(refused.value)
