"""Output tokens per GPU of a layout, predicted: what the automatic layout is chosen by (planner/layout.py) and what
`make plan` prints for each layout it compared.

A roofline of vLLM's engine loop, per engine (one data-parallel rank, or the replica without DP), for requests of
the stack's typical shape (parallelism.typicalInputTokens / typicalOutputTokens) arriving faster than they are served:

- concurrency: the engine runs B = min(max_num_seqs, KV tokens // (input + output)) requests at once, in waves
  (prompts of one length all finish together);
- a wave's prefill: its prompt tokens in chunks of max_num_batched_tokens, each chunk reading the GPU's weights once,
  the tokens' matrix work at the GPU's 16-bit rate;
- a decode step: a fixed cost, the weights a step touches (all non-expert weights; of the routed experts the share
  B tokens x top-k reach, 1 - (1 - k/E)^tokens), the KV cache of B sequences at their mean length, the matrix work
  of B tokens, and the collectives: two all-reduces a layer under tensor parallelism, an all-gather and a
  reduce-scatter of every data-parallel rank's tokens a MoE layer under data parallelism (memory.expert_shard);
- tokens per GPU = B x output tokens / (prefill + output x decode step) / GPUs of the engine.

The GPU's peak figures come from planner/catalog.py GPU_SPEEDS; the four efficiencies (fixed step cost, fraction of
peak memory bandwidth and of peak matrix rate reached, latency of one collective) are fitted by bench/fit_layouts.py
on measured layouts and checked there on layouts they were not fitted on (docs/benchmarks.md "Layouts"). The numbers
rank layouts; they are not a promise of throughput.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from planner.architecture import ModelArchitecture
from planner.catalog import Accelerator
from planner.engine import EngineSettings
from planner.memory import expert_shard, weights_split

if TYPE_CHECKING:
    from planner.layout import Fit, Layout


@dataclass(frozen=True)
class ThroughputFit:
    """The efficiencies of the roofline, fitted by bench/fit_layouts.py (docs/benchmarks.md "Layouts")."""

    step_seconds: float
    """Fixed cost of one engine step (scheduling, sampling, launches)."""
    memory_efficiency: float
    """Fraction of the peak memory bandwidth a step's reads reach."""
    matrix_efficiency: float
    """Fraction of the peak 16-bit matrix rate the tokens' work reaches."""
    collective_seconds: float
    """Latency of one all-reduce / all-gather / reduce-scatter between the GPUs of a node."""


THROUGHPUT_FIT = ThroughputFit(step_seconds=0.000183, memory_efficiency=0.885, matrix_efficiency=0.549,
                               collective_seconds=0.000195)


@dataclass(frozen=True)
class Workload:
    input_tokens: int
    output_tokens: int
    requests: int | None = None
    """Requests in all (a benchmark's prompts, spread over the engines); None: a steady stream."""


@dataclass(frozen=True)
class Estimate:
    concurrency: int
    """Requests one engine runs at once."""
    decode_step_seconds: float
    tokens_per_s_per_gpu: float


def active_parameters(arch: ModelArchitecture) -> float:
    """Parameters a token's forward multiplies by: all but the routed experts it is not sent to, the input
    embedding (a lookup) and any vision tower; the output projection counts; weights run more than once (HRM-Text's
    stack layers, Zamba2's shared blocks) count once a run (ModelArchitecture.rerun_parameters)."""
    parts = arch.parameter_parts()
    routed = parts["experts"] * (1 - arch.experts_per_token / arch.num_experts) if arch.num_experts else 0.0
    lookup = arch.vocab_size * arch.hidden_size if not arch.tie_word_embeddings else 0
    return sum(parts.values()) - routed - lookup - parts["vision"] + arch.rerun_parameters()


def estimate(arch: ModelArchitecture, acc: Accelerator, layout: Layout, weights_bytes: float, fit: Fit,
             engine: EngineSettings, work: Workload, c: ThroughputFit = THROUGHPUT_FIT) -> Estimate:
    """Predicted output tokens per GPU of `layout` with planner/layout.py's `fit` of it."""
    tp, pp, dp = layout.tp, layout.pp, layout.dp
    max_num_seqs, max_num_batched_tokens = engine.max_num_seqs, engine.max_num_batched_tokens
    kv_tokens, kv_bytes_per_token = fit.kv_tokens, fit.kv_bytes_per_token
    length = work.input_tokens + work.output_tokens
    batch = min(max_num_seqs, kv_tokens // length)
    if batch < 1:
        return Estimate(0, math.inf, 0.0)
    gpus = layout.engine_gpus
    bandwidth = acc.memory_gb_s * 1e9 * c.memory_efficiency
    matrix = acc.tflops_16bit * 1e12 * c.matrix_efficiency
    link = acc.link_gb_s * 1e9
    flops_per_token = 2 * active_parameters(arch) / gpus
    other, routed = weights_split(arch, layout, weights_bytes)
    # weights a step reads again (HRM-Text's stack layers, Zamba2's shared blocks): read from memory on every run
    other += arch.rerun_parameters() / max(arch.parameter_count(), 1) * weights_bytes / (tp * pp)
    shard = expert_shard(arch, layout) if routed else None

    def collectives(tokens: int) -> float:
        seconds = 0.0
        message = tokens * arch.hidden_size * 2
        if tp > 1:
            seconds += arch.num_layers / pp * 2 * (c.collective_seconds + message * 2 * (tp - 1) / tp / link)
        if dp > 1 and arch.num_experts:
            seconds += arch.moe_layers / pp * 2 * (c.collective_seconds + message * (dp - 1) / link)
        return seconds

    def step(tokens: int, contexts: float) -> float:
        touched = 0.0
        if shard is not None:
            reach = tokens * shard.token_ranks * arch.experts_per_token
            touched = routed * (1 - (1 - 1 / arch.num_experts) ** reach)
        reads = other + touched + contexts * kv_bytes_per_token
        return c.step_seconds + reads / bandwidth + tokens * flops_per_token / matrix + collectives(tokens)

    per_engine = None if work.requests is None else -(-work.requests // dp)
    waves = [batch] if per_engine is None else [batch] * (per_engine // batch) + (
        [per_engine % batch] if per_engine % batch else [])
    seconds = tokens_out = 0.0
    for size in waves:
        prompt = size * work.input_tokens
        chunks = -(-prompt // max_num_batched_tokens)
        prefill = sum(step(min(max_num_batched_tokens, prompt - i * max_num_batched_tokens), 0.0)
                      for i in range(chunks))
        decode = step(size, size * (work.input_tokens + work.output_tokens / 2))
        seconds += prefill + work.output_tokens * decode
        tokens_out += size * work.output_tokens
    return Estimate(batch, step(batch, batch * (work.input_tokens + work.output_tokens / 2)),
                    tokens_out / seconds / gpus)
