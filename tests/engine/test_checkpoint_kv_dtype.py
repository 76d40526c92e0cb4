"""A KV-cache dtype the checkpoint declares is the cache dtype under --kv-cache-dtype auto, as vLLM 0.32.0 resolves
it (vllm/utils/torch_utils.py get_kv_cache_quant_algo_string for modelopt; attention.py for compressed-tensors'
kv_cache_scheme), and modelopt checkpoints are weighed as vLLM loads them."""

import json
from pathlib import Path

import pytest

from planner.layers import MODELOPT_NVFP4_BYTES_PER_PARAM, checkpoint_kv_cache_dtype
from planner.model_config import parse_hf_config
from planner.sizing import single_gpu_fit
from tests.helpers import sizing

ROOT = Path(__file__).resolve().parents[2]
BASE = json.loads((ROOT / "models" / "Qwen3-8B.json").read_text())
FP8_KV = {"dynamic": False, "num_bits": 8, "type": "float", "strategy": "tensor"}
CONFIGS = {
    "modelopt FP8 weights, FP8 KV": {"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "FP8",
                                     "exclude_modules": ["lm_head"]},
    "modelopt nested, FP8 KV": {"quant_method": "modelopt",
                                "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8",
                                                 "exclude_modules": ["lm_head"]}},
    "modelopt KV scheme dict": {"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_scheme": FP8_KV},
    "modelopt without KV": {"quant_method": "modelopt", "quant_algo": "FP8"},
    "modelopt NVFP4 KV": {"quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_quant_algo": "NVFP4"},
    "fp8 weights only": {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]},
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_modelopt_kv_dtype_is_what_vllm_resolves_under_auto(name):
    from vllm.utils.torch_utils import get_kv_cache_quant_algo_string

    quant = CONFIGS[name]
    theirs = get_kv_cache_quant_algo_string(quant) if quant["quant_method"].startswith("modelopt") else None
    ours = checkpoint_kv_cache_dtype({"quantization_config": quant})
    # vLLM names FP8 fp8_e4m3; NVFP4 KV is one the planner does not size, so it plans the model dtype instead.
    assert ours == {"fp8_e4m3": "fp8", "fp8": "fp8"}.get(theirs or "", "")


def test_a_compressed_tensors_kv_scheme_is_fp8_and_doubles_the_tokens_under_0_32_only():
    ct = json.loads((ROOT / "models" / "Meta-Llama-3.1-8B-Instruct-FP8.json").read_text())
    with_kv = {**ct, "quantization_config": {**ct["quantization_config"], "kv_cache_scheme": FP8_KV}}
    plain, declared = (parse_hf_config(c, "l", "x") for c in ({**ct, "quantization_config": {
        **ct["quantization_config"], "kv_cache_scheme": None}}, with_kv))
    assert (plain.checkpoint_kv_dtype, declared.checkpoint_kv_dtype) == ("", "fp8")
    new = [single_gpu_fit(a, "nvidia-h200-141gb", 0.9, 8192, version="0.32.0").kv_tokens for a in (plain, declared)]
    assert new[1] == pytest.approx(2 * new[0], rel=0.01)
    old = [single_gpu_fit(a, "nvidia-h200-141gb", 0.9, 8192, version="0.25.1").kv_tokens for a in (plain, declared)]
    assert old[0] == old[1]


def test_an_explicit_kv_cache_dtype_wins_over_the_checkpoint(tmp_path):
    path = tmp_path / "fp8kv.json"
    path.write_text(json.dumps({**BASE, "quantization_config": CONFIGS["modelopt FP8 weights, FP8 KV"]}))
    model = {"id": "org/q", "configFile": str(path)}
    auto = sizing(model=model, vllm={"maxModelLen": 8192})
    explicit = sizing(model=model, vllm={"maxModelLen": 8192, "kvCacheDtype": "bfloat16"})
    assert auto.kv_cache_tokens_per_replica == pytest.approx(2 * explicit.kv_cache_tokens_per_replica, rel=0.02)


def test_modelopt_weights_are_fp8_or_nvfp4_except_the_excluded_modules():
    fp8 = parse_hf_config({**BASE, "quantization_config": CONFIGS["modelopt without KV"]}, "q", "x")
    nvfp4 = parse_hf_config({**BASE, "quantization_config": CONFIGS["modelopt nested, FP8 KV"]}, "q", "x")
    assert (fp8.weight_bytes_per_param, nvfp4.weight_bytes_per_param) == (1.0, MODELOPT_NVFP4_BYTES_PER_PARAM)
    fp4_name = {"quant_method": "modelopt_fp4", "quant_algo": "NVFP4", "exclude_modules": ["lm_head"]}
    assert parse_hf_config({**BASE, "quantization_config": fp4_name}, "q", "x").weight_bytes_per_param == \
        MODELOPT_NVFP4_BYTES_PER_PARAM
    assert fp8.quantized_parts == {"attention", "mlp"}
    wildcard = {**CONFIGS["modelopt without KV"], "exclude_modules": ["lm_head", "model.layers.*.self_attn*"]}
    no_attention = parse_hf_config({**BASE, "quantization_config": wildcard}, "q", "x")
    assert no_attention.quantized_parts == {"mlp"}
    first_two = {**CONFIGS["modelopt without KV"], "exclude_modules": ["model.layers.0.", "model.layers.1."]}
    share = dict(parse_hf_config({**BASE, "quantization_config": first_two}, "q", "x").quantized_share)
    assert share["mlp"] == pytest.approx(34 / 36)
    assert fp8.weight_bytes(2.0) < 0.6 * parse_hf_config(BASE, "q", "x").weight_bytes(2.0)


def test_an_unknown_modelopt_algorithm_is_refused_naming_it():
    from planner.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        parse_hf_config({**BASE, "quantization_config": {"quant_method": "modelopt", "quant_algo": "W4A8_AWQ"}},
                        "q", "model.configFile")
    assert err.value.value == "W4A8_AWQ" and "model.weightsGib" in str(err.value)
