"""The rotary cos/sin caches vLLM keeps on every GPU from the load on, counted as vLLM 0.32.0 builds them: for each
config under models/ (multimodal wrappers by their decoder, remote-code configs by the class vLLM has for their
model_type), vLLM's own get_rope is called the way its model files call it and the caches it registers are
counted on torch's meta device; the planner's rotary_cache_elements must be that count."""

import json
from pathlib import Path

import pytest

pytest.importorskip("vllm")
torch = pytest.importorskip("torch")

from bench.calibrate import entry_config, parse_entry  # noqa: E402
from planner.model_config import parse_hf_config  # noqa: E402
from tests.helpers import vllm_model_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MODEL_FILES = sorted((ROOT / "models").glob("*.json"))


def decoder_config(path: Path) -> dict:
    config = {k: v for k, v in json.loads(path.read_text()).items() if k != "auto_map"}
    if "text_config" in config and path.stem not in NEEDS_TORCHVISION:
        return entry_config(*parse_entry(f"{path.relative_to(ROOT)}:text"))
    return config


def vllm_cache_elements(config: dict, tmp_path: Path) -> int:
    """Elements of every cos/sin cache get_rope registers for this config as vLLM's ModelConfig reads it."""
    model = vllm_model_config(config, tmp_path)
    text = model.hf_text_config
    return _cache_elements(model, text, text.qk_rope_head_dim if model.use_mla else model.get_head_size())


def _cache_elements(model, text, head: int) -> int:
    """One get_rope call per distinct parameter set (Gemma 3: one per layer type, vllm/model_executor/models/gemma3.py),
    with head_size = the head size (latent attention: qk_rope_head_dim, not neox style, rope_type deepseek_yarn where
    scaled: deepseek_v2.py) and max_position = max_position_embeddings, on torch's meta device."""
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.rotary_embedding import _ROPE_DICT, get_rope

    params = text.rope_parameters or {}
    nested = params and all(isinstance(v, dict) for v in params.values())
    sets = list(params.items()) if nested else [("", params)]
    mla = getattr(model, "use_mla", False)
    total = 0
    for layer_type, p in sets:
        p = dict(p)
        layer_head = head
        if layer_type in (getattr(text, "layer_types", None) or ()) and getattr(text, "per_layer_config", None):
            # Gemma 4: each layer's attention at per_layer_config[i].head_dim (gemma4.py Gemma4DecoderLayer)
            layer_head = text.per_layer_config[text.layer_types.index(layer_type)].head_dim
        if mla and p.get("rope_type", "default") != "default":
            p["rope_type"] = "deepseek_yarn"
        _ROPE_DICT.clear()
        with torch.device("meta"), set_current_vllm_config(VllmConfig(model_config=model) if model else VllmConfig()):
            rope = get_rope(layer_head, max_position=text.max_position_embeddings, rope_parameters=p,
                            is_neox_style=not mla, dtype=torch.bfloat16)
        total += sum(b.numel() for name, b in rope.named_buffers() if "cos_sin_cache" in name)
    return total


def transformers_cache_elements(config: dict) -> int:
    """The same count where vLLM's ModelConfig cannot load the config here (Qwen2.5-VL: its processor imports
    torchvision, which the test venv leaves out): the decoder config as transformers normalizes it, which is the
    object vLLM's model file reads rope_parameters from (qwen2_5_vl.py -> qwen2.py get_rope, M-RoPE)."""
    import transformers

    text = transformers.AutoConfig.for_model(**config).get_text_config()
    return _cache_elements(None, text, getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads)


NEEDS_TORCHVISION = {"Qwen2.5-VL-7B-Instruct", "Qwen2.5-VL-3B-Instruct", "Qwen3-VL-8B-Instruct", "Qwen3.6-27B"}
NO_ROTARY = {"Kimi-Linear-48B-A3B-Instruct"}
"""Kimi Linear: vLLM 0.32.0 builds it from vllm/models/kimi_k3, whose latent attention is NoPE-only and calls get_rope
only under use_rope, which the model never passes (test_kimi_linear_builds_no_rotary_cache)."""


@pytest.mark.parametrize("path", MODEL_FILES, ids=lambda p: p.stem)
def test_rotary_caches_are_the_ones_vllm_builds(path, tmp_path):
    config = decoder_config(path)
    if path.stem in NO_ROTARY:
        assert parse_hf_config(config, path.stem, "x").rotary_cache_elements == 0
        return
    if path.stem in NEEDS_TORCHVISION:
        assert parse_hf_config(config, path.stem, "x").rotary_cache_elements == transformers_cache_elements(config)
        return
    assert parse_hf_config(config, path.stem, "x").rotary_cache_elements == vllm_cache_elements(config, tmp_path)


def test_a_linear_scaled_rope_caches_factor_times_the_positions():
    """gemma-3-12b's global layers: rope_scaling linear x8 on 131,072 positions and head_dim 256 (0.5 GiB in bf16),
    beside the sliding layers' unscaled cache (64 MiB): what vLLM's load counted over the parameters on the H100."""
    arch = parse_hf_config(decoder_config(ROOT / "models" / "gemma-3-12b-it.json"), "g", "x")
    assert arch.rotary_cache_elements == 131072 * 8 * 256 + 131072 * 256


def test_kimi_linear_builds_no_rotary_cache():
    import inspect

    from vllm.models.kimi_k3.nvidia import mla, model

    assert inspect.signature(mla.MultiHeadLatentAttention.__init__).parameters["use_rope"].default is False
    assert "use_rope" not in inspect.getsource(model)  # the decoder layer builds its MLA with the default


def test_gemma4_full_layers_cache_the_whole_global_head():
    """gemma-4-31B-it: 262,144 positions x (256 on the sliding layers + 512 on the full ones, whose proportional RoPE
    rotates a quarter of the head but caches all of it)."""
    arch = parse_hf_config(decoder_config(ROOT / "models" / "gemma-4-31B-it.json"), "g", "x")
    assert arch.rotary_cache_elements == 262144 * (256 + 512)
