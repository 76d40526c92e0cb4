"""Every family vLLM 0.32.0 serves plans, or says in one line what the plan cannot verify.

The families: each model_type whose config class builds a default config, of the architectures vLLM 0.32.0
registers for generation (its registry's text-generation and multimodal models, matched to transformers' causal-LM
and image-text-to-text classes) and of the config classes vLLM ships itself (vllm/transformers_utils/configs). Each
default config is planned on an 8 x H200 node as a user's config.json would be:

- most plan, with no warning that a layer structure is unsized;
- UNSIZED families have a layer structure the planner does not size yet: they plan too, the layout chosen with every
  layer's KV cache counted as full attention or taken as stated, with a one-line warning of what is not verified;
- the rest are listed with why the default config is no deployable decoder, or the planner's known gap.

A family the installed transformers or vLLM adds lands in the first group and must plan, or be listed here.
"""

from __future__ import annotations

import json

import pytest

from planner.errors import ConfigError
from planner.model_config import parse_hf_config
from tests.helpers import SHAPED, accel, sizing

pytest.importorskip("torch")
pytest.importorskip("vllm")

UNSIZED = {
    "qwen4_exp": "Qwen4's query-sparse attention without latent attention",
    "qwen4_exp_text": "Qwen4's query-sparse attention without latent attention",
}
"""Families the planner does not size yet (planner/layers.py UNSIZED_KEYS and unknown layer_types)."""

NOT_DEPLOYABLE = {
    "eagle": "a speculative-decoding draft (EAGLE): vLLM serves it beside a target model only",
    "k3_dspark": "a speculative-decoding draft (Kimi K3's DSpark)",
    "medusa": "a speculative-decoding draft (Medusa heads)",
    "mlp_speculator": "a speculative-decoding draft (MLP speculator)",
    "speculators": "a speculative-decoding draft (the speculators format)",
    "muse_glimmer_vision": "the vision tower's own config, not a model",
    "modernvbert": "an embedding model (ModernVBERT) whose default config sets sliding layers without a window",
    "deepseek_v4": "transformers' default config writes layer_types, and vLLM's DeepseekV4Attention reads "
                   "compress_ratios, which it leaves out",
    "deepseek_v41": "its default config has no decoder: checkpoints nest it in text_config",
    "ovis": "its default config has no decoder: checkpoints carry it in llm_config",
    "ultravox": "its default config names the decoder by text_model_id, a second checkpoint",
    "longcat_flash": "vLLM's LongcatMoe asserts zero_expert_type, which transformers' default config leaves unset",
    "bailing_moe_v3_vl": "vLLM's BailingMoeV3 Kimi Delta Attention raises without no_kda_lora, which the default "
                         "text config leaves false",
    "gemma4_unified": "vLLM's Gemma4UnifiedForConditionalGeneration raises without a vision_config, which the "
                      "default config leaves out",
    "inkling_text": "vLLM 0.32.0's InklingForCausalLM does not build from transformers' InklingTextConfig (no "
                    "padded_vocab_size, local_layer_ids or dense_mlp_idx); vLLM serves Inkling in its own format",
    "inkling_model": "vLLM's InklingMoE asserts n_shared_experts > 0 and shared_expert_sink, which the default config "
                     "(0 routed experts, none shared) lacks in every layer from dense_mlp_idx 0",
}
"""Default configs that are no deployable decoder: each is refused in one line naming the key."""

KNOWN_GAPS: dict[str, str] = {}
"""vLLM serves these and the planner refuses them: the gaps, each in one line naming the key (issue 42)."""


def families() -> dict[str, tuple[type, str | None]]:
    """model_type -> (config class, architecture) for every family named in the module docstring."""
    from transformers import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
    )
    from vllm.model_executor.models.registry import _MULTIMODAL_MODELS, _TEXT_GENERATION_MODELS
    from vllm.transformers_utils.config import _CONFIG_REGISTRY

    registered = set(_TEXT_GENERATION_MODELS) | set(_MULTIMODAL_MODELS)
    out: dict[str, tuple[type, str | None]] = {}
    for names in (MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES):
        for model_type, architecture in names.items():
            if architecture in registered and model_type in CONFIG_MAPPING:
                out.setdefault(model_type, (CONFIG_MAPPING[model_type], architecture))
    for model_type in list(_CONFIG_REGISTRY.keys()):
        out.setdefault(model_type, (_CONFIG_REGISTRY[model_type], None))
    return out


FAMILIES = families()


def default_config(model_type: str) -> dict | None:
    """The family's default config as config.json would hold it; None where its class builds none by default."""
    cls, architecture = FAMILIES[model_type]
    try:
        config = cls().to_dict()
    except Exception:  # a draft config that needs its target model, a class with required arguments
        return None
    config["model_type"] = model_type
    if architecture and not config.get("architectures"):
        config["architectures"] = [architecture]
    return json.loads(json.dumps(config, default=str))


def plan(config: dict, tmp_path, **sections):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    context = parse_hf_config(config, "m", "model.configFile").context
    model = {"id": f"org/{config['model_type']}", "configFile": str(path), **sections.pop("model", {})}
    return sizing(model=model, accelerator=accel("nvidia-h200-141gb", "a3-ultragpu-8g"),
                  vllm={"maxModelLen": min(4096, context)}, **sections)


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_every_family_vllm_serves_plans_or_names_what_it_cannot(model_type, tmp_path):
    config = default_config(model_type)
    if config is None:
        assert model_type in NOT_DEPLOYABLE, f"{model_type}: its config class builds no default config"
        return
    if model_type in NOT_DEPLOYABLE or model_type in KNOWN_GAPS:
        with pytest.raises(ConfigError) as refused:
            plan(config, tmp_path)
        assert "\n" not in str(refused.value), "one line"
        return
    if model_type in UNSIZED:
        chosen = plan(config, tmp_path)
        assert chosen.kv_cache_tokens_per_replica > 0 and chosen.weights_gib_per_gpu > 0
        [warning] = [w for w in chosen.warnings if "does not size yet" in w]
        assert "counted as full attention" in warning and "\n" not in warning
        heads = parse_hf_config(config, "m", "model.configFile").num_attention_heads
        tensor = next(tp for tp in (8, 4, 2, 1) if heads % tp == 0)
        s = plan(config, tmp_path, parallelism={"tensor": tensor}, model={"weightsGib": 200})
        assert any("does not size yet" in w for w in s.warnings), s.warnings
        return
    s = plan(config, tmp_path)
    assert s.kv_cache_tokens_per_replica >= s.max_model_len
    assert not any("does not size yet" in w for w in s.warnings), s.warnings


def test_the_lists_name_only_families_vllm_serves():
    listed = set(UNSIZED) | set(NOT_DEPLOYABLE) | set(KNOWN_GAPS)
    assert listed <= set(FAMILIES), sorted(listed - set(FAMILIES))
    assert len(FAMILIES) > 150, "the registries were read"


def built_language_model(model_type: str) -> tuple[dict, int] | None:
    """(config, parameters of the decoder transformers builds) for a family whose default config transformers builds
    on the meta device with a 1,024-token vocabulary (where the embeddings no longer hide the layers); None where it
    builds none."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    cls, architecture = FAMILIES[model_type]
    causal = model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES  # else an image-text-to-text model
    try:
        config = cls()
        for part in (config, getattr(config, "text_config", None)):
            if part is not None and getattr(part, "vocab_size", None):
                part.vocab_size = 1024
            if part is not None and isinstance(getattr(part, "pad_token_id", None), int) and part.pad_token_id >= 1024:
                part.pad_token_id = 0
        with torch.device("meta"):
            model = (AutoModelForCausalLM if causal else AutoModelForImageTextToText).from_config(config)
    except Exception:  # a class whose default config transformers cannot build (missing timm, a None width)
        return None
    names = dict(model.named_parameters())
    wrapped = any("language_model" in name for name in names)  # a multimodal model: its decoder alone
    built = sum(p.numel() for name, p in names.items()
                if not wrapped or "language_model" in name or name.startswith("lm_head"))
    architectures = [architecture or type(model).__name__]
    return {**config.to_dict(), "model_type": model_type, "architectures": architectures}, built


BUILT = sorted(t for t, (_, architecture) in FAMILIES.items() if architecture)


@pytest.mark.parametrize("model_type", BUILT)
def test_every_family_that_plans_counts_the_decoder_transformers_builds_within_the_weights_bound(model_type):
    """A family that plans without an unsized warning has its decoder's parameters within 3% (the weights bound of
    docs/benchmarks.md) of transformers' build: a layer read wrong plans silently otherwise (LFM2's convolutions read
    as attention, +40%; Cosmos 3 Edge's squared-ReLU MLP as gated, +37%; AFMoE's and MuseGlimmer's attention gates
    left out, -2% and -6%). The 1-2% left on GPT-2, OPT and BLIP-2 are learned position embeddings and biases."""
    if model_type in UNSIZED or model_type in NOT_DEPLOYABLE or model_type in KNOWN_GAPS:
        return
    found = built_language_model(model_type)
    if found is None:
        return
    config, built = found
    arch = parse_hf_config(json.loads(json.dumps(config, default=str)), model_type, "model.configFile")
    planned = arch.parameter_count() - arch.vision_parameters
    assert not arch.unsized and planned == pytest.approx(built, rel=0.03), \
        f"{planned / 1e6:.1f}M planned, {built / 1e6:.1f}M built"


# ------------------------------------------------------------------------------------------ pipeline parallelism


def test_the_classes_served_without_pipeline_parallelism_are_vllms():
    """planner/layout.py NO_PIPELINE_ARCHITECTURES equals the classes of vLLM 0.32.0 without SupportsPP, for every
    family here whose class loads in this environment (a few multimodal modules need torchvision, which it lacks)."""
    from vllm.model_executor.models.interfaces import supports_pp
    from vllm.model_executor.models.registry import ModelRegistry

    from planner.layout import NO_PIPELINE_ARCHITECTURES

    checked, wrong = set(), []
    for model_type, (_, architecture) in sorted(FAMILIES.items()):
        cls = ModelRegistry._try_load_model_cls(architecture) if architecture else None
        if cls is None:
            continue
        checked.add(architecture)
        if supports_pp(cls) == (architecture in NO_PIPELINE_ARCHITECTURES):
            wrong.append((model_type, architecture, "SupportsPP" if supports_pp(cls) else "no SupportsPP"))
    assert not wrong, wrong
    assert checked >= NO_PIPELINE_ARCHITECTURES and len(checked) >= 80


MAMBA2 = json.loads((SHAPED / "mamba-codestral-7b.json").read_text())


def test_a_model_vllm_serves_without_pipeline_parallelism_plans_without_it(tmp_path):
    from planner.layout import candidate_layouts

    arch = parse_hf_config(MAMBA2, "m", "model.configFile")
    assert {layout.pp for layout in candidate_layouts(arch, 8)} == {1}
    with pytest.raises(ConfigError, match=r"parallelism\.pipeline.*Mamba2ForCausalLM without pipeline") as refused:
        plan(MAMBA2, tmp_path, parallelism={"tensor": 1, "pipeline": 2})
    assert "\n" not in str(refused.value)
    assert plan(MAMBA2, tmp_path, parallelism={"tensor": 4}).tensor_parallel_size == 4


def test_a_tensor_size_the_mamba_mixer_cannot_split_is_refused_naming_it(tmp_path):
    """MambaMixer2 asserts TP divides its heads and its groups (or there is one group); MambaMixer splits its width
    with divide()."""
    with pytest.raises(ConfigError, match=r"parallelism\.tensor.*Mamba-2 mixers of 128 heads in 8 groups, which 3 "
                                          r"does not divide; use 1, 2, 4 or 8"):
        plan(MAMBA2, tmp_path, parallelism={"tensor": 3})
    falcon = json.loads((SHAPED / "falcon-mamba-7b.json").read_text())
    with pytest.raises(ConfigError, match=r"Mamba mixers 8192 wide, which 3 does not divide"):
        plan(falcon, tmp_path, parallelism={"tensor": 3})
    jamba = json.loads((SHAPED / "jamba-1.5-mini.json").read_text())
    assert plan(jamba, tmp_path, parallelism={"tensor": 8}).tensor_parallel_size == 8


def test_an_inkling_checkpoint_in_vllms_own_format_plans_sized(tmp_path):
    """Inkling as vLLM's InklingModelConfig reads it (the checkpoint's own format, not transformers' layer_types): an
    expert model vLLM builds (shared sink experts, local layers) plans sized, each layer its attention (full, or a
    sliding window for local_layer_ids) and its conv state, without the warning that a layer is unsized. A config
    whose tower vLLM builds (decoder_dmodel) keeps the one-line warning naming it; an output bias, which vLLM's
    RowParallelLinear refuses unreduced, and a float16 model, which InklingConvState refuses, are refused naming the
    key."""
    from vllm.models.inkling.configs import InklingModelConfig

    from planner.architecture import EVERY_STAGE
    from planner.layout import Layout
    from planner.memory import counted_groups, weights_split

    config = InklingModelConfig(n_routed_experts=64, n_shared_experts=1, shared_expert_sink=True,
                                num_experts_per_tok=4, local_layer_ids=[0, 1, 2, 4, 5, 6], use_sconv=True).to_dict()
    config = json.loads(json.dumps({**config, "model_type": "inkling_model",
                                    "architectures": ["InklingForCausalLM"]}, default=str))
    arch = parse_hf_config(config, "m", "model.configFile")
    assert arch.kinds[::2] == ("sliding",) * 3 + ("full",) + ("sliding",) * 3 + ("full",) * 9
    assert set(arch.kinds[1::2]) == {"sconv"} and not arch.unsized
    groups = counted_groups(arch)
    table = arch.vocab_size * arch.hidden_size * 2.0  # InklingReplicatedEmbedding: whole on every tensor rank
    assert any(g.position == EVERY_STAGE and g.rule == "replicated" and g.bytes > table for g in groups)
    whole = sum(g.bytes for g in groups if g.rule == "replicated")
    one, two = (sum(weights_split(arch, Layout(tp, 1, 1), arch.weight_bytes(2.0))) for tp in (1, 2))
    assert two - one / 2 == pytest.approx(whole / 2) and whole > table
    chosen = plan(config, tmp_path)
    assert chosen.kv_cache_tokens_per_replica >= chosen.max_model_len
    assert not any("does not size yet" in w for w in chosen.warnings), chosen.warnings
    wrapper = {"model_type": "inkling_mm_model", "architectures": ["InklingForConditionalGeneration"],
               "text_config": config, "vision_config": {"decoder_dmodel": 1536, "patch_size": 16}}
    [warning] = [w for w in plan(wrapper, tmp_path, parallelism={"tensor": 4}).warnings if "does not size yet" in w]
    assert "vision_config.decoder_dmodel" in warning and "\n" not in warning
    with pytest.raises(ConfigError, match=r"o_bias must be false") as refused:
        plan({**config, "o_bias": True}, tmp_path)
    assert "\n" not in str(refused.value)
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match=r"vllm\.dtype = float16: .*bfloat16"):
        sizing(model={"id": "org/inkling", "configFile": str(tmp_path / "config.json")},
               accelerator=accel("nvidia-h200-141gb", "a3-ultragpu-8g"), vllm={"dtype": "float16", "maxModelLen": 4096})


def test_a_ling3_wrapper_plans_its_decoder_and_tower_sized(tmp_path):
    """Bailing V3 VL (vllm/model_executor/models/bailing_moe_v3_vl.py) with no_kda_lora, as its checkpoints set it:
    its decoder is Ling 3.0's (Kimi Delta Attention and latent attention by layer_group_size; text_config names no
    architecture, its config class gives BailingMoeV3ForCausalLM) and its tower Qwen3's without the deepstack
    mergers: transformers' Qwen3-VL tower so configured, less its own merger's two linear layers, plus Bailing's
    LayerNorm merger and two-layer projector into the decoder, within 0.1% (the tower's biases, which the count leaves
    out). It plans on the 8 x H200 node without a warning that a layer is unsized."""
    import torch
    from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLVisionConfig
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionModel

    config = default_config("bailing_moe_v3_vl")
    config["text_config"] = {**config["text_config"], "no_kda_lora": True}
    config["text_config"].pop("architectures")
    arch = parse_hf_config(config, "m", "model.configFile")
    assert not arch.unsized and arch.kinds.count("kda") == 16 and arch.kinds.count("full") == 4
    vision = config["vision_config"]
    tower = Qwen3VLVisionConfig(**{k: v for k, v in vision.items() if k != "model_type"})
    tower.deepstack_visual_indexes = []
    with torch.device("meta"):
        model = Qwen3VLVisionModel(tower)
    merged, text = vision["hidden_size"] * vision["spatial_merge_size"] ** 2, config["text_config"]["hidden_size"]
    built = (sum(p.numel() for n, p in model.named_parameters() if not n.startswith("merger.linear"))
             # transformers' merger LayerNorm is as wide as Bailing's
             + merged * text + text + text * text + text)
    assert arch.vision_parameters == pytest.approx(built, rel=0.001)
    s = plan(config, tmp_path)
    assert s.kv_cache_tokens_per_replica >= s.max_model_len
    assert not any("does not size yet" in w for w in s.warnings), s.warnings
    from vllm.transformers_utils.configs.bailing_moe_v3_vl import _build_layer_types

    with pytest.raises(ValueError):  # the wrapper's config class refuses a group the text model alone would take
        _build_layer_types(20, -4)
    config["text_config"] = {**config["text_config"], "layer_group_size": -4}
    with pytest.raises(ConfigError) as refused:
        parse_hf_config(config, "m", "model.configFile")
    assert "text_config.layer_group_size" in str(refused.value) and "\n" not in str(refused.value)



DSV4 = json.loads((SHAPED / "deepseek-v4-flash-shaped.json").read_text())


def test_deepseek_v4_plans_sized_and_counts_the_model_transformers_builds(tmp_path):
    """DeepSeek V4 read as vLLM's own config class keeps config.json (compress_ratios per layer): 2 sliding-window
    layers, 21 compressed at 4 with an indexer, 20 at 128, every one an MoE layer; its parameters within 0.01% of
    transformers' build of the same config (which folds compress_ratios into layer_types), 284.3B as V4-Flash is
    published. It plans on the 8 x H200 node without a warning that a layer is unsized, the weights counted with
    FP8 linear layers and MXFP4 experts (expert_dtype fp4)."""
    import torch
    from transformers import AutoModelForCausalLM

    cls, _ = FAMILIES["deepseek_v4"]
    arch = parse_hf_config(DSV4, "m", "model.configFile")
    assert (arch.kinds.count("swa"), arch.kinds.count("csa"), arch.kinds.count("hca")) == (2, 21, 20)
    assert not arch.unsized and arch.moe_layers == 43 and arch.expert_bytes_per_param < arch.weight_bytes_per_param
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cls(**{k: v for k, v in DSV4.items() if k != "model_type"}))
    built = sum(p.numel() for p in model.parameters())
    assert arch.parameter_count() == pytest.approx(built, rel=1e-4) and round(built / 1e9, 1) == 284.3
    s = plan(DSV4, tmp_path)
    assert s.kv_cache_tokens_per_replica >= s.max_model_len
    assert not any("does not size yet" in w for w in s.warnings), s.warnings


@pytest.mark.parametrize(("change", "key"), [
    ({"compress_ratios": None}, "compress_ratios"),
    ({"compress_ratios": [0, 0, 2] + [4] * 41}, "compress_ratios[2]"),
    ({"sliding_window": None}, "sliding_window"),
    ({"o_groups": None}, "o_groups"),
    ({"expert_dtype": "int4"}, "expert_dtype"),
])
def test_a_deepseek_v4_config_vllm_refuses_is_refused_naming_the_key(change, key):
    config = {k: v for k, v in {**DSV4, **change}.items() if v is not None}
    with pytest.raises(ConfigError) as refused:
        parse_hf_config(config, "m", "model.configFile")
    assert key in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.parametrize(("section", "key"), [
    ({"vllm": {"kvCacheDtype": "bfloat16"}}, "vllm.kvCacheDtype"),
    ({"accelerator": accel("nvidia-a100-80gb", "a2-ultragpu-8g")}, "accelerator.type"),
])
def test_deepseek_v4_settings_vllm_refuses_are_refused_in_one_line(section, key, tmp_path):
    """vLLM keeps V4's cache in FlashMLA's fp8_ds_mla layout, fp8 only (_resolve_dsv4_kv_cache_dtype), and FlashMLA's
    sparse DSV4 backend serves compute capability 9 and 10 only."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(DSV4))
    model = {"id": "org/deepseek_v4", "configFile": str(path)}
    settings = {"accelerator": accel("nvidia-h200-141gb", "a3-ultragpu-8g"), "vllm": {"maxModelLen": 8192}}
    for name, value in section.items():
        settings[name] = {**settings[name], **value} if name == "vllm" else value
    with pytest.raises(ConfigError) as refused:
        sizing(model=model, **settings)
    assert str(refused.value).startswith(f"vllm-gke:{key} = "), str(refused.value)
    assert "\n" not in str(refused.value)


def test_deepseek_v4_on_vllm_0_25_plans_with_what_it_cannot_verify(tmp_path):
    """vLLM 0.25.1 groups V4's caches by rules of its own (group_and_unify_kv_cache_specs), which the planner does not
    hold: on that image the plan takes the stated parallelism and warns in one line, the weights counted as on 0.32.
    That release refuses --kv-cache-dtype auto for V4 (it asserts FP8), so the plan does too."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(DSV4))
    model = {"id": "org/deepseek_v4", "configFile": str(path)}
    on_032 = sizing(model=model, accelerator=accel("nvidia-h200-141gb", "a3-ultragpu-8g"),
                    vllm={"maxModelLen": 8192}, parallelism={"tensor": 8})
    image = "vllm/vllm-openai:v0.25.1"
    with pytest.raises(ConfigError, match=r"vllm.kvCacheDtype = auto: .* of this image refuses any but fp8"):
        sizing(model=model, accelerator=accel("nvidia-h200-141gb", "a3-ultragpu-8g"),
               vllm={"maxModelLen": 8192, "image": image}, parallelism={"tensor": 8})  # v99 on the GPU host
    on_025 = sizing(model=model, accelerator=accel("nvidia-h200-141gb", "a3-ultragpu-8g"),
                    vllm={"maxModelLen": 8192, "image": image, "kvCacheDtype": "fp8"}, parallelism={"tensor": 8})
    [warning] = [w for w in on_025.warnings if "does not size yet" in w]
    assert "0.25.1" in warning and "\n" not in warning
    assert on_025.weights_gib == on_032.weights_gib and on_025.tensor_parallel_size == 8
