"""Monitoring and autoscaling under mocks, and every referenced metric against a real vLLM server."""

import json
import urllib.request

import pytest

from components import metrics
from components.autoscaling import default_target
from components.mocks import run_program
from tests.helpers import full_config
from tests.k8s_schema import validate_object
from tests.serving_helpers import LWS_TYPE


@pytest.fixture(scope="module")
def dev():
    return run_program(full_config())


def test_hpa_scales_the_leaderworkerset_on_queue_depth_with_damped_scale_down(dev):
    hpa = dev.one("kubernetes:autoscaling/v2:HorizontalPodAutoscaler").inputs["spec"]
    assert hpa["scaleTargetRef"] == {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                                     "name": "vllm"}
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (1, 2)
    metric = hpa["metrics"][0]
    assert metric["type"] == "Pods"
    assert metric["pods"]["metric"]["name"] == "prometheus.googleapis.com|vllm:num_requests_waiting|gauge"
    assert metric["pods"]["target"] == {"type": "AverageValue", "averageValue": "3"}
    assert hpa["behavior"]["scaleUp"]["stabilizationWindowSeconds"] == 0
    assert hpa["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 300


def test_batch_metric_targets_just_under_the_planned_capacity():
    rec = run_program(full_config(autoscaling={"metric": "batch"}))
    metric = rec.one("kubernetes:autoscaling/v2:HorizontalPodAutoscaler").inputs["spec"]["metrics"][0]["pods"]
    assert metric["metric"]["name"] == "prometheus.googleapis.com|vllm:num_requests_running|gauge"
    assert metric["target"]["averageValue"] == "2", "dev holds 3 full sequences: target 90% of that, rounded down"
    assert default_target("batch", 1000) == 230.0, "vLLM never batches more than 256 sequences"
    explicit = run_program(full_config(autoscaling={"metric": "queue", "target": 5}))
    assert explicit.one("kubernetes:autoscaling/v2:HorizontalPodAutoscaler").inputs["spec"]["metrics"][0][
        "pods"]["target"]["averageValue"] == "5"


def test_podmonitoring_scrapes_the_leaders_named_port_only(dev):
    pm = dev.one("kubernetes:monitoring.googleapis.com/v1:PodMonitoring").inputs["spec"]
    lws = dev.one(LWS_TYPE).inputs["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    assert pm["endpoints"] == [{"port": "http", "path": "/metrics", "interval": "15s"}]
    assert any(p["name"] == pm["endpoints"][0]["port"] for p in lws["ports"]), "port must match the container's"
    assert pm["selector"]["matchLabels"] == {"leaderworkerset.sigs.k8s.io/name": "vllm",
                                             "leaderworkerset.sigs.k8s.io/worker-index": "0"}
    svc = dev.one("kubernetes:core/v1:Service", "vllm-service").inputs["spec"]["selector"]
    assert pm["selector"]["matchLabels"] == svc, "metrics come from the same leader pods that serve"


def test_adapter_iam_binding_uses_its_service_accounts_workload_identity_principal(dev):
    binding = dev.one("gcp:projects/iAMMember:IAMMember", "adapter").inputs
    assert binding["role"] == "roles/monitoring.viewer"
    assert binding["member"] == ("principal://iam.googleapis.com/projects/123456789012/locations/global/"
                                 "workloadIdentityPools/my-gcp-project.svc.id.goog/subject/ns/custom-metrics/"
                                 "sa/custom-metrics-stackdriver-adapter")
    sa = dev.one("kubernetes:core/v1:ServiceAccount", "adapter-sa").inputs["metadata"]
    assert (sa["name"], sa["namespace"]) == ("custom-metrics-stackdriver-adapter", "custom-metrics")
    groups = {r.inputs["spec"]["group"] + "/" + r.inputs["spec"]["version"]
              for r in dev.of_type("kubernetes:apiregistration.k8s.io/v1:APIService")}
    assert groups == {"custom.metrics.k8s.io/v1beta1", "custom.metrics.k8s.io/v1beta2",
                      "external.metrics.k8s.io/v1beta1"}


def test_install_adapter_false_keeps_only_the_hpa():
    rec = run_program(full_config(monitoring={"installAdapter": False, "dashboard": False}))
    assert not rec.of_type("kubernetes:apiregistration.k8s.io/v1:APIService")
    assert not rec.of_type("gcp:monitoring/dashboard:Dashboard")
    assert rec.of_type("kubernetes:autoscaling/v2:HorizontalPodAutoscaler")


def test_dashboard_queries_reference_only_known_metrics(dev):
    board = json.loads(dev.one("gcp:monitoring/dashboard:Dashboard").inputs["dashboardJson"])
    queries = [ds["timeSeriesQuery"]["prometheusQuery"] for t in board["mosaicLayout"]["tiles"]
               for ds in t["widget"]["xyChart"]["dataSets"]]
    assert len(queries) >= 14
    for name in metrics.KINDS:
        assert any(metrics.exposition_name(name) in q or name in q for q in queries), f"{name} not on the dashboard"


def test_observability_objects_are_schema_valid(dev):
    for obj in dev.kubernetes_objects():
        validate_object(obj)


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
    assert not missing, f"vLLM no longer exposes {missing}; update components/metrics.py"
    for name, kind in metrics.KINDS.items():
        assert f"# TYPE {name} {kind}" in text or f"# TYPE {name}_total {kind}" in text, f"{name} is not a {kind}"
