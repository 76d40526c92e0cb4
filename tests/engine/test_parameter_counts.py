"""The planner's parameter count of a family is the count of the model transformers builds from the same config
(decoders, and the vision tower with its projector of multimodal ones).

transformers' own default config of each decoder family the planner sizes, built on torch's meta device (no memory,
no weights): the planner's sum of parts (attention, MLP or experts and shared experts, router, embeddings, norms)
must equal the built model's parameters. Weights the planner leaves out are KV tokens it promises that vLLM does not
have; weights it adds are tokens it withholds."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from planner.model_config import parse_hf_config  # noqa: E402
from tests.helpers import (  # noqa: E402
    DECODER_FAMILIES,
    HYBRIDS,
    KIMI_LINEAR,
    config_json,
    family_default_config,
    hybrid_config,
)

FAMILIES = (*DECODER_FAMILIES, "llama4_text", "gptj", "qwen3_5_text", "qwen3_5_moe_text", "nemotron_h",
            "granitemoehybrid", "deepseek_v32", "glm_moe_dsa", "kimi_linear", "falcon_h1", "bloom", "falcon")
# vLLM's Llama 4 and Qwen3.5 import torchvision (which the test venv leaves out), and vLLM 0.32.0's ModelConfig finds no
# KV-head count in GPT-J's config (n_head), so only this test has them.
"""Each was read exactly after the fixes this test found: ERNIE 4.5's MoE keys (planned 85% light), Llama 4's shared
expert and dense width (5.6% light), the families whose MLP has no gate (27-37% heavy; GPT-J 31% and
Nemotron-Mini-4B 22%, found by building every causal-LM family transformers and vLLM share) and Qwen3.5's attention
output gate (1.5% light)."""


SMALL_VOCABULARY_TOLERANCE = {"bloom": 0.07}
"""How far the count may be under a family's 1,024-token build, and why: BLOOM's biases (every linear layer and norm
has one; the count leaves biases out) are 6% of its 64-wide default and 0.02% of bloom-7b1
(test_published_configs_count_what_transformers_builds); a gated MLP counted on it is 20% over."""


def built_parameters(model_type: str) -> tuple[dict, int]:
    config = family_default_config(model_type)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    return ({**config_json(config, model_type), "architectures": [type(model).__name__]},
            sum(p.numel() for p in model.parameters()))


@pytest.mark.parametrize("model_type", FAMILIES)
def test_the_planner_counts_the_parameters_transformers_builds(model_type):
    config, built = built_parameters(model_type)
    planned = parse_hf_config(config, model_type, "model.configFile").parameter_count()
    assert planned == pytest.approx(built, rel=5e-4), f"{planned / 1e9:.3f}B planned, {built / 1e9:.3f}B built"


@pytest.mark.parametrize("model_type", FAMILIES)
def test_the_layers_count_what_transformers_builds_where_the_vocabulary_does_not_hide_them(model_type):
    """The same with a 1,024-token vocabulary: on a family's default config the embeddings can outweigh the layers
    (BLOOM's default: 250,880 x 64), so a layer miscounted by a third hid within 5e-4 (its MLP counted as gated,
    found by a GPU run: bench/configs/bloom-7b1.json, docs/benchmarks.md validation 14)."""
    config = family_default_config(model_type)
    config.vocab_size = 1024
    if isinstance(config.pad_token_id, int) and config.pad_token_id >= 1024:
        config.pad_token_id = 0
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    built = sum(p.numel() for p in model.parameters())
    planned = parse_hf_config({**config_json(config, model_type), "architectures": [type(model).__name__]}, model_type,
                              "model.configFile").parameter_count()
    assert planned == pytest.approx(built, rel=SMALL_VOCABULARY_TOLERANCE.get(model_type, 5e-4)), \
        f"{planned / 1e6:.2f}M planned, {built / 1e6:.2f}M built"


@pytest.mark.parametrize("name", ["bloom-7b1", "falcon-7b", "lfm2-1.2b", "lfm2-8b-a1b", "minimax-m2-fp8"])
def test_published_configs_count_what_transformers_builds(name):
    import json
    from pathlib import Path

    raw = json.loads((Path(__file__).resolve().parents[2] / "bench" / "configs" / f"{name}.json").read_text())
    config = transformers.CONFIG_MAPPING[raw["model_type"]](**{k: v for k, v in raw.items() if k != "model_type"})
    with torch.device("meta"):
        built = sum(p.numel() for p in transformers.AutoModelForCausalLM.from_config(config).parameters())
    assert parse_hf_config(raw, name, "model.configFile").parameter_count() == pytest.approx(built, rel=5e-4)


def test_a_gate_the_family_has_is_counted_and_one_it_lacks_is_not():
    gated, _ = built_parameters("llama")
    plain, _ = built_parameters("starcoder2")
    wide = parse_hf_config(gated, "l", "x")
    assert wide.mlp_matrices == 3 and parse_hf_config(plain, "s", "x").mlp_matrices == 2
    narrow = parse_hf_config({**gated, "model_type": "starcoder2"}, "l", "x")
    h, i, layers = wide.hidden_size, wide.intermediate_size, wide.num_layers
    assert wide.parameter_count() - narrow.parameter_count() == layers * h * i


GLM5_NEXT = {"shaped like GLM-5.3-Flash": {},
             "8 layers, pools of 8, 2 streams": {"num_hidden_layers": 8, "index_kpool": 8, "hc_mult": 2}}


def glm5_next_built(text: dict) -> tuple[dict, int]:
    """bench/configs/glm-5.3-flash.json with `text` fields changed, and the parameters of the language model
    transformers builds from it (Glm5NextForConditionalGeneration; transformers has no causal-LM class for it)."""
    import json
    from pathlib import Path

    from planner.layers import cut_layers

    raw = json.loads((Path(__file__).resolve().parents[2] / "bench" / "configs" / "glm-5.3-flash.json").read_text())
    raw = cut_layers(raw, text.get("num_hidden_layers", raw["text_config"]["num_hidden_layers"]))
    raw["text_config"] = {**raw["text_config"], **text}
    config = transformers.CONFIG_MAPPING[raw["model_type"]](**{k: v for k, v in raw.items() if k != "model_type"})
    with torch.device("meta"):
        model = transformers.AutoModelForImageTextToText.from_config(config)
    return raw, sum(p.numel() for n, p in model.named_parameters()
                    if "language_model" in n or n.startswith("lm_head"))


@pytest.mark.parametrize("name", sorted(GLM5_NEXT))
def test_glm5_next_weights_are_the_language_model_transformers_builds(name):
    """KDA and latent-attention layers, the pooled indexer's pooling weights, the hyper-connections' mixing weights,
    288 experts; a mutation that drops the hyper-connections is off."""
    raw, built = glm5_next_built(GLM5_NEXT[name])
    arch = parse_hf_config(raw, "glm-5.3-flash", "model.configFile")
    planned = arch.parameter_count() - arch.vision_parameters
    assert planned == built, f"{planned / 1e9:.3f}B planned, {built / 1e9:.3f}B built"
    plain = replace(arch, hyper_connections=0)
    assert plain.parameter_count() - plain.vision_parameters != built


VISION = {
    # model_type: how far (relative) the planner's tower + projector may be from the built one. Exact where the
    # family's tower is written out (planner/layers.py vision_parameters: Qwen2-VL's embed_dim, Qwen3-VL's deepstack
    # mergers, Pixtral's gated MLP and Mistral 3's projector, GLM-4V's merger, Mllama's global layers and tiles);
    # the generic CLIP/SigLIP/InternViT/Llama 4 reading is under by the share named, 7-40M parameters (0.08 GiB).
    "qwen2_vl": 0.005, "qwen2_5_vl": 0.005, "qwen3_vl": 0.005, "qwen3_vl_moe": 0.005, "mistral3": 0.005,
    "paligemma": 0.005, "glm4v": 0.005, "mllama": 0.005, "qwen3_5": 0.005, "qwen3_5_moe": 0.005,
    "gemma3": 0.08, "glm5_next": 0.08, "llava": 0.06, "llava_onevision": 0.05, "internvl": 0.10, "llama4": 0.09,
}


@pytest.mark.parametrize("model_type", sorted(VISION))
def test_the_planner_counts_the_vision_tower_transformers_builds(model_type):
    config = transformers.CONFIG_MAPPING[model_type]()
    with torch.device("meta"):
        model = transformers.AutoModelForImageTextToText.from_config(config)
    built = sum(p.numel() for n, p in model.named_parameters()
                if "language_model" not in n and not n.startswith("lm_head"))
    planned = parse_hf_config({**config.to_dict(), "architectures": [type(model).__name__]}, model_type,
                              "model.configFile").vision_parameters
    assert planned == pytest.approx(built, rel=VISION[model_type]), f"{planned / 1e6:.1f}M planned, {built / 1e6:.1f}M"


@pytest.mark.parametrize("name", sorted(HYBRIDS))
def test_mamba2_hybrids_count_the_parameters_transformers_builds(name):
    """NemotronH (a layer is one block: Mamba-2 mixer, attention, MLP or experts, one norm; experts and MLP without
    a gate) and Granite 4.0-H (a Mamba-2 or attention mixer beside experts and a shared MLP, or the shared MLP alone),
    each as its config.json gives it."""
    arch, hf_config = hybrid_config(name)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf_config)
    built = sum(p.numel() for p in model.parameters())
    assert arch.parameter_count() == built, f"{arch.parameter_count() / 1e9:.4f}B planned, {built / 1e9:.4f}B built"


def test_kimi_linear_as_its_config_json_writes_it_counts_what_transformers_builds():
    """Kimi Linear's checkpoint config keeps its KDA layers in linear_attn_config (1-based lists) and its first dense
    layer in first_k_dense_replace, which transformers turns into layer_types and mlp_layer_types."""
    config = transformers.CONFIG_MAPPING["kimi_linear"](**{k: v for k, v in KIMI_LINEAR.items() if k != "model_type"})
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    arch = parse_hf_config(KIMI_LINEAR, "kimi-linear", "model.configFile")
    assert arch.parameter_count() == sum(p.numel() for p in model.parameters())
    assert (arch.moe_layers, arch.num_shared_experts, arch.experts_per_token) == (26, 1, 8)


@pytest.mark.parametrize("name", ["gemma-4-e2b", "gemma-4-31b", "gemma-4-26b-a4b"])
def test_gemma4_counts_what_vllm_allocates_of_what_transformers_builds(name):
    """Gemma 4's per-layer head dims, KV-shared layers (q and o only), double-wide MLP and per-layer input
    embeddings as transformers builds them, plus the V projection vLLM allocates for attention_k_eq_v layers
    (vllm/model_executor/models/gemma4.py loads K into both slots; transformers builds no v_proj there)."""
    import json
    from pathlib import Path

    raw = json.loads((Path(__file__).resolve().parents[2] / "bench" / "configs" / f"{name}.json").read_text())
    config = transformers.CONFIG_MAPPING["gemma4_text"](**{k: v for k, v in raw.items() if k != "model_type"})
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    arch = parse_hf_config(raw, name, "model.configFile")
    kv_heads, head_dim = arch.global_attention
    own_cache = arch.num_layers - arch.kv_shared_layers
    v_for_k = sum(kind == "full" for kind in arch.kinds[:own_cache]) * arch.hidden_size * kv_heads * head_dim
    assert arch.parameter_count() == sum(p.numel() for p in model.parameters()) + (
        v_for_k if raw.get("attention_k_eq_v") else 0)


@pytest.mark.parametrize("name", ["gemma-3n-e4b", "gemma-3n-e2b"])
def test_gemma3n_counts_what_transformers_builds(name):
    """Gemma 3n's decoder as transformers builds it, which is what vLLM allocates (vllm/model_executor/models/
    gemma3n.py): KV-shared layers with q and o only, per-layer input embeddings, AltUp and LAuReL in every layer, the
    AltUp projections. Its checkpoints' K and V tensors of the shared layers are dropped (_kv_sharing_weights_mapper):
    held_copies gives them none and every other tensor one."""
    import json
    from pathlib import Path

    from planner.checkpoint import held_copies

    raw = json.loads((Path(__file__).resolve().parents[2] / "bench" / "configs" / f"{name}.json").read_text())
    config = transformers.CONFIG_MAPPING["gemma3n_text"](**{k: v for k, v in raw.items() if k != "model_type"})
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    arch = parse_hf_config(raw, name, "model.configFile")
    assert arch.parameter_count() == sum(p.numel() for p in model.parameters())
    first_shared = arch.num_layers - arch.kv_shared_layers
    names = [f"model.language_model.layers.{i}.self_attn.{proj}.weight" for i in (first_shared - 1, first_shared)
             for proj in ("q_proj", "k_proj", "v_proj", "k_norm")]
    tensors = {name: {} for name in names}
    assert [held_copies(n, tensors, arch) for n in names] == [1, 1, 1, 1, 1, 0, 0, 0]


ONE_RANK = '''
import json, socket, sys, tempfile
from pathlib import Path
import torch
from vllm.config import VllmConfig, set_current_vllm_config
from vllm.distributed import init_distributed_environment, initialize_model_parallel
from tests.helpers import vllm_model_config

with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
with set_current_vllm_config(VllmConfig()):
    init_distributed_environment(1, 0, f"tcp://127.0.0.1:{port}", 0, "gloo")
    initialize_model_parallel(1, 1)
'''
"""The head of a script that builds vLLM 0.32.0's own modules on the meta device: the tensor-parallel group they
need, one rank over gloo (run in a fresh process, as vLLM's groups are process-wide)."""

NAS_LAYERS = ONE_RANK + '''
import types
from transformers import LlamaConfig
from vllm.model_executor.models.nemotron_nas import DeciLMDecoderLayer

raw = json.loads(Path(sys.argv[1]).read_text())
config = LlamaConfig(**{k: v for k, v in raw.items() if k not in ("block_configs", "model_type", "intermediate_size",
                                                                   "num_key_value_heads")})
config.block_configs = [types.SimpleNamespace(**{part: types.SimpleNamespace(**fields) for part, fields in b.items()})
                        for b in raw["block_configs"]]
# a plain Llama config.json gives the VllmConfig the attention backend needs (the dtype); the layers are config's
model = vllm_model_config(json.loads(Path("models/Llama-3.2-1B-Instruct.json").read_text()), Path(tempfile.mkdtemp()))
with torch.device("meta"), set_current_vllm_config(VllmConfig(model_config=model)):
    print(json.dumps([sum(p.numel() for p in DeciLMDecoderLayer(config, i, prefix=f"model.layers.{i}").parameters())
                      for i in range(raw["num_hidden_layers"])]))
'''


def test_a_nas_decoder_counts_what_vllm_builds_of_each_layer():
    """Each layer of a nemotron-nas config as vLLM 0.32.0's own DeciLMDecoderLayer builds it on the meta device (in a
    fresh process: the layer needs vLLM's tensor-parallel group, here one rank over gloo): attention of the block's KV
    heads or none, an MLP of _ffn_mult_to_intermediate_size or none, a norm before each. transformers has no class for
    the family (its config and model are remote code), so vLLM's is the reference."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    config = root / "bench" / "configs" / "nemotron-super-49b.json"
    done = subprocess.run([sys.executable, "-c", NAS_LAYERS, str(config)], cwd=root, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    per_layer = json.loads(done.stdout.strip().splitlines()[-1])
    raw = json.loads(config.read_text())
    arch = parse_hf_config(raw, config.stem, "model.configFile")
    h, vocab = raw["hidden_size"], raw["vocab_size"]
    assert 0 in per_layer and len(set(per_layer)) > 3, "no-op layers and layers of several shapes"
    assert arch.parameter_count() == sum(per_layer) + 2 * vocab * h + h  # + embeddings, lm_head, final norm


VLLM_BUILT = ONE_RANK + '''
import importlib

module, name = sys.argv[1].split(":")
cls = getattr(importlib.import_module(module), name)
counts = []
for path in sys.argv[2:]:
    config = VllmConfig(model_config=vllm_model_config(json.loads(Path(path).read_text()), Path(tempfile.mkdtemp())))
    with torch.device("meta"), set_current_vllm_config(config):
        counts.append(sum(p.numel() for p in cls(vllm_config=config, prefix="").parameters()))
print(json.dumps(counts))
'''


def vllm_built(model_class: str, names: list[str]) -> list[tuple[dict, int]]:
    """(config.json, parameters) of bench/configs `names` as vLLM 0.32.0's own `model_class` ("module:Class")
    builds them on the meta device, in a fresh process (the model needs vLLM's tensor-parallel group: one rank over
    gloo)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    paths = [root / "bench" / "configs" / f"{name}.json" for name in names]
    done = subprocess.run([sys.executable, "-c", VLLM_BUILT, model_class, *map(str, paths)], cwd=root,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    built = json.loads(done.stdout.strip().splitlines()[-1])
    return [(json.loads(path.read_text()), count) for path, count in zip(paths, built, strict=True)]


def test_zamba2_counts_what_vllm_builds():
    """Zamba2 as vLLM 0.32.0's own Zamba2ForCausalLM builds it: num_mem_blocks shared attention-and-MLP blocks, each
    hybrid layer's adapters and linear, a Mamba-2 mixer in every layer, the head tied to the input table. Both shapes:
    with and without the attention adapters; transformers' Zamba2ForCausalLM builds the same counts."""
    names = ["zamba2-7b", "zamba2-2.7b"]
    for name, (raw, count) in zip(names, vllm_built("vllm.model_executor.models.zamba2:Zamba2ForCausalLM", names),
                                  strict=True):
        arch = parse_hf_config(raw, name, "model.configFile")
        assert arch.parameter_count() == count, f"{name}: planner {arch.parameter_count()}, vLLM {count}"
        config = transformers.CONFIG_MAPPING["zamba2"](**{k: v for k, v in raw.items() if k != "model_type"})
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(config)
        assert sum(p.numel() for p in model.parameters()) == count


def test_longcat_flash_counts_what_vllm_builds():
    """LongCat-Flash as vLLM 0.32.0's own LongcatFlashForCausalLM builds it (its class is the reference: transformers'
    differs in its expert layout): per layer two latent-attention blocks, two dense MLPs, four norms and the routed
    experts, the router as wide as routed and zero-computation experts together, which hold no weights."""
    [(raw, count)] = vllm_built("vllm.model_executor.models.longcat_flash:LongcatFlashForCausalLM", ["longcat-flash"])
    arch = parse_hf_config(raw, "longcat-flash", "model.configFile")
    assert not arch.unsized and arch.zero_experts == 256 and len(arch.kinds) == 2 * arch.num_layers
    assert arch.parameter_count() == count, f"planner {arch.parameter_count()}, vLLM {count}"


def test_hrm_text_counts_what_vllm_builds():
    """HRM-Text as vLLM 0.32.0's own HrmTextForCausalLM builds it: two stacks of num_layers_per_stack layers (gated MHA
    attention, a gated MLP, weightless norms) and z_L_init, whatever the number of runs num_hidden_layers counts."""
    [(raw, count)] = vllm_built("vllm.model_executor.models.hrm_text:HrmTextForCausalLM", ["hrm-text-1b"])
    arch = parse_hf_config(raw, "hrm-text-1b", "model.configFile")
    assert not arch.unsized and arch.weight_layers == 32 and arch.num_layers == 128
    assert arch.parameter_count() == count, f"planner {arch.parameter_count()}, vLLM {count}"


BAILING_BUILT = ONE_RANK + '''
import importlib

from transformers import PretrainedConfig
from vllm.transformers_utils.configs.bailing_moe_v3_vl import BailingMoeV3TextConfig

module, name = sys.argv[1].split(":")
cls = getattr(importlib.import_module(module), name)
# Ling 3.0 through vLLM's own text config class; Ling 2.5's is remote code: config.json's fields as they are
config_class = BailingMoeV3TextConfig if name == "BailingMoeV3ForCausalLM" else PretrainedConfig
counts = []
for fields in json.loads(sys.argv[3]):
    raw = {**json.loads(Path(sys.argv[2]).read_text()), **fields}
    # a plain Llama config.json gives the VllmConfig its dtype; the model reads the Bailing config
    model = vllm_model_config(json.loads(Path("models/Llama-3.2-1B-Instruct.json").read_text()),
                              Path(tempfile.mkdtemp()))
    model.hf_config = model.hf_text_config = config_class(**{k: v for k, v in raw.items() if k != "model_type"})
    config = VllmConfig(model_config=model)
    with torch.device("meta"), set_current_vllm_config(config):
        counts.append(sum(p.numel() for p in cls(vllm_config=config, prefix="").parameters()))
print(json.dumps(counts))
'''


def bailing_built(model_class: str, name: str, variants: list[dict]) -> list[tuple[dict, int]]:
    """(config.json, parameters) of bench/configs `name` with each variant's fields as vLLM 0.32.0's own
    `model_class` builds it on the meta device, in a fresh process (one tensor-parallel rank over gloo)."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    path = root / "bench" / "configs" / f"{name}.json"
    done = subprocess.run([sys.executable, "-c", BAILING_BUILT, model_class, str(path), json.dumps(variants)],
                          cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    built = json.loads(done.stdout.strip().splitlines()[-1])
    base = json.loads(path.read_text())
    return [({**base, **fields}, count) for fields, count in zip(variants, built, strict=True)]


LING3_VARIANTS = [{}, {"num_hidden_layers": 22, "gated_attention_proj_granularity_type": "element_wise"},
                  {"q_lora_rank": None, "gated_attention_proj_granularity_type": None, "first_k_dense_replace": 3,
                   "moe_shared_expert_intermediate_size": 1024, "num_shared_experts": 2}]
"""bench/configs/ling-3.0-tiny.json and two variants: a last partial layer group with an element-wise attention gate;
no query LoRA, no gate, three dense layers and two shared experts of another width."""


def test_ling3_counts_what_vllm_builds():
    """Ling 3.0 as vLLM 0.32.0's own BailingMoeV3ForCausalLM builds it on the meta device (from vLLM's
    BailingMoeV3TextConfig: transformers has no class for it): Kimi Delta Attention layers with full-width f and g
    projections, latent attention with its output gate, the routers' expert_bias, shared experts of
    moe_shared_expert_intermediate_size x num_shared_experts. Kimi's low-rank f and g counted instead miss."""
    for raw, count in bailing_built("vllm.model_executor.models.bailing_moe_v3:BailingMoeV3ForCausalLM",
                                    "ling-3.0-tiny", LING3_VARIANTS):
        arch = parse_hf_config(raw, "ling-3.0-tiny", "model.configFile")
        assert not arch.unsized and arch.kda_full_gates and arch.parameter_count() == count, \
            f"{raw}: planner {arch.parameter_count()}, vLLM {count}"
        assert replace(arch, kda_full_gates=False).parameter_count() != count
        assert replace(arch, router_bias=False).parameter_count() != count


LING25_VARIANTS = [{}, {"num_hidden_layers": 30, "layer_group_size": 4, "use_qk_norm": False, "q_lora_rank": None,
                        "moe_router_enable_expert_bias": False, "score_function": "softmax",
                        "moe_shared_expert_intermediate_size": 2048, "num_shared_experts": 2,
                        "first_k_dense_replace": 2}]
"""bench/configs/ling-2.5-shaped.json and a variant: groups of 4 over 30 layers (a partial last group, whose layers
are linear attention), no q / k norms, no query LoRA, no router bias, two shared experts of another width, two dense
layers."""


def test_ling25_counts_what_vllm_builds():
    """Ling 2.5 as vLLM 0.32.0's own BailingMoeV25ForCausalLM builds it on the meta device: linear-attention layers
    (an MHA query_key_value, g_proj, dense, the gated output norm, q / k norms with use_qk_norm), latent attention on
    the last layer of each group, the router's expert_bias where moe_router_enable_expert_bias is set, shared experts
    of moe_shared_expert_intermediate_size x num_shared_experts, an lm_head of its own."""
    for raw, count in bailing_built("vllm.model_executor.models.bailing_moe_linear:BailingMoeV25ForCausalLM",
                                    "ling-2.5-shaped", LING25_VARIANTS):
        arch = parse_hf_config(raw, "ling-2.5-shaped", "model.configFile")
        assert not arch.unsized and "lightning" in arch.kinds and arch.parameter_count() == count, \
            f"{raw}: planner {arch.parameter_count()}, vLLM {count}"
        assert replace(arch, lightning=(*arch.lightning[:2], 1 - arch.lightning[2], arch.lightning[3])) \
            .parameter_count() != count


def test_weights_run_more_than_once_are_read_and_multiplied_on_every_run(monkeypatch):
    """HRM-Text runs each of its 32 stack layers 4 times a step (128 runs: hrm_text.py HrmTextModel.forward) and
    Zamba2-7B each of its 2 shared blocks on 13 hybrid layers (zamba2.py): the throughput estimate's decode step
    reads and multiplies those weights once a run, so it is slower than with each weight once."""
    from planner import throughput
    from planner.architecture import ModelArchitecture
    from planner.catalog import ACCELERATORS
    from planner.layout import Layout, fit
    from planner.memory import default_engine, model_weight_bytes

    root = Path(__file__).resolve().parents[2]
    hrm = parse_hf_config(json.loads((root / "bench/configs/hrm-text-1b.json").read_text()), "hrm", "x")
    h, inter = hrm.hidden_size, hrm.intermediate_size
    assert hrm.rerun_parameters() == (128 - 32) * (5 * h * h + 3 * h * inter)  # gate, q, k, v, o; gated MLP
    zamba = parse_hf_config(json.loads((root / "bench/configs/zamba2-7b.json").read_text()), "zamba", "x")
    h, inter = zamba.hidden_size, zamba.intermediate_size
    assert zamba.rerun_parameters() == (13 - 2) * (2 * h * 6 * h + 2 * h * h + 3 * h * inter)
    acc = ACCELERATORS["nvidia-h200-141gb"]
    for arch in (hrm, zamba):
        engine = default_engine(acc, "0.32.0")
        weights = model_weight_bytes(arch, "auto")
        got = fit(arch, acc, Layout(1, 1, 1), 0.9, weights, 2.0, 2048, engine)
        work = throughput.Workload(1000, 200)
        rerun = throughput.estimate(arch, acc, Layout(1, 1, 1), weights, got, engine, work)
        with monkeypatch.context() as mp:
            mp.setattr(ModelArchitecture, "rerun_parameters", lambda self: 0)
            once = throughput.estimate(arch, acc, Layout(1, 1, 1), weights, got, engine, work)
        assert rerun.decode_step_seconds > once.decode_step_seconds
        assert rerun.tokens_per_s_per_gpu < once.tokens_per_s_per_gpu


GEMMA4_TOWERS = {
    "gemma-4-31B-it's vision tower": ({}, None),
    "a smaller vision tower": ({"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 16,
                                "num_attention_heads": 12, "num_key_value_heads": 4, "head_dim": 64, "patch_size": 14},
                               None),
    "with an audio tower": ({}, {}),
    "with a smaller audio tower": ({}, {"hidden_size": 512, "num_hidden_layers": 6, "num_attention_heads": 4,
                                        "conv_kernel_size": 3, "subsampling_conv_channels": [64, 16],
                                        "output_proj_dims": 768}),
}


@pytest.mark.parametrize("name", sorted(GEMMA4_TOWERS))
def test_gemma4_towers_count_what_transformers_builds(name):
    """Gemma 4's vision tower (a gated MLP, q and k norms, a 2-D position table) and audio tower (conformer blocks,
    a convolutional subsampler), each with the projection into the decoder: everything transformers' Gemma 4 builds
    beside the language model, which vLLM builds the same way (AutoModel.from_config). The planner counted the vision
    MLP as two matrices (157M parameters, 0.29 GiB, under) before."""
    import json
    from pathlib import Path

    raw = json.loads((Path(__file__).resolve().parents[2] / "models" / "gemma-4-31B-it.json").read_text())
    vision, audio = GEMMA4_TOWERS[name]
    raw["vision_config"] = {**raw["vision_config"], **vision}
    if audio is not None:
        raw["audio_config"] = {**transformers.CONFIG_MAPPING["gemma4_audio"]().to_dict(), **audio}
    config = transformers.CONFIG_MAPPING["gemma4"](**{k: v for k, v in raw.items() if k != "model_type"})
    with torch.device("meta"):
        model = transformers.AutoModelForImageTextToText.from_config(config)
    built = sum(p.numel() for n, p in model.named_parameters()
                if "language_model" not in n and not n.startswith("lm_head"))
    planned = parse_hf_config(raw, "gemma-4", "model.configFile").vision_parameters
    assert planned == built, f"{planned / 1e6:.3f}M planned, {built / 1e6:.3f}M built"


@pytest.mark.parametrize("audio", [False, True])
def test_gemma4_unified_counts_what_transformers_builds(audio):
    """Gemma 4 Unified (transformers' defaults, with the encoder-free vision config's and, with `audio`, the audio
    config's): the decoder as Gemma 4's, and the embedder vLLM's gemma4_unified.py builds (Gemma4UnifiedVisionEmbedder,
    the multimodal embedders' projections; transformers builds the same parameters), exactly. vLLM's module imports
    torchvision, which the test venv leaves out, so transformers' build is the reference."""
    from transformers import CONFIG_MAPPING

    audio_config = CONFIG_MAPPING["gemma4_unified_audio"]().to_dict() if audio else None
    config = CONFIG_MAPPING["gemma4_unified"](vision_config=CONFIG_MAPPING["gemma4_unified_vision"]().to_dict(),
                                              audio_config=audio_config)
    with torch.device("meta"):
        model = transformers.AutoModelForImageTextToText.from_config(config)
    names = dict(model.named_parameters())
    decoder = sum(p.numel() for n, p in names.items() if "language_model" in n or n.startswith("lm_head"))
    raw = json.loads(json.dumps({**config.to_dict(), "architectures": [type(model).__name__]}, default=str))
    arch = parse_hf_config(raw, "gemma-4-unified", "model.configFile")
    assert not arch.unsized and arch.vision_parameters == sum(p.numel() for p in names.values()) - decoder
    assert arch.parameter_count() - arch.vision_parameters == decoder



DSV4_VARIANTS = [{}, {"num_hidden_layers": 5}, {"num_hidden_layers": 7, "num_hash_layers": 0, "o_groups": 4,
                                                 "index_n_heads": 32, "n_shared_experts": 2}]
"""bench/configs/deepseek-v4-flash-shaped.json (without its quantization, so each weight is one parameter) and two
cuts: 5 layers (2 sliding-window, 2 at ratio 4, 1 at 128), and 7 with no hash-routed layer, 4 output groups, 32
indexer heads and two shared experts."""


def test_deepseek_v4_counts_what_vllm_builds(tmp_path):
    """DeepSeek V4 as vLLM 0.32.0's own DeepseekV4ForCausalLM builds it on the meta device (the platform's module:
    on this machine's CPU build vllm/models/deepseek_v4/cpu, whose weights are the GPU module's): the fused q_a / kv
    projection, wq_b, the grouped output projection, the attention sink, compressors at ratio 4 and 128, the indexer
    at 4, hyper-connections before attention and experts and at the head, the hash-routed layers' token table in the
    router's place; and its two float32 rotary caches (the sliding-window layers' and the compressed layers'), which
    the planner weighs with the weights. CPU torch has no CUDA events, which DeepseekV4Attention makes at build: they
    are stubbed."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    base = {k: v for k, v in json.loads((root / "bench" / "configs" / "deepseek-v4-flash-shaped.json").read_text())
            .items() if k not in ("quantization_config", "expert_dtype")}
    paths = []
    for n, fields in enumerate(DSV4_VARIANTS):
        paths.append(tmp_path / f"v{n}.json")
        paths[-1].write_text(json.dumps({**base, **fields}))
    script = "import torch\ntorch.cuda.Event = lambda *args, **kwargs: None\n" + VLLM_BUILT.replace(
        "counts.append(sum(p.numel() for p in cls(vllm_config=config, prefix=\"\").parameters()))",
        "model = cls(vllm_config=config, prefix=\"\")\n"
        "        counts.append([sum(p.numel() for p in model.parameters()), sum(b.numel() * b.element_size() "
        "for n, b in model.named_buffers() if \"cos_sin_cache\" in n)])")
    done = subprocess.run([sys.executable, "-c", script, "vllm.models.deepseek_v4:DeepseekV4ForCausalLM",
                           *map(str, paths)], cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    for fields, (count, rotary) in zip(DSV4_VARIANTS, json.loads(done.stdout.strip().splitlines()[-1]), strict=True):
        arch = parse_hf_config({**base, **fields}, "deepseek-v4", "model.configFile")
        assert not arch.unsized and arch.parameter_count() == count, \
            f"{fields}: planner {arch.parameter_count()}, vLLM {count}"
        assert arch.rotary_cache_elements * 2 == rotary, f"{fields}: rotary caches {rotary} bytes in vLLM"
        assert replace(arch, hash_layers=0).parameter_count() != count or not arch.hash_layers
        assert replace(arch, indexer=(0, 0)).parameter_count() != count


INKLING_BUILT = ONE_RANK + '''
from vllm.models.inkling.nvidia import model as inkling_model, moe as inkling_moe

# What holds no parameter and needs a GPU: the sink experts' CUDA events and the Lamport all-reduce buffers
inkling_moe.torch.cuda.Event = lambda *args, **kwargs: None
inkling_model.initialize_lamport_rs_conv = lambda *args, **kwargs: None
counts = []
for raw in json.loads(sys.argv[1]):
    config = VllmConfig(model_config=vllm_model_config(raw, Path(tempfile.mkdtemp())))
    with torch.device("meta"), set_current_vllm_config(config):
        counts.append(sum(p.numel() for p in inkling_model.InklingForCausalLM(vllm_config=config,
                                                                              prefix="").parameters()))
print(json.dumps(counts))
'''

INKLING_SHAPES = [
    {"q_bias": True, "use_gate_bias": True, "use_global_scale": True, "use_embed_norm": True},
    {"n_routed_experts": 13, "local_layer_ids": [], "dense_mlp_idx": 0},
    {"moe_intermediate_size": 256, "intermediate_size": 1024, "dense_intermediate_size": None, "conv_kernel_size": 3,
     "sconv_kernel_size": None},
]
"""Small Inkling configs in vLLM's own format: every optional weight on; 13 routed experts (the gate padded to 16
rows), every layer full; the Hugging Face format's names (moe_intermediate_size beside intermediate_size,
conv_kernel_size), which InklingModelConfig maps to its own."""


def test_inkling_counts_what_vllm_builds():
    """Inkling as vLLM 0.32.0's own InklingForCausalLM builds it on the meta device (vllm/models/inkling/nvidia,
    read through vLLM's InklingModelConfig): the qkvr projection with its relative logits, wo_ud, the relative-logit
    projection of each layer's extent, four short convolutions and four norms a layer, a dense MLP below
    dense_mlp_idx, the routed and shared sink experts and the padded gate above, the replicated input table and the
    head; exact."""
    import subprocess
    import sys

    base = {"num_hidden_layers": 4, "hidden_size": 512, "num_attention_heads": 8, "num_key_value_heads": 2,
            "head_dim": 64, "swa_num_attention_heads": 4, "swa_num_key_value_heads": 4, "swa_head_dim": 32,
            "sliding_window_size": 128, "sconv_kernel_size": 4, "n_routed_experts": 6, "n_shared_experts": 2,
            "shared_expert_sink": True, "num_experts_per_tok": 2, "intermediate_size": 256,
            "dense_intermediate_size": 1024, "vocab_size": 1024, "dense_mlp_idx": 1, "local_layer_ids": [0, 2],
            "max_position_embeddings": 4096, "torch_dtype": "bfloat16", "model_type": "inkling_model",
            "architectures": ["InklingForCausalLM"]}
    configs = [{k: v for k, v in {**base, **shape}.items() if v is not None} for shape in INKLING_SHAPES]
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", INKLING_BUILT, json.dumps(configs)], cwd=root, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    built = json.loads(done.stdout.strip().splitlines()[-1])
    for raw, count in zip(configs, built, strict=True):
        arch = parse_hf_config(raw, "inkling", "model.configFile")
        assert not arch.unsized and arch.inkling
        assert arch.parameter_count() == count, f"{raw}: planner {arch.parameter_count()}, vLLM {count}"
