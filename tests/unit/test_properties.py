"""Property: any stack config yields either a valid plan or a ConfigError, never another exception."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.catalog import ACCELERATORS
from planner.config import build_settings
from planner.errors import ConfigError
from planner.sizing import plan
from tests.helpers import raw

MODELS = ["Llama-3.1-8B-Instruct", "Llama-3.1-70B-Instruct", "Llama-3.1-405B-Instruct",
          "Mixtral-8x7B-Instruct-v0.1", "Qwen2.5-7B-Instruct"]
junk = st.one_of(st.none(), st.booleans(), st.integers(-5, 300), st.floats(allow_nan=True),
                 st.text(max_size=12), st.lists(st.text(max_size=5), max_size=3))
machines = [m.name for a in ACCELERATORS.values() for m in a.machines]

configs = st.fixed_dictionaries({
    "accelerator": st.fixed_dictionaries(
        {"type": st.sampled_from(list(ACCELERATORS)), "zones": st.just(["us-central1-a"])},
        optional={"machineType": st.one_of(st.sampled_from(machines), junk),
                  "gpusPerNode": st.one_of(st.integers(0, 16), junk),
                  "provisioning": st.sampled_from(["on-demand", "spot", "reservation", "x"])}),
    "model": st.builds(lambda m: {"id": f"org/{m}", "configFile": f"models/{m}.json"}, st.sampled_from(MODELS)),
    "parallelism": st.fixed_dictionaries({}, optional={
        "tensor": st.one_of(st.integers(0, 16), junk), "pipeline": st.one_of(st.integers(0, 130), junk),
        "minConcurrentSequences": st.one_of(st.integers(0, 64), junk)}),
    "vllm": st.fixed_dictionaries({}, optional={
        "maxModelLen": st.one_of(st.integers(0, 200_000), junk),
        "gpuMemoryUtilization": st.one_of(st.floats(0, 1.2, allow_nan=False), junk),
        "kvCacheDtype": st.sampled_from(["auto", "fp8", "int3"]), "dtype": st.sampled_from(["auto", "float32", "x"])}),
    "weights": st.fixed_dictionaries({}, optional={
        "diskType": st.sampled_from(["pd-ssd", "pd-balanced", "hyperdisk-ml", "nfs"]),
        "sizeGib": st.one_of(st.integers(0, 5000), junk)}),
    "autoscaling": st.fixed_dictionaries({}, optional={
        "minReplicas": st.one_of(st.integers(0, 10), junk), "maxReplicas": st.one_of(st.integers(0, 10), junk)}),
})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs)
def test_random_configs_give_a_plan_or_a_config_error_never_another_exception(overrides):
    config = {**raw(), **overrides}
    try:
        sizing = plan(build_settings(config))
    except ConfigError as err:
        assert str(err).startswith("vllm-gke:"), "a ConfigError names its key"
        return
    assert (sizing.tensor_parallel_size * sizing.pipeline_parallel_size * sizing.data_parallel_size
            == sizing.gpus_per_replica)
    assert sizing.kv_cache_tokens_per_replica >= sizing.max_model_len, "a plan always holds one full sequence"
    assert sizing.nodes_per_replica == 1 or sizing.tensor_parallel_size <= sizing.gpus_per_node
