"""Every vLLM metric the program references, in one place (names change between vLLM versions;
tests/process/test_metrics_on_real_server.py checks each against a real server's /metrics)."""

from __future__ import annotations

GAUGE, COUNTER, HISTOGRAM = "gauge", "counter", "histogram"

QUEUE = "vllm:num_requests_waiting"
BATCH = "vllm:num_requests_running"
KV_CACHE_USAGE = "vllm:kv_cache_usage_perc"
TTFT = "vllm:time_to_first_token_seconds"
TIME_PER_OUTPUT_TOKEN = "vllm:inter_token_latency_seconds"
E2E_LATENCY = "vllm:e2e_request_latency_seconds"
PROMPT_TOKENS = "vllm:prompt_tokens"
GENERATION_TOKENS = "vllm:generation_tokens"

KINDS: dict[str, str] = {
    QUEUE: GAUGE, BATCH: GAUGE, KV_CACHE_USAGE: GAUGE, TTFT: HISTOGRAM, TIME_PER_OUTPUT_TOKEN: HISTOGRAM,
    E2E_LATENCY: HISTOGRAM, PROMPT_TOKENS: COUNTER, GENERATION_TOKENS: COUNTER,
}

HPA_METRICS = {"queue": QUEUE, "batch": BATCH}


def managed_prometheus_type(name: str) -> str:
    """The Cloud Monitoring metric type Managed Prometheus stores a Prometheus metric under."""
    return f"prometheus.googleapis.com/{name}/{KINDS[name]}"


def custom_metric_name(name: str) -> str:
    """The name the custom-metrics Stackdriver adapter serves to an HPA (`/` becomes `|`)."""
    return managed_prometheus_type(name).replace("/", "|")


def exposition_name(name: str) -> str:
    """How the metric's first sample line is named in Prometheus text exposition."""
    return {COUNTER: f"{name}_total", HISTOGRAM: f"{name}_bucket", GAUGE: name}[KINDS[name]]
