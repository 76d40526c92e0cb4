"""Autoscaling under Pulumi's mocks: the HPA on the LeaderWorkerSet and the metrics adapter."""


import pytest

from planner.sizing import default_target
from tests.helpers import full_config
from tools.mocks import run_program


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
    assert metric["target"]["averageValue"] == "1", \
        "dev holds 2 full sequences under vLLM 0.32.0: target 90% of that, rounded down"
    assert default_target("batch", 1000) == 230.0, "on an L4 vLLM never batches more than 256 sequences"
    assert default_target("batch", 2000, 1024) == 921.0, "on GPUs of 70 GiB or more its default is 1024"
    explicit = run_program(full_config(autoscaling={"metric": "queue", "target": 5}))
    assert explicit.one("kubernetes:autoscaling/v2:HorizontalPodAutoscaler").inputs["spec"]["metrics"][0][
        "pods"]["target"]["averageValue"] == "5"


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


def test_a_data_parallel_replica_is_scaled_on_engine_zeros_series_against_its_share_of_the_target():
    """vLLM labels each data-parallel engine's series `engine`; the HPA reads engine 0 (the API server keeps the
    engines' queues even) against target / engines, so a replica still scales on its whole load."""
    rec = run_program(full_config(model={"id": "Qwen/Qwen3-30B-A3B", "configFile": "models/Qwen3-30B-A3B.json"},
                                  accelerator={"type": "nvidia-h100-80gb", "machineType": "a3-highgpu-8g",
                                               "zones": ["us-central1-a"]},
                                  vllm={"maxModelLen": 4096}, parallelism={"data": 4, "expert": True}))
    metric = rec.one("kubernetes:autoscaling/v2:HorizontalPodAutoscaler").inputs["spec"]["metrics"][0]["pods"]
    assert metric["metric"]["selector"] == {"matchLabels": {"metric.labels.engine": "0"}}
    assert metric["target"]["averageValue"] == "0.75", "queue target 3 per replica over 4 engines"
    lws = rec.one("kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet").inputs["spec"]["leaderWorkerTemplate"]
    assert lws["size"] == 1
    container = lws["workerTemplate"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "4"
    command = container["command"]
    assert command[command.index("--data-parallel-size") + 1] == "4" and "--enable-expert-parallel" in command
