"""The weights one GPU holds, planned from a checkpoint's safetensors headers, held to vLLM 0.32.0's own model classes.

Each case is a small checkpoint transformers writes (random weights, bf16, `save_pretrained`): the planner reads its
headers (planner/checkpoint.py read_directory, tensor_groups) and places every tensor as vLLM does
(planner/memory.py checkpoint_split). vLLM's class for the same config.json is then built on torch's meta device
once per pipeline stage, with the tensor- and pipeline-parallel groups standing for a rank of the layout (the
parallel layers read their size and rank from those groups when they are built: linear.py, vocab_parallel_embedding.py,
utils.py make_layers / get_pp_indices), and its parameters are weighed. The planner's bytes for each stage's tensor
rank 0 must be what vLLM built there. The cases cover what divides differently: KV heads fewer than the
tensor ranks (each keeps a whole head), fused query-key-value tensors (Phi-3, GPT-NeoX, Falcon's single KV head,
GPT-2), vocabulary tables padded to 64 rows, tied embeddings copied to the last stage, row-parallel biases kept whole,
a remainder of layers on the stages before the last, MoE routers kept whole, and latent attention's replicated
down-projections (DeepSeek-V3)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("vllm")

from planner.checkpoint import read_directory, tensor_groups  # noqa: E402
from planner.layout import Layout  # noqa: E402
from planner.memory import checkpoint_split, checkpoint_stages  # noqa: E402
from planner.model_config import parse_hf_config  # noqa: E402

SMALL = {"hidden_size": 128, "intermediate_size": 256, "num_attention_heads": 8, "num_key_value_heads": 2,
         "num_hidden_layers": 5, "vocab_size": 1000, "max_position_embeddings": 512}
CASES = {
    "llama": {},
    "llama_tied": {"tie_word_embeddings": True},
    "qwen2": {},  # biases on q, k and v
    "gemma": {"head_dim": 16},  # tied embeddings
    "phi3": {"pad_token_id": 0},  # fused qkv_proj and gate_up_proj
    "qwen3_moe": {"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64, "decoder_sparse_step": 1,
                  "mlp_only_layers": [], "head_dim": 16},
    "mixtral": {"num_local_experts": 4, "num_experts_per_tok": 2},
    "gpt_neox": {"num_key_value_heads": None, "use_parallel_residual": True},  # query_key_value, row biases
    "falcon": {"num_key_value_heads": None, "multi_query": True, "new_decoder_architecture": False,
               "num_kv_heads": 1},  # one KV head in a fused tensor
    "deepseek_v3": {"n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
                    "n_shared_experts": 1, "first_k_dense_replace": 1, "kv_lora_rank": 32, "q_lora_rank": 48,
                    "qk_nope_head_dim": 16, "qk_rope_head_dim": 16, "v_head_dim": 16, "n_group": 1,
                    "topk_group": 1, "num_key_value_heads": 8, "rope_scaling": None, "topk_method": "noaux_tc"},
}
LAYOUTS = [(1, 1), (2, 1), (4, 1), (8, 1), (1, 2), (1, 3), (2, 2), (4, 3)]


def _config(case: str):
    model_type = case.removesuffix("_tied")
    overrides = {k: v for k, v in {**SMALL, **CASES[case]}.items() if v is not None}
    if model_type == "gpt_neox":
        overrides.pop("num_key_value_heads", None)
    if model_type == "falcon":
        overrides.pop("intermediate_size", None)
    return transformers.CONFIG_MAPPING[model_type](**overrides)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """model_type -> a directory transformers wrote: config.json and model.safetensors (bf16)."""
    built = {}
    for case in CASES:
        out = tmp_path_factory.mktemp(case)
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(_config(case), dtype=torch.bfloat16)
        model.save_pretrained(out)
        built[case] = out
    return built


class _Group:
    """A rank of a parallel group as vLLM's layers read it when they are built (parallel_state.GroupCoordinator's
    world_size, rank_in_group, is_first_rank, is_last_rank)."""

    def __init__(self, size: int, rank: int):
        self.world_size, self.rank_in_group, self.rank, self.local_rank = size, rank, rank, rank
        self.ranks = list(range(size))
        self.unique_name = "planner-test"
        self.device_group = self  # DeepSeek's MoE asks its expert group's process group for .size()

    def size(self) -> int:
        return self.world_size

    @property
    def is_first_rank(self) -> bool:
        return self.rank_in_group == 0

    @property
    def is_last_rank(self) -> bool:
        return self.rank_in_group == self.world_size - 1


@contextlib.contextmanager
def _transformers_classes_kept():
    """vLLM 0.32.0 serves some classes (GPT-NeoX) through its Transformers backend, which decorates transformers' own
    model classes in place (compilation/decorators.py support_torch_compile); their attributes are put back after,
    so later tests build transformers' models as transformers defines them."""
    modules = [m for name, m in list(sys.modules.items()) if name.startswith("transformers.models.") and m]
    saved = {c: dict(vars(c)) for m in modules for c in vars(m).values()
             if isinstance(c, type) and c.__module__.startswith("transformers.")}
    try:
        yield
    finally:
        for cls, attrs in saved.items():
            for key in set(vars(cls)) - set(attrs):
                delattr(cls, key)
            for key, value in attrs.items():
                if key not in ("__dict__", "__weakref__") and vars(cls).get(key) is not value:
                    setattr(cls, key, value)


def vllm_stage_bytes(directory: Path, tp: int, pp: int, monkeypatch) -> list[int]:
    """Bytes of the parameters vLLM 0.32.0's class for this checkpoint builds on tensor rank 0 of each pipeline
    stage."""
    from vllm.config import ModelConfig, ParallelConfig, VllmConfig, set_current_vllm_config
    from vllm.distributed import parallel_state
    from vllm.model_executor.model_loader.utils import get_model_architecture
    from vllm.utils.torch_utils import set_default_torch_dtype

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    config = json.loads((directory / "config.json").read_text())
    model_config = ModelConfig(model=str(directory), tokenizer=str(directory), skip_tokenizer_init=True,
                               dtype="bfloat16", max_model_len=min(512, config.get("max_position_embeddings") or 512))
    stages = []
    for stage in range(pp):
        for name, group in (("_TP", _Group(tp, 0)), ("_PP", _Group(pp, stage)), ("_DP", _Group(1, 0)),
                            ("_EP", _Group(1, 0)), ("_PCP", _Group(1, 0)), ("_DCP", _Group(1, 0))):
            monkeypatch.setattr(parallel_state, name, group, raising=False)
        vllm_config = VllmConfig(model_config=model_config,
                                 parallel_config=ParallelConfig(tensor_parallel_size=tp, pipeline_parallel_size=pp))
        with _transformers_classes_kept(), set_current_vllm_config(vllm_config), \
                set_default_torch_dtype(model_config.dtype), torch.device("meta"):
            cls, _ = get_model_architecture(model_config)
            model = cls(vllm_config=vllm_config, prefix="")
        stages.append(sum(p.numel() * p.element_size() for p in model.parameters()))
    return stages


FINAL_NORM_BYTES = 2 * SMALL["hidden_size"] * 2
"""The one place the planner and vLLM may differ: some of vLLM's classes (Gemma, Mixtral) build the final norm (a
weight and at most a bias of hidden_size) on every stage, most on the last one only; the planner puts it on the
last. 512 bytes here, 32 KiB at a hidden size of 8,192."""


def planned_stages(directory: Path, tp: int, pp: int, kind: str = "", **changes) -> list[float]:
    """The planner's bytes on tensor rank 0 of each stage, with `kind` groups divided evenly where a mutation asks."""
    config = json.loads((directory / "config.json").read_text())
    arch = replace(parse_hf_config(config, directory.name, "model.configFile"), **changes)
    groups = tensor_groups(read_directory(directory), arch, "model.tensorsFile")
    if kind:
        groups = tuple(replace(g, rule="split") if g.rule == kind else g for g in groups)
    arch = replace(arch, checkpoint_groups=groups)
    stages = [sum(stage) for stage in checkpoint_stages(arch, Layout(tp, pp, 1))]
    assert max(stages) == sum(checkpoint_split(arch, Layout(tp, pp, 1)))
    return stages


@pytest.mark.parametrize(("tp", "pp"), LAYOUTS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_most_loaded_gpu_holds_what_vllm_builds(checkpoints, monkeypatch, case, tp, pp):
    directory = checkpoints[case]
    heads = json.loads((directory / "config.json").read_text())
    if heads.get("num_attention_heads", 8) % tp:
        pytest.skip("vLLM refuses a TP that does not divide the heads")
    built = vllm_stage_bytes(directory, tp, pp, monkeypatch)
    planned = planned_stages(directory, tp, pp)
    for stage, (mine, theirs) in enumerate(zip(planned, built, strict=True)):
        assert mine == pytest.approx(theirs, abs=FINAL_NORM_BYTES), \
            f"stage {stage}: planned {mine:,.0f} bytes, vLLM built {theirs:,.0f}"


MUTATIONS = {
    # one rule treated as an even split over the tensor ranks, and a case where vLLM's build tells it apart
    "kv": ("llama", 8, 1),
    "vocab": ("llama", 8, 1),
    "replicated": ("deepseek_v3", 4, 1),
}


@pytest.mark.parametrize("rule", sorted(MUTATIONS))
def test_each_rule_is_needed(checkpoints, monkeypatch, rule):
    model_type, tp, pp = MUTATIONS[rule]
    directory = checkpoints[model_type]
    built = max(vllm_stage_bytes(directory, tp, pp, monkeypatch))
    assert max(planned_stages(directory, tp, pp)) == pytest.approx(built, abs=FINAL_NORM_BYTES)
    assert abs(max(planned_stages(directory, tp, pp, kind=rule)) - built) > FINAL_NORM_BYTES


def test_tied_embeddings_put_a_copy_on_the_last_stage(checkpoints, monkeypatch):
    """GPT-NeoX-style classes build the input table on the first stage only; tied, the last stage builds it again
    for lm_head. Llama's class with tied embeddings: without the copy the plan is lighter than vLLM's last stage."""
    directory = checkpoints["llama_tied"]
    last = vllm_stage_bytes(directory, 1, 2, monkeypatch)[-1]
    assert planned_stages(directory, 1, 2)[-1] == pytest.approx(last, abs=FINAL_NORM_BYTES)
    assert planned_stages(directory, 1, 2, tie_word_embeddings=False)[-1] < last - 4 * FINAL_NORM_BYTES


def vocabulary_on_every_stage() -> tuple[set[str], set[str]]:
    """(input, output) table architectures whose vLLM 0.32.0 model file assigns VocabParallelEmbedding /
    ParallelLMHead under no test of the pipeline rank (get_pp_group().is_first_rank / is_last_rank)."""
    import ast

    import vllm
    from vllm.model_executor.models.registry import _TEXT_GENERATION_MODELS

    from planner.checkpoint import HEAD_MODULES, VOCAB_MODULES

    root = Path(vllm.__file__).parent / "model_executor" / "models"

    def unguarded(tree: ast.AST, attrs: frozenset[str], constructor: str) -> list[bool]:
        found: list[bool] = []

        def walk(node: ast.AST, guarded: bool) -> None:
            for child in ast.iter_child_nodes(node):
                inner = guarded or (isinstance(child, ast.If) and "rank" in ast.unparse(child.test))
                if isinstance(child, ast.Assign) and isinstance(child.value, ast.Call) \
                        and ast.unparse(child.value.func).split(".")[-1] == constructor \
                        and any(isinstance(t, ast.Attribute) and t.attr in attrs for t in child.targets):
                    found.append(not guarded)
                walk(child, inner)

        walk(tree, False)
        return found

    inputs, heads = set(), set()
    for architecture, (module, _) in _TEXT_GENERATION_MODELS.items():
        path = root / f"{module}.py"
        if not path.exists():
            continue
        tree = ast.parse(path.read_text())
        made = unguarded(tree, VOCAB_MODULES - HEAD_MODULES, "VocabParallelEmbedding")
        if made and all(made):
            inputs.add(architecture)
        made = unguarded(tree, HEAD_MODULES, "ParallelLMHead")
        if made and all(made):
            heads.add(architecture)
    return inputs, heads


def test_the_tables_of_classes_with_vocabulary_on_every_stage_are_vllms():
    from planner.checkpoint import HEAD_ON_EVERY_STAGE, INPUT_ON_EVERY_STAGE

    inputs, heads = vocabulary_on_every_stage()
    assert set(INPUT_ON_EVERY_STAGE) == inputs
    assert set(HEAD_ON_EVERY_STAGE) == heads


DSV4_SMALL = {"num_hidden_layers": 5, "hidden_size": 512, "moe_intermediate_size": 128, "n_routed_experts": 8,
              "vocab_size": 1000, "q_lora_rank": 128, "o_lora_rank": 128, "index_n_heads": 8,
              "num_attention_heads": 16, "max_position_embeddings": 4096}
"""bench/configs/deepseek-v4-flash-shaped.json narrowed (its layer pattern, hyper-connections and hash layers kept),
unquantized: 2 sliding-window layers, 2 at ratio 4, 1 at 128."""


@pytest.mark.parametrize(("tp", "pp"), [(1, 1), (2, 1), (4, 1), (8, 1), (1, 2), (2, 3)])
def test_deepseek_v4_counted_weights_are_what_vllm_builds_on_each_rank(tmp_path, monkeypatch, tp, pp):
    """DeepSeek V4 planned from config.json (no checkpoint: planner/memory.py counted_groups, dsv4_groups) against
    vLLM 0.32.0's own DeepseekV4ForCausalLM built on tensor rank 0 of each stage: the fused q_a / kv projection,
    compressors, indexer, norms, router and float32 hyper-connections whole on every rank, wq_b, wo_a, wo_b, the
    attention sink and the shared experts divided. Equal but for the vocabulary's padding to 64 rows, which a count
    from config.json does not apply (two tables of 24 rows here). Read as a plain decoder (every layer divided) the
    plan misses what each rank keeps whole. CPU torch has no CUDA events, which DeepseekV4Attention makes at build:
    they are stubbed."""
    from planner.memory import counted_groups

    config = _dsv4_small(tmp_path)
    monkeypatch.setattr(torch.cuda, "Event", lambda *args, **kwargs: None)
    built = vllm_stage_bytes(tmp_path, tp, pp, monkeypatch)
    arch = parse_hf_config(config, "deepseek-v4", "model.configFile")
    planned = [sum(s) for s in checkpoint_stages(replace(arch, checkpoint_groups=counted_groups(arch)),
                                                 Layout(tp, pp, 1))]
    padding = 2 * 24 * DSV4_SMALL["hidden_size"] * 2
    for stage, (mine, theirs) in enumerate(zip(planned, built, strict=True)):
        assert mine == pytest.approx(theirs, abs=padding), f"stage {stage}: planned {mine:,.0f}, vLLM {theirs:,.0f}"
    if tp > 1:
        plain = [sum(s) for s in checkpoint_stages(replace(arch, o_groups=0, checkpoint_groups=counted_groups(
            replace(arch, o_groups=0))), Layout(tp, pp, 1))]
        assert max(abs(a - b) for a, b in zip(plain, built, strict=True)) > 10 * padding


def dsv4_tensors(c: dict) -> dict[str, dict]:
    """The safetensors header of an unquantized DeepSeek V4 checkpoint in its own tensor names (vLLM's
    hf_to_vllm_mapper and packed_modules_mapping for DeepseekV4ForCausalLM read them: layers.<i>.attn.wq_a, wkv, the
    compressor's wkv / wgate / ape, the indexer's, ffn.experts.<e>.w1-3, embed / head / hc_head), for config `c`."""
    h, q, dim, heads = c["hidden_size"], c["q_lora_rank"], c["head_dim"], c["num_attention_heads"]
    groups, rank, experts, inter = c["o_groups"], c["o_lora_rank"], c["n_routed_experts"], c["moe_intermediate_size"]
    i_heads, i_dim, streams, vocab = c["index_n_heads"], c["index_head_dim"], c["hc_mult"], c["vocab_size"]
    mix, shared = (2 + streams) * streams, inter * c["n_shared_experts"]
    t = {"embed.weight": ((vocab, h), "BF16"), "head.weight": ((vocab, h), "BF16"), "norm.weight": ((h,), "BF16"),
         "hc_head_fn": ((streams, streams * h), "F32"), "hc_head_base": ((streams,), "F32"),
         "hc_head_scale": ((1,), "F32")}
    for i, ratio in enumerate(c["compress_ratios"][:c["num_hidden_layers"]]):
        p = f"layers.{i}."
        t.update({p + "attn.wq_a.weight": ((q, h), "BF16"), p + "attn.wkv.weight": ((dim, h), "BF16"),
                  p + "attn.q_norm.weight": ((q,), "BF16"), p + "attn.kv_norm.weight": ((dim,), "BF16"),
                  p + "attn.wq_b.weight": ((heads * dim, q), "BF16"),
                  p + "attn.wo_a.weight": ((groups * rank, heads * dim // groups), "BF16"),
                  p + "attn.wo_b.weight": ((h, groups * rank), "BF16"), p + "attn.attn_sink": ((heads,), "F32"),
                  p + "attn_norm.weight": ((h,), "BF16"), p + "ffn_norm.weight": ((h,), "BF16"),
                  p + "ffn.gate.weight": ((experts, h), "BF16"),
                  p + "ffn.shared_experts.w1.weight": ((shared, h), "BF16"),
                  p + "ffn.shared_experts.w3.weight": ((shared, h), "BF16"),
                  p + "ffn.shared_experts.w2.weight": ((h, shared), "BF16")})
        t.update({p + f"hc_{part}_{name}": (shape, "F32") for part in ("attn", "ffn")
                  for name, shape in (("fn", (mix, streams * h)), ("base", (mix,)), ("scale", (3,)))})
        t.update({p + "ffn.gate.tid2eid": ((vocab, c["num_experts_per_tok"]), "I32")} if i < c["num_hash_layers"]
                 else {p + "ffn.gate.bias": ((experts,), "F32")})
        t.update({f"{p}ffn.experts.{e}.{w}.weight": ((h, inter) if w == "w2" else (inter, h), "BF16")
                  for e in range(experts) for w in ("w1", "w2", "w3")})
        ratio = max(1, ratio)
        coff = 2 if ratio == 4 else 1
        for prefix, width in [("attn.compressor.", dim)] * (ratio > 1) + [("attn.indexer.compressor.", i_dim)] * (
                ratio == 4):
            t.update({p + prefix + "wkv.weight": ((coff * width, h), "BF16"),
                      p + prefix + "wgate.weight": ((coff * width, h), "BF16"),
                      p + prefix + "ape": ((ratio, coff * width), "F32"),
                      p + prefix + "norm.weight": ((width,), "BF16")})
        if ratio == 4:
            t.update({p + "attn.indexer.wq_b.weight": ((i_heads * i_dim, q), "BF16"),
                      p + "attn.indexer.weights_proj.weight": ((i_heads, h), "BF16")})
    return {name: {"dtype": dtype, "shape": list(shape), "data_offsets": [0, 0]} for name, (shape, dtype) in t.items()}


def _dsv4_small(tmp_path: Path) -> dict:
    base = json.loads((Path(__file__).resolve().parents[2] / "bench" / "configs" /
                       "deepseek-v4-flash-shaped.json").read_text())
    config = {k: v for k, v in {**base, **DSV4_SMALL}.items() if k not in ("quantization_config", "expert_dtype")}
    (tmp_path / "config.json").write_text(json.dumps(config))
    return config


def loaded_by_vllm(directory: Path, tensors: dict[str, dict], monkeypatch) -> dict:
    """The parameters of vLLM 0.32.0's class for the config.json in `directory`, built on the CPU as one rank, after
    its load_weights (through the class's own mappers) took a zero tensor for each of `tensors` (a safetensors
    header); every parameter must have been loaded."""
    from vllm.config import ModelConfig, ParallelConfig, VllmConfig, set_current_vllm_config
    from vllm.distributed import parallel_state
    from vllm.model_executor.model_loader.utils import get_model_architecture
    from vllm.utils.torch_utils import set_default_torch_dtype

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    model_config = ModelConfig(model=str(directory), tokenizer=str(directory), skip_tokenizer_init=True,
                               dtype="bfloat16", max_model_len=512)
    for name in ("_TP", "_PP", "_DP", "_EP", "_PCP", "_DCP"):
        monkeypatch.setattr(parallel_state, name, _Group(1, 0), raising=False)
    vllm_config = VllmConfig(model_config=model_config, parallel_config=ParallelConfig())
    dtypes = {"BF16": torch.bfloat16, "F32": torch.float32, "I32": torch.int32}
    with set_current_vllm_config(vllm_config), set_default_torch_dtype(model_config.dtype):
        cls, _ = get_model_architecture(model_config)
        model = cls(vllm_config=vllm_config, prefix="")
        loaded = model.load_weights((name, torch.zeros(e["shape"], dtype=dtypes[e["dtype"]]))
                                    for name, e in tensors.items())
    params = dict(model.named_parameters())
    assert set(params) == set(loaded)
    return params


def test_deepseek_v4_checkpoint_names_are_what_vllm_loads(tmp_path, monkeypatch):
    """Every tensor of dsv4_tensors loads into vLLM 0.32.0's own DeepseekV4ForCausalLM (built on the CPU, one rank,
    its load_weights through its own mapper), every parameter is loaded, and the tensors weigh what the parameters do
    but the vocabulary's padding: the names are the checkpoint's, none left over."""
    from planner.checkpoint import DTYPE_BYTES

    config = _dsv4_small(tmp_path)
    monkeypatch.setattr(torch.cuda, "Event", lambda *args, **kwargs: None)
    tensors = dsv4_tensors(config)
    params = loaded_by_vllm(tmp_path, tensors, monkeypatch)
    stored = sum(math.prod(e["shape"]) * DTYPE_BYTES[e["dtype"]] for e in tensors.values())
    held = sum(p.numel() * p.element_size() for p in params.values())
    assert held - stored == 2 * 24 * DSV4_SMALL["hidden_size"] * 2  # embed_tokens and lm_head padded to 1,024 rows


@pytest.mark.parametrize(("tp", "pp"), [(1, 1), (2, 1), (4, 1), (8, 1), (1, 2), (2, 3)])
def test_deepseek_v4_checkpoint_weights_are_what_vllm_builds_on_each_rank(tmp_path, monkeypatch, tp, pp):
    """DeepSeek V4 planned from its checkpoint's tensors (planner/checkpoint.py tensor_groups on dsv4_tensors' header)
    against vLLM 0.32.0's own DeepseekV4ForCausalLM on tensor rank 0 of each stage: its own names for the vocabulary
    tables, the fused q_a / kv projection, compressors and indexers whole on every rank, the head's hyper-connection
    mixer on every stage. Equal to the byte."""
    config = _dsv4_small(tmp_path)
    monkeypatch.setattr(torch.cuda, "Event", lambda *args, **kwargs: None)
    built = vllm_stage_bytes(tmp_path, tp, pp, monkeypatch)
    arch = parse_hf_config(config, "deepseek-v4", "model.configFile")
    arch = replace(arch, checkpoint_groups=tensor_groups(dsv4_tensors(config), arch, "model.tensorsFile"))
    planned = [sum(s) for s in checkpoint_stages(arch, Layout(tp, pp, 1))]
    assert planned == pytest.approx(built, abs=0.5)


def test_the_submodules_kept_whole_build_no_divided_linear_layer():
    """planner/checkpoint.py REPLICATED_SUBMODULES held to vLLM 0.32.0's model files: every linear layer the indexers
    (DeepSeek-V3.2's and V4's) and V4's compressor build is a ReplicatedLinear or passes disable_tp=True, so no tensor
    rank divides it (V3.2's indexer cannot be built on this machine's CPU platform, which refuses sparse attention)."""
    import ast
    import inspect

    from vllm.models.deepseek_v4 import attention as v4_attention
    from vllm.models.deepseek_v4 import compressor as v4_compressor
    from vllm.models.deepseek_v32 import attention as v32_attention

    from planner.checkpoint import REPLICATED_SUBMODULES

    assert set(REPLICATED_SUBMODULES) == {".indexer.", ".compressor."}
    checked = []
    for module, name in ((v32_attention, "DeepseekV32Indexer"), (v4_attention, "DeepseekV4Indexer"),
                         (v4_compressor, "DeepseekCompressor")):
        tree = ast.parse(inspect.getsource(getattr(module, name)))
        for call in ast.walk(tree):
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id.endswith("Linear"):
                whole = call.func.id == "ReplicatedLinear" or any(
                    k.arg == "disable_tp" and isinstance(k.value, ast.Constant) and k.value.value is True
                    for k in call.keywords)
                assert whole, f"{name} builds a {call.func.id} its tensor ranks divide"
                checked.append((name, call.func.id))
    assert len({name for name, _ in checked}) == 3 and len(checked) >= 4, checked


INKLING_SMALL = {"num_hidden_layers": 5, "hidden_size": 512, "num_attention_heads": 8, "num_key_value_heads": 4,
                 "head_dim": 64, "swa_num_attention_heads": 8, "swa_num_key_value_heads": 4, "swa_head_dim": 32,
                 "sliding_window_size": 128, "sconv_kernel_size": 4, "n_routed_experts": 6, "n_shared_experts": 2,
                 "shared_expert_sink": True, "num_experts_per_tok": 2, "intermediate_size": 256,
                 "dense_intermediate_size": 1024, "vocab_size": 1000, "dense_mlp_idx": 1, "local_layer_ids": [0, 2],
                 "use_embed_norm": True, "use_gate_bias": True, "max_position_embeddings": 4096,
                 "torch_dtype": "bfloat16", "model_type": "inkling_model", "architectures": ["InklingForCausalLM"]}
"""A small Inkling in vLLM's own config format: a dense first layer, four MoE layers (6 routed experts, 2 sink
experts), sliding layers 0 and 2 of their own head shape, a vocabulary of 1,000 rows (padded to 1,024 in the head)."""


@pytest.mark.parametrize(("tp", "pp"), [(1, 1), (2, 1), (4, 1), (1, 2), (2, 2), (4, 3)])
def test_inkling_counted_weights_are_what_vllm_builds_on_each_rank(tmp_path, monkeypatch, tp, pp):
    """Inkling planned from config.json (planner/memory.py inkling_groups) against vLLM 0.32.0's own
    InklingForCausalLM built on tensor rank 0 of each stage: to the byte. Its input table whole on every tensor rank,
    the tables and final norm on every pipeline stage, the gate, relative-logit projections and norms whole, the
    rest divided. Placed as a plain decoder's (tables on the first and last stage, divided) the plan misses by more
    than half a table on any layout of more than one GPU. CPU torch has no CUDA events (InklingMoE makes two) and the
    Lamport all-reduce buffers need a GPU: both are stubbed, and hold no parameter."""
    from vllm.models.inkling.nvidia import model as inkling_model

    from planner.architecture import EVERY_STAGE, FIRST_STAGE, LAST_STAGE, TensorGroup
    from planner.memory import counted_groups

    (tmp_path / "config.json").write_text(json.dumps(INKLING_SMALL))
    monkeypatch.setattr(torch.cuda, "Event", lambda *args, **kwargs: None)
    monkeypatch.setattr(inkling_model, "initialize_lamport_rs_conv", lambda *args, **kwargs: None)
    built = vllm_stage_bytes(tmp_path, tp, pp, monkeypatch)
    arch = parse_hf_config(INKLING_SMALL, "inkling", "model.configFile")
    groups = counted_groups(arch)
    planned = [sum(s) for s in checkpoint_stages(replace(arch, checkpoint_groups=groups), Layout(tp, pp, 1))]
    assert planned == built
    table = 2 * INKLING_SMALL["vocab_size"] * INKLING_SMALL["hidden_size"]
    plain = (*(g for g in groups if g.position != EVERY_STAGE), TensorGroup(FIRST_STAGE, "split", table),
             TensorGroup(LAST_STAGE, "split", table))
    moved = [sum(s) for s in checkpoint_stages(replace(arch, checkpoint_groups=plain), Layout(tp, pp, 1))]
    if tp > 1 or pp > 1:  # one GPU holds everything either way
        assert max(abs(a - b) for a, b in zip(moved, built, strict=True)) > table / 2


def inkling_tensors(c: dict) -> dict[str, dict]:
    """The safetensors header of an unquantized Inkling checkpoint in its own tensor names (vLLM's hf_to_vllm_mapper
    for InklingForCausalLM reads them: model.llm.embed / unembed / norm / embed_norm, the layers' wq_du, wk_dv, wv_dv,
    wr_du, wo_ud, their short convolutions, w13_dn / w2_md of a dense MLP, the gate and the stacked routed and shared
    experts of an MoE layer), plus a multi-token-prediction tensor vLLM drops, for config `c`."""
    h, vocab, kernel, d_rel = c["hidden_size"], c["vocab_size"], c["sconv_kernel_size"], c.get("d_rel", 16)
    routed, shared, width = c["n_routed_experts"], c["n_shared_experts"], c["intermediate_size"]
    t = {"model.llm.embed.weight": ((vocab, h), "BF16"), "model.llm.embed_norm.weight": ((h,), "BF16"),
         "model.llm.norm.weight": ((h,), "BF16"), "model.llm.unembed.weight": ((vocab, h), "BF16"),
         "model.mtp.0.attn_norm.weight": ((h,), "BF16")}
    local = set(c["local_layer_ids"])
    for i in range(c["num_hidden_layers"]):
        p = f"model.llm.layers.{i}."
        if i in local:
            heads, kv, dim, extent = (c["swa_num_attention_heads"], c["swa_num_key_value_heads"], c["swa_head_dim"],
                                      c["sliding_window_size"])
        else:
            heads, kv, dim, extent = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], 1024
        t.update({p + name: (shape, "BF16") for name, shape in (
            ("attn_norm.weight", (h,)), ("mlp_norm.weight", (h,)), ("attn.wq_du.weight", (heads * dim, h)),
            ("attn.wk_dv.weight", (kv * dim, h)), ("attn.wv_dv.weight", (kv * dim, h)),
            ("attn.wr_du.weight", (heads * d_rel, h)), ("attn.wo_ud.weight", (h, heads * dim)),
            ("attn.rel_logits_proj.proj", (d_rel, extent)), ("attn.q_norm.weight", (dim,)),
            ("attn.k_norm.weight", (dim,)), ("attn.k_sconv.weight", (kv * dim, 1, kernel)),
            ("attn.v_sconv.weight", (kv * dim, 1, kernel)), ("attn_sconv.weight", (h, 1, kernel)),
            ("mlp_sconv.weight", (h, 1, kernel)))})
        if i < c["dense_mlp_idx"]:
            dense = c["dense_intermediate_size"]
            t.update({p + "mlp.w13_dn.weight": ((2 * dense, h), "BF16"), p + "mlp.w2_md.weight": ((h, dense), "BF16")})
            continue
        t.update({p + name: (shape, "BF16") for name, shape in (
            ("mlp.gate.weight", (routed + shared, h)), ("mlp.experts.w13_weight", (routed, 2 * width, h)),
            ("mlp.experts.w2_weight", (routed, h, width)), ("mlp.shared_experts.w13_weight", (shared, 2 * width, h)),
            ("mlp.shared_experts.w2_weight", (shared, h, width)))})
        if c.get("use_gate_bias"):
            t[p + "mlp.gate.bias"] = ((routed,), "F32")
    return {name: {"dtype": dtype, "shape": list(shape), "data_offsets": [0, 0]} for name, (shape, dtype) in t.items()}


def test_inkling_checkpoint_names_are_what_vllm_loads(tmp_path, monkeypatch):
    """Every tensor of inkling_tensors but the multi-token-prediction head loads into vLLM 0.32.0's own
    InklingForCausalLM (built on the CPU, one rank, its load_weights through its own mappers), every parameter is
    loaded, and the tensors weigh what the parameters do but the head's padding: the names are the checkpoint's, none
    left over."""
    from vllm.models.inkling.nvidia import model as inkling_model

    from planner.checkpoint import DTYPE_BYTES, INKLING_SKIPPED

    (tmp_path / "config.json").write_text(json.dumps(INKLING_SMALL))
    monkeypatch.setattr(torch.cuda, "Event", lambda *args, **kwargs: None)
    monkeypatch.setattr(inkling_model, "initialize_lamport_rs_conv", lambda *args, **kwargs: None)
    tensors = inkling_tensors(INKLING_SMALL)
    params = loaded_by_vllm(tmp_path, tensors, monkeypatch)
    stored = sum(math.prod(e["shape"]) * DTYPE_BYTES[e["dtype"]] for name, e in tensors.items()
                 if not name.startswith(INKLING_SKIPPED))
    held = sum(p.numel() * p.element_size() for p in params.values())
    h = INKLING_SMALL["hidden_size"]
    assert held - stored == 24 * h * 2  # lm_head padded to 1,024 rows (the gate's 6 + 2 rows need no padding)


@pytest.mark.parametrize(("tp", "pp"), [(1, 1), (2, 1), (4, 1), (1, 2), (2, 2), (4, 3)])
def test_inkling_checkpoint_weights_are_what_vllm_builds_on_each_rank(tmp_path, monkeypatch, tp, pp):
    """Inkling planned from its checkpoint's tensors (planner/checkpoint.py inkling_placement on inkling_tensors'
    header) against vLLM 0.32.0's own InklingForCausalLM on tensor rank 0 of each stage: its own names for the
    tables, the input table whole on every tensor rank and the tables and norms on every stage, the gate and the
    relative-logit projections whole, the multi-token-prediction head left out. Equal to the byte."""
    from vllm.models.inkling.nvidia import model as inkling_model

    (tmp_path / "config.json").write_text(json.dumps(INKLING_SMALL))
    monkeypatch.setattr(torch.cuda, "Event", lambda *args, **kwargs: None)
    monkeypatch.setattr(inkling_model, "initialize_lamport_rs_conv", lambda *args, **kwargs: None)
    built = vllm_stage_bytes(tmp_path, tp, pp, monkeypatch)
    arch = parse_hf_config(INKLING_SMALL, "inkling", "model.configFile")
    arch = replace(arch, checkpoint_groups=tensor_groups(inkling_tensors(INKLING_SMALL), arch, "model.tensorsFile"))
    assert [sum(s) for s in checkpoint_stages(arch, Layout(tp, pp, 1))] == built
