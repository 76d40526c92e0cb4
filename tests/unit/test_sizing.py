"""Planner maths on known models and the layout rule (TP inside a node, PP across nodes)."""


import pytest

from planner.catalog import ACCELERATORS, GIB
from planner.disks import choose_weights_disk, disk_read_mib_s, weights_load_seconds
from planner.errors import ConfigError
from planner.kv_cache import bytes_per_token
from planner.layout import candidate_layouts, valid_tensor_sizes
from planner.memory import LOAD_OVERHEAD_GIB, RESERVE_GIB
from planner.memory_fit import FITTED
from planner.model_config import parse_hf_config
from tests.helpers import accel, model, settings, sizing

G2 = ACCELERATORS["nvidia-l4"].machine("g2-standard-8")



def arch(name):
    return settings(model=model(name), accelerator=accel("nvidia-h200-141gb")).model.architecture


@pytest.mark.parametrize("name,billions", [("Llama-3.1-8B-Instruct", 8.03), ("Llama-3.1-70B-Instruct", 70.55),
                                           ("Llama-3.1-405B-Instruct", 405.85), ("Mixtral-8x7B-Instruct-v0.1", 46.70),
                                           ("Qwen2.5-7B-Instruct", 7.62)])
def test_parameter_count_matches_published_sizes_counting_every_expert(name, billions):
    assert arch(name).parameter_count() / 1e9 == pytest.approx(billions, abs=0.02)


def test_kv_bytes_per_token_follow_the_formula_and_replicate_kv_heads_beyond_tp():
    a = arch("Llama-3.1-70B-Instruct")  # 80 layers, 8 KV heads, head_dim 128
    assert bytes_per_token(a, tp=1, pp=1, kv_dtype_bytes=2) == 2 * 80 * 8 * 128 * 2
    assert bytes_per_token(a, tp=4, pp=2, kv_dtype_bytes=2) == 2 * 40 * 2 * 128 * 2
    assert bytes_per_token(a, tp=16, pp=1, kv_dtype_bytes=1) == 2 * 80 * 1 * 128 * 1


def test_dev_stack_is_llama_8b_on_one_l4_with_tp1():
    s = sizing()
    assert (s.nodes_per_replica, s.tensor_parallel_size, s.pipeline_parallel_size) == (1, 1, 1)
    assert s.weights_gib == pytest.approx(14.96, abs=0.01)
    # vLLM 0.32.0 (the default image): Model Runner V2 keeps its CUDA graphs out of the KV cache, and the cache is
    # whole 16-token blocks of all 32 layers. An L4 runs 256 sequences / 2048 batched tokens, outside the settings
    # the activation-peak parts were fitted at, so the measured dense reserve applies.
    # 0.32.0's estimate of them adds what its second FULL sample released: two split-KV accumulators of the
    # 248-sequence decode (32 splits x 248 x 32 heads x 128 x float32, 124 MiB each), and 1 MiB for each of the 34
    # further FULL graphs (planner/memory.py full_graph_extrapolation_bytes).
    released = (2 * 32 * 248 * 32 * 128 * 4 + 34 * 2**20) / GIB
    graphs = (FITTED.graphs_plain_base_gib + FITTED.graphs_plain_per_khidden_gib * 4096 / 1000
              + FITTED.graphs_plain_per_100_pieces_gib * 32 / 100 + released)  # 32 attention layers, one a piece
    assert s.engine_profile == "0.32.0" and s.cudagraph_gib_per_gpu == pytest.approx(graphs, abs=0.01)
    rotary = 131072 * 128 * 2 / GIB  # the llama3 rope's cos/sin cache: 131,072 positions x head_dim 128, bf16
    usable = 23_034 / 1024 * 0.9 - 14.96 - LOAD_OVERHEAD_GIB - rotary - RESERVE_GIB - graphs
    # (weights_gib is rounded to 0.01 GiB: a few blocks either way)
    assert s.kv_cache_tokens_per_replica == pytest.approx(usable * GIB // (16 * 2 * 32 * 8 * 128 * 2) * 16, abs=64)


def test_llama_70b_on_a3_highgpu_8g_takes_tp4_on_one_node():
    s = sizing(model=model("Llama-3.1-70B-Instruct"), accelerator=accel("nvidia-h100-80gb", "a3-highgpu-8g"))
    assert (s.nodes_per_replica, s.tensor_parallel_size, s.pipeline_parallel_size) == (1, 4, 1)
    assert s.gpus_per_pod == 4, "single-node replicas request TP GPUs"


def test_llama_70b_on_l4_nodes_goes_pipeline_parallel_across_five_nodes():
    s = sizing(model=model("Llama-3.1-70B-Instruct"), accelerator=accel("nvidia-l4", "g2-standard-24"))
    # vLLM 0.32.0 keeps its CUDA graphs (1.56 GiB at hidden 8192) out of each L4's KV cache: four nodes of two L4s
    # no longer hold one 131,072-token sequence, five do.
    assert (s.nodes_per_replica, s.tensor_parallel_size, s.pipeline_parallel_size) == (5, 2, 5)
    assert s.gpus_per_pod == 2, "multi-node replicas take whole nodes"
    assert (s.min_nodes, s.max_nodes) == (5, 10), "node bounds are replicas x nodes per replica"
    old = sizing(model=model("Llama-3.1-70B-Instruct"), accelerator=accel("nvidia-l4", "g2-standard-24"),
                 vllm={"image": "vllm/vllm-openai:v0.25.1"})
    assert old.nodes_per_replica == 4, "vLLM 0.25.1 kept no graph memory out of the cache: four nodes did"


def test_llama_405b_fits_one_h200_node_at_tp8():
    s = sizing(model=model("Llama-3.1-405B-Instruct"), accelerator=accel("nvidia-h200-141gb"))
    assert (s.nodes_per_replica, s.tensor_parallel_size) == (1, 8)


def test_mixtral_counts_all_experts_and_splits_them_whole_over_four_h100s():
    s = sizing(model=model("Mixtral-8x7B-Instruct-v0.1"), accelerator=accel("nvidia-h100-80gb", "a3-highgpu-8g"))
    assert s.weights_gib == pytest.approx(86.99, abs=0.05)
    one_gpu = next(o for o in s.layouts_compared if o.gpus == 1)
    assert one_gpu.kv_tokens_per_engine == 0, "one copy of 87 GiB does not fit an 80 GB GPU"
    assert (s.tensor_parallel_size, s.data_parallel_size, s.expert_parallel) == (1, 4, True)
    assert s.gpus_per_replica == s.gpus_per_pod == 4
    # 32 layers x 8 experts x 3 x 4,096 x 14,336 bf16 = 84.0 GiB of routed experts, 2 to a GPU; the other 3.0 GiB
    # (attention, embeddings, routers) on every GPU.
    routed = 32 * 8 * 3 * 4096 * 14336 * 2 / 2**30
    assert s.weights_gib_per_gpu == pytest.approx(s.weights_gib - routed + routed / 4, abs=0.1)


def test_llama_8b_tp1_on_a_t4_is_refused_for_memory_with_a_layout_that_fits():
    with pytest.raises(ConfigError) as err:
        sizing(accelerator=accel("nvidia-tesla-t4"), parallelism={"tensor": 1})
    msg = str(err.value)
    assert msg.startswith("vllm-gke:parallelism.tensor = 1")
    assert "weights per GPU" in msg and "a layout that fits" in msg
    assert "tensor=2, pipeline=1 on 1 node of n1-standard-16" in msg


def test_tp3_for_32_heads_is_refused_naming_the_valid_sizes():
    with pytest.raises(ConfigError) as err:
        sizing(parallelism={"tensor": 3})
    assert str(err.value).startswith("vllm-gke:parallelism.tensor = 3")
    assert "use 1, 2, 4 or 8" in str(err.value)


def test_tensor_parallel_across_nodes_is_refused_in_favour_of_pipeline():
    with pytest.raises(ConfigError) as err:
        sizing(model=model("Llama-3.1-70B-Instruct"), accelerator=accel("nvidia-l4", "g2-standard-24"),
               parallelism={"tensor": 8})
    assert "use tensor=2 and pipeline=4" in str(err.value)


def test_partial_nodes_are_refused():
    with pytest.raises(ConfigError) as err:
        sizing(model=model("Llama-3.1-70B-Instruct"), accelerator=accel("nvidia-l4", "g2-standard-96"),
               parallelism={"tensor": 4, "pipeline": 3})
    assert str(err.value).startswith("vllm-gke:parallelism.pipeline = 3") and "whole nodes" in str(err.value)


def test_pipeline_beyond_the_layer_count_is_refused():
    with pytest.raises(ConfigError, match="only 32 layers"):
        sizing(parallelism={"tensor": 1, "pipeline": 40})


def test_a_context_longer_than_the_kv_cache_is_refused_on_max_model_len():
    with pytest.raises(ConfigError) as err:
        sizing(vllm={"maxModelLen": 65536}, parallelism={"tensor": 1})
    assert str(err.value).startswith("vllm-gke:vllm.maxModelLen = 65536")
    assert "vLLM would refuse" in str(err.value)


def test_explicit_layout_wins_over_the_automatic_one():
    s = sizing(model=model("Llama-3.1-70B-Instruct"), accelerator=accel("nvidia-h100-80gb", "a3-highgpu-8g"),
               parallelism={"tensor": 8})
    assert (s.tensor_parallel_size, s.layout_source) == (8, "config")


def test_fp8_kv_cache_doubles_the_token_capacity():
    base = sizing(parallelism={"tensor": 1})
    fp8 = sizing(parallelism={"tensor": 1}, vllm={"kvCacheDtype": "fp8"})
    assert fp8.kv_cache_tokens_per_replica == pytest.approx(2 * base.kv_cache_tokens_per_replica, rel=0.001)


def test_weights_gib_overrides_the_computed_size():
    assert sizing(model={**model("Llama-3.1-8B-Instruct"), "weightsGib": 9.5}).weights_gib == 9.5


def test_a_model_too_big_for_any_layout_names_the_remedies():
    with pytest.raises(ConfigError) as err:
        sizing(model=model("Llama-3.1-405B-Instruct"), accelerator=accel("nvidia-tesla-t4"),
               vllm={"maxModelLen": 131072})
    assert str(err.value).startswith("vllm-gke:model.id")


def test_load_estimate_grows_with_weights_and_drops_with_hyperdisk_ml():
    a3 = {"model": model("Llama-3.1-70B-Instruct"), "accelerator": accel("nvidia-h100-80gb", "a3-highgpu-8g")}
    pd = sizing(**a3, weights={"diskType": "pd-ssd"})
    hd = sizing(**a3, weights={"diskType": "hyperdisk-ml", "loadSeconds": 40})
    small = sizing()
    assert hd.estimated_load_seconds < pd.estimated_load_seconds
    assert hd.disk_read_mib_s == int(hd.weights_gib * 1024 / 40), "Hyperdisk ML is provisioned for the target"
    assert pd.disk_read_mib_s == min(1_200, int(240 + 0.48 * pd.weights_disk_gib)), "pd-ssd: 240 MiB/s + 0.48 per GiB"
    assert pd.startup_probe_seconds >= 2 * pd.estimated_load_seconds
    assert small.weights_disk_gib * GIB >= small.weights_gib * GIB * 1.15


def test_the_load_formula_per_disk_type():
    """One formula (weights_load_seconds) over the per-VM read rate of each type (disk_read_mib_s)."""
    g2, a3 = G2, ACCELERATORS["nvidia-h100-80gb"].machine("a3-highgpu-8g")
    ten_gib = 10 * GIB
    assert weights_load_seconds(ten_gib, 1, disk_read_mib_s("pd-balanced", 100, g2)) == pytest.approx(10240 / 168)
    assert weights_load_seconds(ten_gib, 1, disk_read_mib_s("pd-ssd", 100, g2)) == pytest.approx(10240 / 288)
    assert disk_read_mib_s("pd-ssd", 5_000, g2) == 800, "capped per VM: g2-standard-8 has 8 vCPUs"
    assert weights_load_seconds(ten_gib, 2, disk_read_mib_s("hyperdisk-ml", 100, a3, 1_000)) == pytest.approx(5.12)
    assert disk_read_mib_s("hyperdisk-ml", 100, a3, 9_000) == 4_000, "capped per VM on A3"


def test_the_cheapest_disk_that_meets_the_load_target_is_chosen():
    dev = sizing()
    # 14.96 GiB in 60 s is 255 MiB/s: pd-ssd's 240 baseline + 0.48 per GiB needs 32 GiB; weights + 15% + 10 is 28
    assert (dev.weights_disk_type, dev.weights_disk_gib) == ("pd-ssd", 40) and dev.weights_load_seconds <= 60
    assert dev.weights_disk_usd_month == pytest.approx(40 * 0.17)
    fast = settings(weights={"loadSeconds": 20})
    weights = fast.model.weights_gib * GIB if fast.model.weights_gib else dev.weights_gib * GIB
    chosen, options = choose_weights_disk(fast, weights, G2, 1, 1)
    by_type = {o.disk_type: o for o in options}
    assert set(by_type) == {"pd-ssd", "pd-balanced", "hyperdisk-ml"}
    assert all(o.load_seconds <= 20.5 for o in options), "each type sized or provisioned for the target"
    assert chosen == min(options, key=lambda o: o.usd_month) and chosen.disk_type == "hyperdisk-ml"
    assert by_type["pd-ssd"].size_gib > 900, "a pd-ssd reaches ~690 MiB/s only at ~940 GiB"


def test_a_target_no_disk_reaches_takes_the_fastest_and_warns_with_its_time():
    s = sizing(weights={"loadSeconds": 5})
    assert s.weights_disk_type == "hyperdisk-ml" and s.disk_read_mib_s == 2_400, "G2's Hyperdisk ML cap per VM"
    warning = next(w for w in s.warnings if "weights.loadSeconds" in w)
    assert "(5 s)" in warning and f"takes {s.weights_load_seconds} s" in warning


def test_a_70b_stack_on_a3_highgpu_loads_within_two_minutes_by_default():
    s = sizing(model=model("Llama-3.1-70B-Instruct"), accelerator=accel("nvidia-h100-80gb", "a3-highgpu-8g"))
    assert s.weights_load_seconds <= 60 <= 120, s
    assert s.weights_disk_type == "hyperdisk-ml", "a Persistent Disk reads at most 1,200 MiB/s per A3 VM: 112 s"
    assert not [w for w in s.warnings if "loadSeconds" in w]


def test_valid_tensor_sizes_respect_kv_heads():
    qwen = arch("Qwen2.5-7B-Instruct")  # 28 heads, 4 KV heads
    assert valid_tensor_sizes(qwen, 8) == [1, 2, 4]
    odd = parse_hf_config({"num_hidden_layers": 2, "hidden_size": 768, "num_attention_heads": 12,
                           "num_key_value_heads": 6, "vocab_size": 100, "max_position_embeddings": 64},
                          "odd", "model.architecture")
    assert valid_tensor_sizes(odd, 12) == [1, 2, 3, 6, 12]


def test_candidate_layouts_keep_tp_inside_a_node_and_fill_whole_nodes():
    layouts = candidate_layouts(arch("Llama-3.1-70B-Instruct"), gpus_per_node=2)
    assert layouts[0].gpus == 1
    for lay in layouts:
        assert lay.tp <= 2
        assert lay.nodes == 1 or lay.gpus == lay.nodes * 2


def test_replicas_beyond_what_the_node_pool_may_grow_to_are_refused():
    with pytest.raises(ConfigError) as err:
        sizing(model=model("Llama-3.1-70B-Instruct"), accelerator=accel("nvidia-l4", "g2-standard-24"),
               autoscaling={"maxReplicas": 300}, weights={"diskType": "hyperdisk-ml"})
    assert str(err.value).startswith("vllm-gke:autoscaling.maxReplicas = 300") and "use at most 200" in str(err.value)


def test_more_nodes_than_a_persistent_disk_attaches_to_are_refused_naming_hyperdisk_ml():
    with pytest.raises(ConfigError) as err:
        sizing(autoscaling={"maxReplicas": 11}, weights={"diskType": "pd-ssd"})
    assert "at most 10 VMs" in str(err.value) and "hyperdisk-ml" in str(err.value)
    assert sizing(autoscaling={"maxReplicas": 11}).weights_disk_type == "hyperdisk-ml", "chosen when not forced"


def test_hyperdisk_ml_throughput_changes_only_when_the_pool_doubles():
    """A Hyperdisk ML volume takes one throughput change per 4 hours; main re-provisioned on every maxReplicas edit."""
    from planner.disks import hyperdisk_throughput

    assert [hyperdisk_throughput(4_000, n) for n in (1, 2, 3, 4, 5, 8)] == [4_000, 8_000, 16_000, 16_000, 32_000,
                                                                            32_000]
    assert hyperdisk_throughput(100, 1) == 400, "the smallest a volume takes"
    assert hyperdisk_throughput(4_000, 2_500) == 1_200_000, "the largest"


def test_the_dev_stack_loads_its_weights_within_a_minute_from_pd_ssd():
    """With pd-ssd's 240 MiB/s baseline (main counted 0) the dev stack's 15 GiB load in under 60 s on g2-standard-8."""
    dev = sizing("dev")
    assert dev.weights_disk_type == "pd-ssd" and dev.disk_read_mib_s == int(240 + 0.48 * dev.weights_disk_gib)
    assert dev.weights_load_seconds <= 60
    assert dev.estimated_load_seconds == dev.weights_load_seconds + dev.engine_start_cold_seconds


def test_time_to_ready_adds_its_steps_and_feeds_the_probe_and_the_smoke_wait():
    dev, prod = sizing("dev"), sizing("prod")
    for s in (dev, prod):
        steps = s.node_provisioning_seconds + s.image_pull_seconds + s.weights_load_seconds
        assert abs(s.time_to_ready_cold_seconds - steps - s.engine_start_cold_seconds) <= 1
        assert abs(s.time_to_ready_warm_seconds - steps - s.engine_start_warm_seconds) <= 1
        assert s.time_to_ready_warm_seconds < s.time_to_ready_cold_seconds, "a published compile cache helps"
        assert s.smoke_wait_seconds == s.startup_probe_seconds + 900 + s.image_pull_seconds_without_streaming
    # join wait (multi-node only) + twice the cold load estimate + 60 s, in whole probe periods
    for s, join in ((dev, 0), (prod, 600)):
        budget = join + 2 * s.estimated_load_seconds + 60
        assert budget - 1 <= s.startup_probe_seconds < budget + 11
    assert prod.engine_start_cold_seconds > dev.engine_start_cold_seconds, "two nodes: the Ray group forms first"
    off = sizing("dev", vllm={"compileCache": False})
    assert off.engine_start_warm_seconds == off.engine_start_cold_seconds, "no cache, no warm start"
    assert "not measured on nvidia-l4" in dev.engine_start_source
    h200 = sizing(accelerator=accel("nvidia-h200-141gb"))
    assert h200.engine_start_source.startswith("measured on H200")


def test_engine_start_figures_are_the_gpu_runs_less_the_weights_read():
    """planner/catalog.py's ENGINE_START_SECONDS come from docs/benchmarks/results.json: one node from the starts with
    today's launcher defaults (`bench/run.py levers`), two nodes from `bench/run.py startup`; seconds to /health less
    the weights read (~2 s from the page cache)."""
    import json
    from pathlib import Path
    from statistics import mean

    from bench.levers_report import TODAY, engine_seconds, rows_of
    from planner.catalog import ENGINE_START_SECONDS

    results = json.loads((Path(__file__).parents[2] / "docs" / "benchmarks" / "results.json").read_text())
    measured = {(r["nodes"] > 1, r["cache"] == "warm"): r["seconds_to_health"] - 2 for r in results["startup"]
                if r["cache"] in ("cold", "warm") and "error" not in r and r["nodes"] > 1}
    runs = results["startup_levers"]["runs"]
    for warm, phase, least in ((False, "cold", 2), (True, "warm", 6)):
        starts = [engine_seconds(row) for _, row in rows_of(runs, TODAY, phase)]
        assert len(starts) >= least, f"the one-node {phase} figure rests on at least {least} starts"
        measured[(False, warm)] = mean(starts)
    assert set(measured) == set(ENGINE_START_SECONDS)
    for key, seconds in measured.items():
        assert abs(seconds - ENGINE_START_SECONDS[key]) <= 1, (key, seconds)
