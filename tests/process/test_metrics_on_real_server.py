"""Every metric the program references, checked against a real vLLM (CPU) server."""

import json
import urllib.request

import pytest

from planner import metrics


@pytest.mark.slow
def test_every_metric_the_program_references_is_exposed_by_the_real_server(vllm_server):
    body = json.dumps({"model": "tiny", "prompt": "hello", "max_tokens": 4}).encode()
    req = urllib.request.Request(vllm_server["url"] + "/v1/completions", data=body, headers={
        "Content-Type": "application/json", "Authorization": f"Bearer {vllm_server['key']}"})
    urllib.request.urlopen(req, timeout=60).read()
    with urllib.request.urlopen(vllm_server["url"] + "/metrics", timeout=30) as resp:
        text = resp.read().decode()
    sampled = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}
    missing = [name for name in metrics.KINDS if metrics.exposition_name(name) not in sampled]
    assert not missing, f"vLLM no longer exposes {missing}; update planner/metrics.py"
    for name, kind in metrics.KINDS.items():
        assert f"# TYPE {name} {kind}" in text or f"# TYPE {name}_total {kind}" in text, f"{name} is not a {kind}"


@pytest.mark.slow
def test_the_metrics_the_endpoint_picker_scores_with_are_exposed_by_the_real_server(vllm_server):
    """serving.routing epp / gke-gateway: the llm-d endpoint picker scrapes these names from each leader. The LoRA
    info gauge exists only on a server started with LoRA (vLLM registers it when lora_config is set); the picker
    then skips LoRA affinity, which this project does not configure."""
    from planner import routing

    with urllib.request.urlopen(vllm_server["url"] + "/metrics", timeout=30) as resp:
        text = resp.read().decode()
    names = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}
    wanted = [name for name in routing.EPP_METRICS if name not in routing.LORA_ONLY_METRICS]
    assert [name for name in wanted if name not in names] == []
    cache_info = next(line for line in text.splitlines() if line.startswith("vllm:cache_config_info{"))
    assert "block_size=" in cache_info  # the picker reads the block size from this info metric's labels


@pytest.mark.slow
def test_the_routing_benchmark_reads_prefix_cache_and_request_counters_from_the_real_server(vllm_server):
    """bench/routing.py judges each arm by deltas of these counters: they must exist and move with a request."""
    from bench.routing import counters

    def now() -> dict[str, float]:
        with urllib.request.urlopen(vllm_server["url"] + "/metrics", timeout=30) as resp:
            return counters(resp.read().decode())

    before = now()
    body = json.dumps({"model": "tiny", "prompt": "hello " * 40, "max_tokens": 2}).encode()
    req = urllib.request.Request(vllm_server["url"] + "/v1/completions", data=body, headers={
        "Content-Type": "application/json", "Authorization": f"Bearer {vllm_server['key']}"})
    urllib.request.urlopen(req, timeout=60).read()
    after = now()
    assert after["requests"] == before["requests"] + 1
    assert after["queries"] > before["queries"] >= before["hits"] >= 0
