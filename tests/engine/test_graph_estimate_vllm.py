"""What vLLM 0.32.0's CUDA-graph estimate counts beyond the capture, held to its own code.

Model Runner V2's profile_cudagraph_memory (vllm/v1/worker/gpu/cudagraph_utils.py) captures the two largest FULL
decode graphs, reads free device memory before and after each, and extrapolates with _extrapolate_full_graph_memory.
torch.cuda.graph's entry empties the allocator's cache after that reading, so the second sample is minus what the
graph's eager warm-up had cached (its split-KV accumulators): planner/memory.py full_graph_extrapolation_bytes.
Here the estimate is computed by vLLM 0.32.0's own function on the capture the plan describes, and the reading order
and the cache emptying are read from vLLM's and torch's source.
"""

from __future__ import annotations

import inspect
import re

import pytest

from planner.catalog import ACCELERATORS
from planner.layout import Layout
from planner.memory import (
    FULL_GRAPH_SAMPLE_FLOOR,
    WARMUP_ACCUMULATORS,
    WARMUP_ACCUMULATORS_MLA,
    capture_bytes,
    cudagraph_bytes,
    default_engine,
    full_graph_extrapolation_bytes,
    full_graph_sizes,
    split_buffer_bytes,
)
from tests.helpers import arch

torch = pytest.importorskip("torch")
cudagraph_utils = pytest.importorskip("vllm.v1.worker.gpu.cudagraph_utils")

MIB = 2**20
H200 = default_engine(ACCELERATORS["nvidia-h200-141gb"])
L4 = default_engine(ACCELERATORS["nvidia-l4"])
ONE = Layout(1, 1, 1)


def _vllm_estimate(piecewise: float, growths: list[float], released: list[float], full_graphs: int) -> float:
    """profile_cudagraph_memory's return value for a capture whose PIECEWISE graphs took `piecewise`, whose sampled
    FULL graphs grew the pool by `growths` while their capture's entry released `released` from the cache: measured
    (the free-memory drop over the capture) - the samples + _extrapolate_full_graph_memory(samples)."""
    samples = [int(g - r) for g, r in zip(growths, released, strict=True)]
    measured = piecewise + sum(growths)
    return max(measured - sum(samples) + cudagraph_utils._extrapolate_full_graph_memory(samples, full_graphs), 0)


@pytest.mark.parametrize("name", ["Llama-3.2-1B-Instruct", "Qwen3-8B", "Mistral-7B-Instruct-v0.3",
                                  "DeepSeek-V2-Lite-Chat", "Qwen3-30B-A3B"])
@pytest.mark.parametrize("engine", [H200, L4], ids=["h200", "l4"])
def test_the_plan_adds_what_vllms_estimate_adds_to_the_capture(name, engine):
    """The first FULL graph grows the pool, the second (served by it) not at all, and each warm-up cached the plan's
    accumulators: vLLM's estimate then exceeds the capture (PIECEWISE + the first graph) by exactly the plan's term."""
    a = arch(name)
    sizes = full_graph_sizes(engine)
    count = WARMUP_ACCUMULATORS_MLA if a.kv_lora_rank else WARMUP_ACCUMULATORS
    warm = [count * split_buffer_bytes(a, ONE, engine, batch=b) for b in (sizes[-1], sizes[-2])]
    piecewise, first = 700 * MIB, 60 * MIB + warm[0]
    estimate = _vllm_estimate(piecewise, [first, 0], warm, len(sizes))
    assert estimate - (piecewise + first) == pytest.approx(full_graph_extrapolation_bytes(a, ONE, engine), abs=1)


def test_the_floor_and_sample_count_are_vllms():
    source = inspect.getsource(cudagraph_utils)
    assert cudagraph_utils._MIN_PER_GRAPH_BYTES == FULL_GRAPH_SAMPLE_FLOOR
    assert cudagraph_utils._FULL_GRAPH_PROFILING_SAMPLES == 2
    assert "return max(measured - sum(mem_samples) + full_estimate, 0)" in source


def test_the_sample_is_read_before_torch_empties_the_cache():
    """vLLM reads free memory, then enters torch.cuda.graph, whose entry empties the allocator's cache: a warm-up's
    cached blocks leave within the sample."""
    capture = inspect.getsource(cudagraph_utils.CudaGraphManager.capture)
    read = capture.index("free_before = torch.accelerator.get_memory_info()[0]")
    assert read < capture.index("torch.cuda.graph(", read)
    assert capture.index("forward_fn(CUDAGraphMode.NONE)") < read  # the eager warm-up runs before the reading
    entry = inspect.getsource(torch.cuda.graphs.graph.__enter__)
    assert re.search(r"torch\.cuda\.empty_cache\(\)", entry)
    assert entry.index("empty_cache") < entry.index("capture_begin")


def test_one_full_graph_gives_no_second_sample_and_nothing_beyond_the_capture():
    a = arch("Qwen3-8B")
    one = default_engine(ACCELERATORS["nvidia-h200-141gb"], extra_args=("--max-num-seqs", "1"))
    assert len(full_graph_sizes(one)) == 1
    assert full_graph_extrapolation_bytes(a, ONE, one) == 0
    assert cudagraph_utils._extrapolate_full_graph_memory([5 * MIB], 1) == 5 * MIB


def test_the_term_is_the_deployed_engines_only():
    """0.25.1's Model Runner V2 reserved nothing for graphs (a stub) and its V1 runner has its own estimate; the GPU
    rows, planned for 0.25.1, keep capture_bytes alone."""
    a = arch("Qwen3-8B")
    assert cudagraph_bytes(a, ONE, H200) == capture_bytes(a, ONE, H200) + full_graph_extrapolation_bytes(a, ONE, H200)
    old = default_engine(ACCELERATORS["nvidia-h200-141gb"], version="0.25.1")
    assert cudagraph_bytes(a, ONE, old) == capture_bytes(a, ONE, old) == 0


def _sampled_rows() -> list[tuple[str, dict]]:
    import json
    from pathlib import Path

    results = json.loads((Path(__file__).resolve().parents[2] / "docs" / "benchmarks" / "results.json").read_text())
    return [(batch["name"], row) for batch in results["calibration_validation"]["batches"]
            for row in batch["measured"] if row.get("full_graph_samples_mib")]


@pytest.mark.parametrize(("batch", "row"), _sampled_rows(), ids=lambda v: v if isinstance(v, str) else v["model"])
def test_the_plan_never_counts_fewer_accumulators_than_a_sampled_capture_released(batch, row):
    """Every capture sampled on a GPU (bench/calibrate.py --sample-graphs, validations 76-77): what the second FULL
    graph's entry released is at most the plan's accumulators (WARMUP_ACCUMULATORS), and at least one of them."""
    a = arch(row["model"])
    engine = default_engine(ACCELERATORS["nvidia-h200-141gb"], runner="v2")
    sizes = full_graph_sizes(H200)
    assert len(row["full_graph_samples_mib"]) == len(sizes)
    released = -row["full_graph_samples_mib"][1] * MIB
    one = split_buffer_bytes(a, ONE, engine, batch=sizes[-2])
    count = WARMUP_ACCUMULATORS_MLA if a.kv_lora_rank else WARMUP_ACCUMULATORS
    assert 0.9 * one <= released <= 1.1 * count * one
