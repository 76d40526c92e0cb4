"""Layouts (tensor x pipeline parallel over nodes) and what they hold: the KV tokens of one layout on a GPU type
(fit), the candidate layouts, the automatic choice and the refusals of an explicit one, each naming a layout that
would work.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from planner.architecture import ModelArchitecture
from planner.catalog import (
    GIB,
    Accelerator,
    MachineType,
)
from planner.config import Settings
from planner.engine import (
    EngineChoice,
    EngineSettings,
    engine_settings,
    profile_for_image,
)
from planner.errors import ConfigError
from planner.kv_cache import block_bytes, bytes_per_token, layer_specs, pp_stages
from planner.memory import (
    LOAD_OVERHEAD_GIB,
    default_engine,
    outside_kv_bytes,
    profiling_cache_blocks,
    rotary_cache_bytes,
    weights_per_gpu_bytes,
    with_item_floor,
)
from planner.memory_fit import FITTED, MemoryFit
from planner.model_config import NEEDS_AN_MOE_LAYER
from planner.stack_schema import VllmConfig
from planner.throughput import Estimate, Workload, estimate

MAX_NODES_PER_REPLICA = 64
MEASURED_CROSS_NODE_TCP = ("measured on 2x H200 over TCP sockets (docs/benchmarks.md): pipeline parallel across "
                           "nodes 3,690 output tok/s per GPU, tensor parallel across nodes 496")
DEFAULT_UTILIZATION: float = VllmConfig.model_fields["gpu_memory_utilization"].default
"""vllm.gpuMemoryUtilization's declared default: the level a too-low setting is compared with."""


@dataclass(frozen=True)
class Layout:
    """One replica: `dp` engines (vLLM's data-parallel ranks, one API server) of tp x pp GPUs each over `nodes`
    nodes; `ep`: the experts of a mixture-of-experts model split whole over the dp x tp GPUs of a stage."""

    tp: int
    pp: int
    nodes: int
    dp: int = 1
    ep: bool = False

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    def key(self) -> str:
        """Stable text of the layout for fingerprints: a layout without DP or EP reads as it did before they
        existed (the smoke Job's name comes from it)."""
        old = f"Layout(tp={self.tp}, pp={self.pp}, nodes={self.nodes})"
        return old if self.dp == 1 and not self.ep else repr(self)

    @property
    def engine_gpus(self) -> int:
        """GPUs of one data-parallel rank (tp x pp)."""
        return self.tp * self.pp

    def describe(self, machine: MachineType | None = None) -> str:
        text = f"tensor={self.tp}, pipeline={self.pp}"
        if self.dp > 1:
            text += f", data={self.dp}"
        if self.ep:
            text += ", expert parallel"
        where = f"{self.nodes} node{'s' if self.nodes > 1 else ''}"
        if machine is not None:
            where += f" of {machine.name}"
        return f"{text} on {where}"



@dataclass(frozen=True)
class Fit:
    weights_per_gpu: float
    usable_per_gpu: float
    kv_bytes_per_token: float
    kv_tokens: int
    """KV tokens of one engine (a data-parallel rank; the whole replica without DP): one sequence must fit here."""
    engines: int = 1
    start_bytes: float = 0.0
    """What one GPU holds while vLLM estimates its CUDA graphs: weights, the profiling KV cache (profiling_bytes) and
    what sits outside torch. Over the GPU's memory, vLLM runs out of memory before it sizes its cache: the fit then
    holds no tokens."""
    profiling_bytes: float = 0.0
    """The KV cache vLLM allocates on one GPU to estimate its CUDA graphs: planner/memory.py profiling_cache_blocks
    blocks of planner/kv_cache.py block_bytes each."""

    @property
    def weights_fit(self) -> bool:
        return self.usable_per_gpu > 0

    @property
    def replica_tokens(self) -> int:
        return self.kv_tokens * self.engines

    def full_sequences(self, max_len: int) -> int:
        """max_len-long sequences a replica holds: each in one engine's cache."""
        return self.kv_tokens // max_len * self.engines


NO_PIPELINE_ARCHITECTURES = frozenset({
    "AriaForConditionalGeneration", "Gemma3nForCausalLM", "Gemma3nForConditionalGeneration", "HrmTextForCausalLM",
    "Idefics3ForConditionalGeneration", "Mamba2ForCausalLM", "PaddleOCRVLForConditionalGeneration",
    "SmolVLMForConditionalGeneration", "Zamba2ForCausalLM"})
"""Model classes vLLM 0.32.0 serves without pipeline parallelism (no SupportsPP: ModelConfig.verify_with_parallel_config
raises "Pipeline parallelism is not supported for this model"). tests/engine/test_every_vllm_family.py holds the set
to vLLM's own classes for every family whose class loads in the test environment."""


def pipeline_supported(arch: ModelArchitecture) -> bool:
    return arch.architecture not in NO_PIPELINE_ARCHITECTURES


def valid_tensor_sizes(arch: ModelArchitecture, limit: int) -> list[int]:
    """TP sizes vLLM accepts: dividing the attention heads, and the KV heads dividing or divisible (every attention
    layer's, where a NAS decoder gives each its own); a Mamba-2 mixer's heads, and its groups unless there is one
    (vllm/model_executor/layers/mamba/mamba_mixer2.py asserts both); a Mamba-1 mixer's width (mamba_mixer.py splits
    it with divide()); Ling 2.5's group_norm_size, which TP must divide and not exceed (bailing_linear_attn.py asserts
    both); Inkling's KV heads, which TP must not exceed (vllm/models/inkling/nvidia/sconv_swa_attn.py InklingConvState
    asserts tp_size <= num_kv_heads)."""
    return [tp for tp in range(1, limit + 1) if arch.num_attention_heads % tp == 0
            and all(kv % tp == 0 or tp % kv == 0 for kv in arch.attention_kv_heads if kv)
            and (not arch.mamba or (arch.mamba[2] % tp == 0 and (arch.mamba[1] % tp == 0 or arch.mamba[1] == 1)))
            and (not arch.mamba1 or arch.mamba1[0] % tp == 0)
            and (not arch.inkling or tp <= min(arch.attention_kv_heads))
            and (not arch.lightning[0] or (tp <= arch.lightning[3] and arch.lightning[3] % tp == 0))]


def tensor_split_text(arch: ModelArchitecture) -> str:
    """What a TP size must divide, for the error that names a size vLLM refuses."""
    parts = []
    if arch.num_attention_heads:
        parts.append(f"{arch.num_attention_heads} attention heads and {'/'.join(map(str, arch.attention_kv_heads))} "
                     "KV heads")
    if arch.mamba:
        groups = f" in {arch.mamba[1]} groups" if arch.mamba[1] > 1 else ""
        parts.append(f"Mamba-2 mixers of {arch.mamba[2]} heads{groups}")
    if arch.mamba1:
        parts.append(f"Mamba mixers {arch.mamba1[0]} wide")
    if arch.lightning[0]:
        parts.append(f"linear-attention output norms in group_norm_size {arch.lightning[3]} groups")
    if arch.inkling:
        most = min(arch.attention_kv_heads)
        parts.append(f"short-convolution states of at least one KV head per rank (at most {most} ranks)")
    return " and ".join(parts)


def fit(arch: ModelArchitecture, acc: Accelerator, layout: Layout, utilization: float,
        weights_bytes: float, kv_bytes: float, max_len: int = 0, engine: EngineSettings | None = None,
        fitted: MemoryFit = FITTED) -> Fit:
    """Weights and KV tokens per GPU under `engine` (default: the default profile's settings for this GPU);
    `max_len` (vllm.maxModelLen) matters where layers hold less than the whole sequence (sliding window, chunked,
    linear attention): vLLM reports those tokens per max_len-long request, and it is the engine's max_model_len (the
    encoder profile's dummy video: planner/memory.py encoder_item)."""
    length = max_len or arch.context
    engine = with_item_floor(arch, replace(engine or default_engine(acc), max_model_len=length))
    per_gpu = weights_per_gpu_bytes(arch, layout, weights_bytes) + LOAD_OVERHEAD_GIB * GIB + rotary_cache_bytes(arch)
    usable = acc.memory_bytes * utilization - per_gpu - outside_kv_bytes(arch, layout, engine, fitted)
    specs = layer_specs(arch, layout.tp, kv_bytes, engine.states)
    tokens = engine.kv_tokens(specs, layout.pp, usable, length, arch.cache_slots)
    per_token = usable / tokens if tokens else bytes_per_token(arch, layout.tp, layout.pp, kv_bytes)
    cache = profiling_cache_blocks(arch, engine) * block_bytes(specs, layout.pp, engine.profile.kv_pool,
                                                               arch.cache_slots)
    start = per_gpu + (fitted.baseline_gib(engine.gpu) + fitted.non_torch_gib) * GIB + cache
    return Fit(per_gpu, usable, per_token, tokens if start <= acc.memory_bytes else 0, layout.dp, start, cache)


def profiling_cache_text(arch: ModelArchitecture, acc: Accelerator, layout: Layout, engine: EngineSettings,
                         result: Fit) -> str:
    """Why vLLM runs out of memory before it sizes its cache at `layout`, and what makes it start."""
    cache, blocks = result.profiling_bytes, profiling_cache_blocks(arch, engine)
    room = int((acc.memory_bytes - (result.start_bytes - cache)) // (cache / blocks) * 0.9)  # 10% to spare
    seqs = room if engine.profile.cudagraph_reserved else room // 2  # 0.25.1: the largest capture, 2 x max_num_seqs
    seqs = seqs // 64 * 64 or seqs
    fewer = f"vllm.extraArgs [--max-num-seqs, {seqs}] (fewer blocks), " if seqs >= 1 else ""
    return (f"to estimate its CUDA graphs vLLM first allocates a KV cache of {blocks} blocks, "
            f"{gib_text(cache)} per GPU at {layout.describe()}, which with {gib_text(result.weights_per_gpu)} of "
            f"weights is {gib_text(result.start_bytes)}, more than an {acc.display}'s {gib_text(acc.memory_bytes)}, "
            f"so it runs out of memory before it starts; use {fewer}[--enforce-eager] (no graphs), or more GPUs "
            "per replica")


def place(tp: int, pp: int, gpus_per_node: int) -> int | None:
    """Nodes a TP x PP replica needs: one when it fits a node, else whole nodes with TP inside one."""
    gpus = tp * pp
    if gpus <= gpus_per_node:
        return 1
    if tp > gpus_per_node or gpus % gpus_per_node:
        return None
    return gpus // gpus_per_node


def candidate_layouts(arch: ModelArchitecture, gpus_per_node: int) -> list[Layout]:
    """Every layout with TP inside a node, ordered smallest first (GPUs, then nodes, then larger TP)."""
    layouts = []
    for tp in valid_tensor_sizes(arch, gpus_per_node):
        for pp in range(1, (arch.num_layers if pipeline_supported(arch) else 1) + 1):
            nodes = place(tp, pp, gpus_per_node)
            if nodes is not None and nodes <= MAX_NODES_PER_REPLICA:
                layouts.append(Layout(tp, pp, nodes))
            if tp * pp >= gpus_per_node * MAX_NODES_PER_REPLICA:
                break
    return sorted(layouts, key=lambda lay: (lay.gpus, lay.nodes, -lay.tp))


def smallest_working(arch: ModelArchitecture, acc: Accelerator, gpus_per_node: int, utilization: float,
                     weights_bytes: float, kv_bytes: float, tokens_needed: int, max_len: int = 0,
                     engine: EngineSettings | None = None) -> Layout | None:
    for layout in candidate_layouts(arch, gpus_per_node):
        if fit(arch, acc, layout, utilization, weights_bytes, kv_bytes, max_len, engine).kv_tokens >= tokens_needed:
            return layout
    return None


def engine_choice(settings: Settings) -> EngineChoice:
    """The engine profile for the stack's vllm.image (planner/engine.py)."""
    return profile_for_image(settings.vllm.image)


def stack_engine(settings: Settings, choice: EngineChoice) -> EngineSettings:
    """The batch and cache settings the stack's server runs with: its image's profile, its GPU, vllm.extraArgs."""
    acc = settings.accelerator.catalog
    return with_item_floor(settings.model.architecture,
                           engine_settings(choice.profile, acc, settings.vllm.extra_args, settings.vllm.dtype))


def _suggestion(settings: Settings, engine: EngineSettings, weights_bytes: float, kv_bytes: float,
                tokens_needed: int) -> str:
    arch, accs = settings.model.architecture, settings.accelerator
    util = settings.vllm.gpu_memory_utilization
    options = []
    here = smallest_working(arch, accs.catalog, accs.gpus_per_node, util, weights_bytes, kv_bytes, tokens_needed,
                            settings.vllm.max_model_len, engine)
    if here is not None:
        options.append(here.describe(accs.machine))
    for machine in accs.catalog.machines:
        if machine.gpus <= accs.gpus_per_node or machine is not accs.catalog.default_machine(machine.gpus):
            continue
        other = smallest_working(arch, accs.catalog, machine.gpus, util, weights_bytes, kv_bytes, tokens_needed,
                                 settings.vllm.max_model_len, engine)
        if other is not None and other.nodes == 1 and (here is None or here.nodes > 1):
            options.append(f"{other.describe(machine)} (accelerator.machineType: {machine.name})")
            break
    if not options:
        return (f"no layout of up to {MAX_NODES_PER_REPLICA} nodes fits; use a larger accelerator, "
                "an FP8 kv cache (vllm.kvCacheDtype: fp8) or a smaller vllm.maxModelLen")
    return "a layout that fits: " + "; or ".join(options)


def gib_text(value: float) -> str:
    return f"{value / GIB:.2f} GiB"


def shared_cache_split(arch: ModelArchitecture, pp: int) -> tuple[int, int] | None:
    """(layer, the layer whose KV cache it reads) for the first KV-shared layer a pipeline of `pp` stages puts on
    another stage than its target (Gemma 4: the last non-shared layer of the same type, vllm/model_executor/models/
    gemma4.py kv_sharing_target_layer_name); None when every shared layer sits with its target."""
    first_shared = arch.num_layers - arch.kv_shared_layers
    if not arch.kv_shared_layers or pp == 1:
        return None
    stage = {layer: n for n, (start, stop) in enumerate(pp_stages(arch.num_layers, pp)) for layer in range(start, stop)}
    kinds = arch.kinds
    for layer in range(first_shared, arch.num_layers):
        target = max((i for i in range(first_shared) if kinds[i] == kinds[layer]), default=None)
        if target is not None and stage[layer] != stage[target]:
            return layer, target
    return None


def check_data_parallel(settings: Settings, tp: int, pp: int, dp: int, ep: bool) -> None:
    """Data-parallel ranks stay inside one node: vLLM's multi-node data parallelism needs every rank's address and
    port wired up, and expert parallelism across nodes moves every MoE layer's tokens between nodes, which needs
    GPUDirect (RDMA on A3 Ultra / A4, TCPXO on A3 Mega; GKE "Maximize GPU network bandwidth") that this program does
    not set up."""
    accs = settings.accelerator
    gpn = accs.gpus_per_node
    if dp == 1 or dp * tp * pp <= gpn:
        return
    fits = max(1, gpn // (tp * pp))
    if ep:
        network = (f"{accs.machine_type} offers {accs.machine.gpudirect}, which this program does not set up yet"
                   if accs.machine.gpudirect else
                   f"{accs.machine_type} has no GPUDirect network (A3 Ultra and A4 have RDMA, A3 Mega TCPXO)")
        raise ConfigError("parallelism.expert", True,
                          f"data={dp} x tensor={tp} x pipeline={pp} spreads the experts over "
                          f"{dp * tp * pp} GPUs, more than one node's {gpn}: expert parallelism across nodes needs "
                          f"GPUDirect between nodes and {network}; use data={fits} inside a node, or tensor and "
                          "pipeline parallelism across nodes without expert parallelism")
    raise ConfigError("parallelism.data", dp,
                      f"data={dp} x tensor={tp} x pipeline={pp} needs {dp * tp * pp} GPUs, more than one node's "
                      f"{gpn} ({accs.machine_type}); data-parallel ranks stay inside a node here: use data={fits} "
                      "and more replicas (autoscaling.maxReplicas)")


def check_explicit_layout(settings: Settings, engine: EngineSettings, layout_tp: int, layout_pp: int,
                          weights_bytes: float, kv_bytes: float, dp: int = 1, ep: bool = False) -> Layout:
    arch, accs = settings.model.architecture, settings.accelerator
    gpn = accs.gpus_per_node
    check_data_parallel(settings, layout_tp, layout_pp, dp, ep)
    tp_key = "parallelism.tensor" if settings.parallelism.tensor is not None else "parallelism.pipeline"
    if layout_tp not in valid_tensor_sizes(arch, layout_tp):
        valid = valid_tensor_sizes(arch, max(8, gpn))
        listed = ", ".join(str(v) for v in valid[:-1]) + f" or {valid[-1]}" if len(valid) > 1 else str(valid[0])
        raise ConfigError("parallelism.tensor", layout_tp,
                          f"{arch.name} has {tensor_split_text(arch)}, which {layout_tp} does not divide; use "
                          f"{listed}")
    if layout_pp > 1 and not pipeline_supported(arch):
        raise ConfigError("parallelism.pipeline", layout_pp,
                          f"vLLM serves {arch.architecture} without pipeline parallelism (its class has no "
                          "SupportsPP); use pipeline 1 and tensor parallelism")
    if layout_pp > arch.num_layers:
        raise ConfigError("parallelism.pipeline", layout_pp,
                          f"{arch.name} has only {arch.num_layers} layers; use at most {arch.num_layers}")
    if layout_pp > 1 and arch.architecture in NEEDS_AN_MOE_LAYER and arch.first_dense_layers:
        first_end = pp_stages(arch.num_layers, layout_pp)[0][1]
        if first_end <= arch.first_dense_layers:
            raise ConfigError("parallelism.pipeline", layout_pp,
                              f"{arch.name}'s first pipeline stage would hold layers 0-{first_end - 1}, all dense, "
                              f"and vLLM's {arch.architecture} refuses a stage without a layer with routed experts; "
                              "use fewer pipeline stages")
    split = shared_cache_split(arch, layout_pp)
    if split is not None:
        raise ConfigError("parallelism.pipeline", layout_pp,
                          f"{arch.name}'s layer {split[0]} reads the KV cache of layer {split[1]}, which this "
                          "pipeline split puts on another stage (vLLM keeps a shared cache on its own GPU); use "
                          "pipeline 1 and tensor parallelism")
    width, group = arch.moe_intermediate_size or arch.intermediate_size, dp * layout_tp
    if arch.num_experts and not ep and width % group:
        key, value = ("parallelism.data", dp) if dp > 1 else ("parallelism.tensor", layout_tp)
        raise ConfigError(key, value,
                          f"{arch.name}'s experts are {width} wide, which data x tensor = {group} GPUs do not divide "
                          "(vLLM shards each expert over them and asserts they divide it, vllm/model_executor/"
                          "layers/fused_moe/config.py FusedMoEConfig); set parallelism.expert: true to split whole "
                          "experts instead")
    nodes = place(layout_tp, layout_pp, gpn)
    if nodes is None:
        if layout_tp > gpn:
            raise ConfigError("parallelism.tensor", layout_tp,
                              f"tensor parallelism must stay inside one node ({accs.machine_type} has {gpn} GPUs); "
                              f"use tensor={gpn} and pipeline={layout_tp * layout_pp // gpn} across nodes")
        raise ConfigError("parallelism.pipeline", layout_pp,
                          f"tensor x pipeline = {layout_tp * layout_pp} GPUs does not fill whole nodes of "
                          f"{gpn} ({accs.machine_type}); use a multiple of {gpn}")
    if nodes > MAX_NODES_PER_REPLICA:
        raise ConfigError("parallelism.pipeline", layout_pp,
                          f"needs {nodes} nodes per replica; at most {MAX_NODES_PER_REPLICA} are supported")
    layout = Layout(layout_tp, layout_pp, nodes, dp, ep)
    result = fit(arch, accs.catalog, layout, settings.vllm.gpu_memory_utilization, weights_bytes, kv_bytes,
                 settings.vllm.max_model_len, engine)
    max_len = settings.vllm.max_model_len
    if not result.weights_fit:
        budget = accs.catalog.memory_bytes * settings.vllm.gpu_memory_utilization
        reserve = budget - result.weights_per_gpu - result.usable_per_gpu  # fit's outside_kv_bytes
        raise ConfigError(tp_key, layout_tp if tp_key == "parallelism.tensor" else layout_pp,
                          f"{arch.name} needs {gib_text(result.weights_per_gpu)} of weights per GPU at "
                          f"{layout.describe()} but an {accs.type} offers {gib_text(budget)} "
                          f"({gib_text(accs.catalog.memory_bytes)} x "
                          f"{settings.vllm.gpu_memory_utilization} gpuMemoryUtilization) less a "
                          f"{reserve / GIB:.2f} GiB "
                          f"reserve; {_suggestion(settings, engine, weights_bytes, kv_bytes, max_len)}")
    if result.start_bytes > accs.catalog.memory_bytes:
        raise ConfigError(tp_key, layout_tp if tp_key == "parallelism.tensor" else layout_pp,
                          profiling_cache_text(arch, accs.catalog, layout, engine, result))
    if result.kv_tokens < max_len and not arch.unsized:  # unsized: the plan warns that this is not verified
        alternative = _suggestion(settings, engine, weights_bytes, kv_bytes, max_len).removeprefix(
            "a layout that fits: ")
        raise ConfigError("vllm.maxModelLen", max_len,
                          f"the KV cache at {layout.describe()} holds only {result.kv_tokens} tokens per engine "
                          f"({gib_text(result.usable_per_gpu)} per GPU), less than one sequence, so vLLM would refuse "
                          f"to start; lower vllm.maxModelLen to {result.kv_tokens} or less, or use "
                          f"{alternative}")
    return layout


LAYOUT_MARGIN = 0.12
"""Layouts predicted within this fraction of the best are not told apart: of them the one with the fewest GPUs per
replica is chosen (fewer collectives, finer autoscaling steps), the faster on a tie. It is the largest error of
planner/throughput.py on the rows it was fitted on (bench/fit_layouts.py: 11.6%; tests/unit/
test_data_expert_parallel.py holds it at least that). Added after the first held-out batch (docs/benchmarks.md
"Layouts": ERNIE-4.5-21B-A3B's DP+EP served 0.58x its TP=1 replicas where the model predicted 1.03x at steady
state); its value is not fitted on that batch, and the next held-out batch checks it."""


@dataclass(frozen=True)
class Compared:
    """A layout the automatic choice weighed, with what it predicts for it (planner/throughput.py)."""

    layout: Layout
    kv_tokens: int
    """Per engine (data-parallel rank)."""
    estimate: Estimate


def single_node_candidates(arch: ModelArchitecture, gpus_per_node: int) -> list[Layout]:
    """The layouts inside one node the automatic choice compares: one engine of each valid TP size and, for a
    mixture-of-experts model, data x tensor engines with the experts split whole (DP+EP)."""
    layouts = []
    for tp in valid_tensor_sizes(arch, gpus_per_node):
        layouts.append(Layout(tp, 1, 1))
        if arch.num_experts:  # data x tensor dividing the node, so replicas pack whole nodes
            layouts += [Layout(tp, 1, 1, dp, True) for dp in range(2, gpus_per_node // tp + 1)
                        if gpus_per_node % (dp * tp) == 0]
    return layouts


def compare_layouts(settings: Settings, engine: EngineSettings, weights_bytes: float, kv_bytes: float,
                    layouts: list[Layout]) -> list[Compared]:
    arch, acc = settings.model.architecture, settings.accelerator.catalog
    par = settings.parallelism
    work = Workload(min(par.typical_input_tokens, settings.vllm.max_model_len - 1),
                    max(1, min(par.typical_output_tokens, settings.vllm.max_model_len - par.typical_input_tokens)))
    compared = []
    for layout in layouts:
        got = fit(arch, acc, layout, settings.vllm.gpu_memory_utilization, weights_bytes, kv_bytes,
                  settings.vllm.max_model_len, engine)
        compared.append(Compared(layout, got.kv_tokens, estimate(arch, acc, layout, weights_bytes, got, engine,
                                                                 work)))
    return compared


def auto_layout(settings: Settings, engine: EngineSettings, weights_bytes: float,
                kv_bytes: float) -> tuple[Layout, list[Compared]]:
    """The layout inside one node with the most predicted output tokens per GPU among those whose engines hold
    parallelism.minConcurrentSequences full-length sequences (else one), ties to fewer GPUs; when none fits a node,
    the fewest nodes with pipeline parallelism across them. Returns the layouts compared too."""
    arch, max_len = settings.model.architecture, settings.vllm.max_model_len
    wanted = settings.parallelism.min_concurrent_sequences * max_len
    compared = compare_layouts(settings, engine, weights_bytes, kv_bytes,
                               single_node_candidates(arch, settings.accelerator.gpus_per_node))
    sequence = [c for c in compared if c.kv_tokens >= max_len]
    held = [c for c in sequence if c.kv_tokens * c.layout.dp >= wanted] or sequence
    if held:
        top = max(c.estimate.tokens_per_s_per_gpu for c in held)
        close = [c for c in held if c.estimate.tokens_per_s_per_gpu * (1 + LAYOUT_MARGIN) >= top]
        best = min(close, key=lambda c: (c.layout.gpus, -c.estimate.tokens_per_s_per_gpu))
        return best.layout, compared
    return _across_nodes(settings, engine, weights_bytes, kv_bytes), []


def unsized_layout(settings: Settings, engine: EngineSettings, weights_bytes: float,
                   kv_bytes: float) -> tuple[Layout, list[Compared]]:
    """The automatic layout of a model with a layer structure the planner does not size yet (arch.unsized): as
    auto_layout chooses it with every layer's KV cache counted as full attention, or, where no layout holds a
    full-length sequence that way, the smallest one the weights fit with room for any KV cache: vLLM serves the model,
    and its own profile sizes the cache these layers keep; the plan warns what it could not verify."""
    try:
        return auto_layout(settings, engine, weights_bytes, kv_bytes)
    except ConfigError:
        arch, accs = settings.model.architecture, settings.accelerator
        layout = smallest_working(arch, accs.catalog, accs.gpus_per_node, settings.vllm.gpu_memory_utilization,
                                  weights_bytes, kv_bytes, 1, settings.vllm.max_model_len, engine)
        if layout is None:
            raise
        return layout, []


def _across_nodes(settings: Settings, engine: EngineSettings, weights_bytes: float, kv_bytes: float) -> Layout:
    arch, accs = settings.model.architecture, settings.accelerator
    acc, gpn, util = accs.catalog, accs.gpus_per_node, settings.vllm.gpu_memory_utilization
    max_len = settings.vllm.max_model_len
    tps = valid_tensor_sizes(arch, gpn)
    tp_max = tps[-1]
    for nodes in range(2, MAX_NODES_PER_REPLICA + 1):  # fewest nodes, PP across them
        pp = nodes * gpn // tp_max
        if pp > arch.num_layers or not pipeline_supported(arch):
            break
        layout = Layout(tp_max, pp, nodes)
        if fit(arch, acc, layout, util, weights_bytes, kv_bytes, max_len, engine).kv_tokens >= max_len:
            return layout
    for higher in (DEFAULT_UTILIZATION,):  # a utilization set below the default may be all that is in the way
        if higher > util:
            layout = smallest_working(arch, acc, gpn, higher, weights_bytes, kv_bytes, max_len, max_len, engine)
            if layout is not None:
                raise ConfigError("vllm.gpuMemoryUtilization", util,
                                  f"leaves too little GPU memory for {arch.name} ({gib_text(weights_bytes)} of "
                                  f"weights) with vllm.maxModelLen {max_len} on {accs.machine_type}; at {higher:g} it "
                                  "fits "
                                  f"with {layout.describe(accs.machine)}: raise vllm.gpuMemoryUtilization")
    raise ConfigError("model.id", settings.model.id,
                      f"{arch.name} ({gib_text(weights_bytes)} of weights) with vllm.maxModelLen {max_len} does not "
                      f"fit on up to {MAX_NODES_PER_REPLICA} nodes of {accs.machine_type}; "
                      f"{_suggestion(settings, engine, weights_bytes, kv_bytes, max_len)}")


