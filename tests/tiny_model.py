"""Build a tiny Llama-architecture model (random weights, locally trained tokenizer), no network."""

from __future__ import annotations

import json
from pathlib import Path

WORDS = ("the a model serves tokens on gpu nodes with ray and vllm cluster kubernetes replica "
         "tensor pipeline parallel cache memory weights disk image hello world answer question").split()


def build_tiny_model(out: Path) -> Path:
    """hidden 256, head_dim 64, 2 layers, vocab 512, context 2048; ~2 MB of bf16 weights."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=["<unk>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    corpus = [" ".join(WORDS[i:] + WORDS[:i]) for i in range(len(WORDS))] * 20
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    fast.chat_template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                          "{% if add_generation_prompt %}assistant: {% endif %}")
    fast.save_pretrained(out)
    config = LlamaConfig(vocab_size=len(fast), hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=2048,
                         bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, tie_word_embeddings=False)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    data = json.loads((out / "config.json").read_text())
    assert data["num_hidden_layers"] == 2
    return out


NAS_CONFIG_CLASS = Path(__file__).resolve().parents[1] / "bench" / "remote_code" / "configuration_decilm.py"
"""The nemotron-nas config class the tiny NAS checkpoint ships as its remote code (bench/calibrate.py's too)."""
NAS_BLOCKS = [  # attention with 2 KV heads and a gated MLP; no attention; attention with 1 KV head and no MLP
    {"attention": {"n_heads_in_group": 2, "no_op": False, "replace_with_linear": False},
     "ffn": {"ffn_mult": 2.0, "no_op": False, "replace_with_linear": False}},
    {"attention": {"n_heads_in_group": None, "no_op": True, "replace_with_linear": False},
     "ffn": {"ffn_mult": 1.0, "no_op": False, "replace_with_linear": False}},
    {"attention": {"n_heads_in_group": 4, "no_op": False, "replace_with_linear": False},
     "ffn": {"ffn_mult": None, "no_op": True, "replace_with_linear": False}},
]


def nas_intermediate(ffn_mult: float, hidden: int) -> int:
    """vLLM's _ffn_mult_to_intermediate_size: int(2 x ffn_mult x hidden / 3) rounded up to a multiple of 256."""
    size = int(2 * ffn_mult * hidden / 3)
    return -(-size // 256) * 256


def build_tiny_nas_model(tiny: Path, out: Path) -> Path:
    """`tiny`'s tokenizer with a three-block Llama-Nemotron (nemotron-nas) decoder whose config class is remote code
    (auto_map -> configuration_decilm.py beside config.json), random bf16 weights named as vLLM's DeciLMForCausalLM
    loads them: what model.trustRemoteCode serves."""
    import shutil

    import torch
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    for item in tiny.iterdir():
        if item.name.startswith("tokenizer") or item.name == "special_tokens_map.json":
            shutil.copy(item, out / item.name)
    base = json.loads((tiny / "config.json").read_text())
    hidden, heads, vocab = base["hidden_size"], base["num_attention_heads"], base["vocab_size"]
    head_dim = hidden // heads
    config = {"architectures": ["DeciLMForCausalLM"], "model_type": "nemotron-nas",
              "auto_map": {"AutoConfig": "configuration_decilm.DeciLMConfig"},
              "block_configs": NAS_BLOCKS, "hidden_size": hidden, "num_attention_heads": heads,
              "num_hidden_layers": len(NAS_BLOCKS), "intermediate_size": base["intermediate_size"],
              "vocab_size": vocab, "max_position_embeddings": base["max_position_embeddings"],
              "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": False,
              "bos_token_id": base["bos_token_id"], "eos_token_id": base["eos_token_id"], "torch_dtype": "bfloat16"}
    (out / "config.json").write_text(json.dumps(config, indent=2))
    shutil.copy(NAS_CONFIG_CLASS, out / "configuration_decilm.py")
    torch.manual_seed(0)

    def weight(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape) * 0.02).to(torch.bfloat16)

    tensors = {"model.embed_tokens.weight": weight(vocab, hidden), "model.norm.weight": torch.ones(hidden).bfloat16(),
               "lm_head.weight": weight(vocab, hidden)}
    for i, block in enumerate(NAS_BLOCKS):
        prefix = f"model.layers.{i}"
        if not block["attention"]["no_op"]:
            kv = heads // block["attention"]["n_heads_in_group"]
            tensors |= {f"{prefix}.input_layernorm.weight": torch.ones(hidden).bfloat16(),
                        f"{prefix}.self_attn.q_proj.weight": weight(heads * head_dim, hidden),
                        f"{prefix}.self_attn.k_proj.weight": weight(kv * head_dim, hidden),
                        f"{prefix}.self_attn.v_proj.weight": weight(kv * head_dim, hidden),
                        f"{prefix}.self_attn.o_proj.weight": weight(hidden, heads * head_dim)}
        if not block["ffn"]["no_op"]:
            inter = nas_intermediate(block["ffn"]["ffn_mult"], hidden)
            tensors |= {f"{prefix}.post_attention_layernorm.weight": torch.ones(hidden).bfloat16(),
                        f"{prefix}.mlp.gate_proj.weight": weight(inter, hidden),
                        f"{prefix}.mlp.up_proj.weight": weight(inter, hidden),
                        f"{prefix}.mlp.down_proj.weight": weight(hidden, inter)}
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out
