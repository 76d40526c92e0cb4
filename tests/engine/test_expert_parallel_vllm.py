"""The per-GPU placement of a mixture-of-experts model under data, tensor and expert parallelism, held to vLLM 0.32.0's
own code: FusedMoEParallelConfig.make (the MoE group flattened over data x tensor ranks, expert parallelism instead
of sharding), determine_expert_map (whole experts per rank), FusedMoEConfig's intermediate width per partition, and
which prepare/finalize gathers every data-parallel rank's tokens. planner/memory.py expert_shard must equal what
vLLM gives the most loaded rank, and the routed-expert bytes weights_split puts on a GPU what those shapes weigh."""

from __future__ import annotations

import dataclasses

import pytest

from planner.architecture import ModelArchitecture
from planner.layout import Layout
from planner.memory import ExpertShard, expert_shard, weights_split

pytest.importorskip("vllm")

LAYOUTS = [(dp, tp, ep) for dp in (1, 2, 4, 8) for tp in (1, 2, 4) for ep in (False, True) if dp * tp <= 16]
EXPERTS = (8, 60, 64, 128, 160, 384)


class _Group:
    def __init__(self, rank: int):
        self.rank_in_group = rank


def vllm_ranks(monkeypatch, experts: int, width: int, dp: int, tp: int, ep: bool) -> list[ExpertShard]:
    """What vLLM 0.32.0 gives each GPU of a dp x tp group: (local experts, expert width, token ranks gathered)."""
    import vllm.model_executor.layers.fused_moe.config as moe_config
    from vllm.config import ParallelConfig
    from vllm.model_executor.layers.fused_moe.expert_map_manager import determine_expert_map

    parallel = ParallelConfig(enable_expert_parallel=ep)
    shards = []
    for dp_rank in range(dp):
        for tp_rank in range(tp):
            monkeypatch.setattr(moe_config, "get_dp_group", lambda r=dp_rank: _Group(r))
            monkeypatch.setattr(moe_config, "get_tensor_model_parallel_rank", lambda r=tp_rank: r)
            cfg = moe_config.FusedMoEParallelConfig.make(tp, 1, dp, 1, parallel)
            local, _, _ = determine_expert_map(cfg.ep_size, cfg.ep_rank, experts)
            # all2all_utils.maybe_make_prepare_finalize: the allgather/reduce-scatter kernels under EP with DP, the
            # naive DP path without EP; both gather over the DP group (AgRsAll2AllManager._get_comm_group)
            gathered = cfg.use_ag_rs_all2all_kernels or (not cfg.use_all2all_kernels and cfg.dp_size > 1)
            assert width % cfg.tp_size == 0 or ep, "vLLM asserts the width divides the MoE group"
            shards.append(ExpertShard(local, width // cfg.tp_size, cfg.dp_size if gathered else 1))
    return shards


def arch(experts: int, width: int = 768) -> ModelArchitecture:
    return ModelArchitecture(name="moe", model_type="qwen3_moe", num_layers=4, hidden_size=1024,
                             num_attention_heads=16, num_kv_heads=4, head_dim=64, intermediate_size=4096,
                             vocab_size=1000, max_position_embeddings=4096,
                             num_experts=experts, moe_intermediate_size=width, experts_per_token=4)


@pytest.mark.parametrize("experts", EXPERTS)
@pytest.mark.parametrize(("dp", "tp", "ep"), LAYOUTS)
def test_expert_shard_is_what_vllm_gives_the_most_loaded_gpu(monkeypatch, experts, dp, tp, ep):
    a = arch(experts)
    ranks = vllm_ranks(monkeypatch, experts, a.moe_intermediate_size, dp, tp, ep)
    most = max(ranks, key=lambda s: s.experts * s.width)
    assert expert_shard(a, Layout(tp, 1, 1, dp, ep)) == most


@pytest.mark.parametrize(("dp", "tp", "ep"), [(2, 1, True), (4, 2, True), (8, 1, True), (2, 2, False)])
def test_routed_bytes_on_a_gpu_are_its_experts_shapes(monkeypatch, dp, tp, ep):
    a = arch(128)
    weights = a.weight_bytes(2.0)
    most = max(vllm_ranks(monkeypatch, 128, a.moe_intermediate_size, dp, tp, ep), key=lambda s: s.experts * s.width)
    expected = a.moe_layers * most.experts * a.expert_matrices * a.hidden_size * most.width * 2
    other, routed = weights_split(a, Layout(tp, 1, 1, dp, ep), weights)
    assert routed == pytest.approx(expected)
    assert other == pytest.approx((weights - a.routed_expert_bytes(2.0)) / tp)


MUTATIONS = {
    "experts split over tensor ranks only": lambda a, lay: ExpertShard(
        -(-a.num_experts // lay.tp), a.moe_intermediate_size, lay.dp),
    "remainder experts dropped": lambda a, lay: ExpertShard(
        a.num_experts // (lay.dp * lay.tp), a.moe_intermediate_size, lay.dp),
    "width sharded under EP too": lambda a, lay: ExpertShard(
        -(-a.num_experts // (lay.dp * lay.tp)), a.moe_intermediate_size // (lay.dp * lay.tp), lay.dp),
    "tokens not gathered over DP": lambda a, lay: dataclasses.replace(expert_shard(a, lay), token_ranks=1),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_each_one_rule_mutation_of_the_placement_disagrees_with_vllm(monkeypatch, mutation):
    mutated = MUTATIONS[mutation]
    disagreements = 0
    for experts in EXPERTS:
        a = arch(experts)
        for dp, tp, ep in LAYOUTS:
            if not ep:
                continue
            ranks = vllm_ranks(monkeypatch, experts, a.moe_intermediate_size, dp, tp, ep)
            most = max(ranks, key=lambda s: s.experts * s.width)
            disagreements += mutated(a, Layout(tp, 1, 1, dp, ep)) != most
    assert disagreements, f"{mutation}: vLLM's placement does not tell it apart"
