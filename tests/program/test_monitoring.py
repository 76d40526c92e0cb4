"""Monitoring under Pulumi's mocks: PodMonitoring on the leaders and the dashboard."""

import json

import pytest

from planner import metrics
from tests.helpers import full_config
from tests.k8s_schema import validate_object
from tests.serving_helpers import LWS_TYPE
from tools.mocks import run_program


@pytest.fixture(scope="module")
def dev():
    return run_program(full_config())


def test_podmonitoring_scrapes_the_leaders_named_port_only(dev):
    pm = dev.one("kubernetes:monitoring.googleapis.com/v1:PodMonitoring").inputs["spec"]
    lws = dev.one(LWS_TYPE).inputs["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    assert pm["endpoints"] == [{"port": "http", "path": "/metrics", "interval": "15s"}]
    assert any(p["name"] == pm["endpoints"][0]["port"] for p in lws["ports"]), "port must match the container's"
    assert pm["selector"]["matchLabels"] == {"leaderworkerset.sigs.k8s.io/name": "vllm",
                                             "leaderworkerset.sigs.k8s.io/worker-index": "0"}
    svc = dev.one("kubernetes:core/v1:Service", "vllm-service").inputs["spec"]["selector"]
    assert pm["selector"]["matchLabels"] == svc, "metrics come from the same leader pods that serve"


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
