"""Inference-aware routing (issue 33) as the program renders it under Pulumi's mocks: every object of routing epp
and gke-gateway against the upstream schemas (CEL rules included) and the cluster rules; the one-line refusals, at
config time and from the cluster as the preview reads it; and each routing rule broken on purpose."""

from __future__ import annotations

import copy
from typing import Any

import pulumi
import pytest
import yaml

from planner import cluster_rules as rules
from planner import routing
from planner.errors import ConfigError
from planner.labels import LWS_NAME_LABEL, LWS_WORKER_INDEX_LABEL
from tests.helpers import full_config, settings
from tests.k8s_schema import validate_object
from tests.program.test_cluster_rules import violations
from tools.mocks import GATEWAY_ADDRESS, PROXY_ONLY_SUBNETS, Recording, run_program

LEADERS = {LWS_NAME_LABEL: "vllm", LWS_WORKER_INDEX_LABEL: "0"}


def dev(mode: str, **serving: Any) -> dict[str, Any]:
    return full_config("dev", serving={"routing": mode, **serving}, autoscaling={"maxReplicas": 2})


def objects(rec: Recording) -> list[dict[str, Any]]:
    return copy.deepcopy(rec.kubernetes_objects())


def find(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objs if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(found) == 1, [o["metadata"]["name"] for o in found]
    return found[0]


def containers(deployment: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in deployment["spec"]["template"]["spec"]["containers"]}


@pytest.mark.parametrize("mode", ["epp", "gke-gateway"])
def test_the_dev_stack_with_two_replicas_renders_valid_objects_and_breaks_no_cluster_rule(mode, epp, gateway):
    rec = epp if mode == "epp" else gateway
    kinds = {o["kind"] for o in rec.kubernetes_objects()}
    for obj in rec.kubernetes_objects():
        validate_object(obj)  # Gateway API, InferencePool, GKE policies: tools/crds.py with their CEL rules
    expected = {"Deployment", "Role", "RoleBinding", "ServiceAccount", "PodMonitoring", "NetworkPolicy"}
    if mode == "gke-gateway":
        expected |= {"Gateway", "HTTPRoute", "InferencePool", "HealthCheckPolicy", "GCPBackendPolicy"}
    assert expected <= kinds
    assert violations(dev(mode)) == []


def test_epp_mode_sends_the_api_service_through_the_router_and_keeps_the_leaders_reachable(epp):
    objs = objects(epp)
    api = find(objs, "Service", "vllm-leader")
    router = find(objs, "Deployment", "vllm-router")
    pod_labels = router["spec"]["template"]["metadata"]["labels"]
    assert api["spec"]["selector"].items() <= pod_labels.items()
    envoy, picker = containers(router)["envoy"], containers(router)["epp"]
    assert {p["name"]: p["containerPort"] for p in envoy["ports"]}[api["spec"]["ports"][0]["targetPort"]] == \
        routing.ROUTER_PORT
    leaders = find(objs, "Service", "vllm-leaders")
    assert leaders["spec"]["clusterIP"] == "None" and leaders["spec"]["selector"] == LEADERS
    assert routing.selector_flag(picker["args"]) == LEADERS
    assert "--secure-serving=false" in picker["args"]  # Envoy reaches it on the pod's loopback
    bootstrap = yaml.safe_load(find(objs, "ConfigMap", "vllm-envoy")["data"]["envoy.yaml"])
    leaders_cluster = next(c for c in bootstrap["static_resources"]["clusters"] if c["name"] == "leaders")
    address = leaders_cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]
    assert address["socket_address"]["address"] == "vllm-leaders.vllm.svc.cluster.local"
    config = routing.EndpointPickerConfig.model_validate(yaml.safe_load(
        find(objs, "ConfigMap", "vllm-epp")["data"][routing.CONFIG_FILE]))
    assert config.scorers() == {"queue-scorer", "kv-cache-utilization-scorer", "prefix-cache-scorer"}


def test_router_pods_run_non_root_read_only_with_least_privilege(epp, gateway):
    # pool mode reads the pool and watches objectives and rewrites in both groups, as upstream's pool-mode Role grants
    # (llm-d-router config/charts/llm-d-router-standalone/templates/rbac.yaml); standalone reads pods only
    read = ["get", "list", "watch"]
    pool_mode = [{"apiGroups": ["inference.networking.k8s.io"], "resources": ["inferencepools"], "verbs": read},
                 {"apiGroups": ["llm-d.ai"], "resources": ["inferenceobjectives", "inferencemodelrewrites"],
                  "verbs": read},
                 {"apiGroups": ["inference.networking.x-k8s.io"],
                  "resources": ["inferenceobjectives", "inferencemodelrewrites"], "verbs": read}]
    for rec, extra in ((epp, []), (gateway, pool_mode)):
        objs = objects(rec)
        spec = find(objs, "Deployment", "vllm-router")["spec"]["template"]["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True
        for container in spec["containers"]:
            assert container["securityContext"]["readOnlyRootFilesystem"] is True
            assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert spec["automountServiceAccountToken"] is False  # only the picker mounts API credentials
        mounts = {c["name"]: {m["mountPath"] for m in c["volumeMounts"]} for c in spec["containers"]}
        token = "/var/run/secrets/kubernetes.io/serviceaccount"
        assert token in mounts["epp"] and all(token not in m for n, m in mounts.items() if n != "epp")
        role = find(objs, "Role", "vllm-router")
        assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}, *extra]
        assert find(objs, "PodMonitoring", "vllm-router")["spec"]["endpoints"][0]["port"] == "metrics"


def test_gateway_mode_routes_through_the_pool_and_the_smoke_job_uses_the_gateway(gateway):
    objs = objects(gateway)
    pool = find(objs, "InferencePool")
    assert pool["spec"]["selector"]["matchLabels"] == LEADERS
    assert pool["spec"]["endpointPickerRef"]["failureMode"] == "FailOpen"
    route = find(objs, "HTTPRoute")
    assert route["spec"]["rules"][0]["backendRefs"][0]["kind"] == "InferencePool"
    health = find(objs, "HealthCheckPolicy")["spec"]["default"]["config"]["httpHealthCheck"]
    assert health["requestPath"] == "/health"  # vLLM answers 404 on /
    assert find(objs, "GCPBackendPolicy")["spec"]["default"]["timeoutSec"] == 600
    assert find(objs, "Gateway")["spec"]["gatewayClassName"] == "gke-l7-rilb"
    smoke = find(objs, "Job", next(o["metadata"]["name"] for o in objs if "smoke" in o["metadata"]["name"]
                                   and o["kind"] == "Job"))
    assert f"http://{GATEWAY_ADDRESS}:80" in smoke["spec"]["template"]["spec"]["containers"][0]["command"]
    # The proxies reach the leaders and the picker from the proxy-only subnet, and nothing else new does.
    cidr = PROXY_ONLY_SUBNETS[0]["ipCidrRange"]
    serving = find(objs, "NetworkPolicy", "vllm")["spec"]["ingress"][1]["from"]
    assert {"ipBlock": {"cidr": cidr}} in serving
    router = find(objs, "NetworkPolicy", "vllm-router")["spec"]["ingress"]
    checkers = [{"ipBlock": {"cidr": c}} for c in routing.HEALTH_CHECK_RANGES]  # Google's health checkers
    assert router[0]["from"] == [{"ipBlock": {"cidr": cidr}}, *checkers]
    assert all(peer in serving for peer in checkers)
    assert "--secure-serving=true" in containers(find(objs, "Deployment", "vllm-router"))["epp"]["args"]


def test_a_created_cluster_gets_the_gateway_api_and_the_proxy_only_subnet():
    rec = run_program(full_config("prod", serving={"routing": "gke-gateway", "proxySubnetCidr": "10.129.0.0/23"}))
    cluster = next(r for r in rec.resources if r.type == "gcp:container/cluster:Cluster").inputs
    assert cluster["gatewayApiConfig"] == {"channel": "CHANNEL_STANDARD"}
    assert cluster["minMasterVersion"] == routing.GATEWAY_MIN_MASTER
    assert cluster["addonsConfig"]["httpLoadBalancing"] == {"disabled": False}
    subnet = next(r for r in rec.resources if r.type == "gcp:compute/subnetwork:Subnetwork").inputs
    assert (subnet["purpose"], subnet["role"], subnet["ipCidrRange"]) == ("REGIONAL_MANAGED_PROXY", "ACTIVE",
                                                                          "10.129.0.0/23")
    serving = find(objects(rec), "NetworkPolicy", "vllm")["spec"]["ingress"][1]["from"]
    assert {"ipBlock": {"cidr": "10.129.0.0/23"}} in serving


@pytest.mark.parametrize("sections, line", [
    ({"serving": {"routing": "epp", "routerReplicas": 2}},
     "vllm-gke:serving.routerReplicas = 2: the approximate prefix scorer keeps its index in each endpoint-picker pod"),
    ({"serving": {"routing": "gke-gateway"}, "vllm": {"extraArgs": ["--no-enable-prefix-caching"]}},
     'vllm-gke:vllm.extraArgs = ["--no-enable-prefix-caching"]: --no-enable-prefix-caching turns off the prefix '
     "cache the prefix scorer routes for"),
    ({"serving": {"routing": "gke-gateway", "proxySubnetCidr": "10.129.0.0/28"}},
     "a proxy-only subnet is an IPv4 range from /8 to /26"),
])
def test_routing_settings_that_cannot_work_are_refused_in_one_line(sections, line):
    with pytest.raises(ConfigError) as info:
        settings("dev", **sections)
    assert line in str(info.value) and "\n" not in str(info.value)


def test_a_created_cluster_without_a_proxy_only_cidr_is_refused_and_the_opt_outs_are_accepted():
    with pytest.raises(ConfigError, match=r"^vllm-gke:serving.proxySubnetCidr is required with routing gke-gateway"):
        settings("prod", serving={"routing": "gke-gateway"})
    assert settings("dev", serving={"routing": "epp", "routerReplicas": 3, "prefixScorer": "off"}).serving \
        .router_replicas == 3
    assert settings("dev", serving={"routing": "epp", "prefixScorer": "off"},
                    vllm={"extraArgs": ["--no-enable-prefix-caching"]})
    # turned off, then on again: vLLM's parser keeps the last (tests/engine/test_vllm_refusals.py), so the cache is on
    assert settings("dev", serving={"routing": "epp"},
                    vllm={"extraArgs": ["--no-enable-prefix-caching", "--enable-prefix-caching"]})


@pytest.mark.parametrize("cluster, subnets, line", [
    ({"masterVersion": "1.33.5-gke.1080000"}, None,
     "cluster ml-dev runs GKE 1.33.5-gke.1080000; GKE installs the InferencePool CRD from 1.34.0-gke.1626000"),
    ({"masterVersion": "1.34.0-gke.1000"}, None, "runs GKE 1.34.0-gke.1000"),
    ({"gatewayApiConfigs": [{"channel": "CHANNEL_DISABLED"}]}, None, "cluster ml-dev has the Gateway API disabled"),
    ({"gatewayApiConfigs": []}, None, "cluster ml-dev has the Gateway API disabled"),
    ({"addonsConfigs": [{"httpLoadBalancings": [{"disabled": True}]}]}, None,
     "cluster ml-dev has the HttpLoadBalancing add-on disabled"),
    ({"networkingMode": "ROUTES", "ipAllocationPolicies": []}, None, "cluster ml-dev is not VPC-native"),
    (None, [], "network default has no proxy-only subnet in us-central1; set serving.proxySubnetCidr"),
    (None, [{**PROXY_ONLY_SUBNETS[0], "networkName": "other",
             "network": "https://www.googleapis.com/compute/v1/projects/p/global/networks/other"}],
     "network default has no proxy-only subnet in us-central1"),
])
def test_an_existing_cluster_that_cannot_carry_the_gateway_fails_the_preview_in_one_line(cluster, subnets, line):
    with pytest.raises(pulumi.RunError) as info:
        run_program(dev("gke-gateway"), cluster=cluster, proxy_subnets=subnets, preview=True)
    message = str(info.value)
    assert message.startswith("vllm-gke:serving.routing = gke-gateway: ") and line in message
    assert "\n" not in message


def test_an_existing_cluster_is_not_checked_for_gateway_features_it_does_not_need():
    old = {"masterVersion": "1.30.1-gke.1000", "gatewayApiConfigs": [], "networkingMode": "ROUTES",
           "ipAllocationPolicies": []}
    assert run_program(dev("epp"), cluster=old, proxy_subnets=[]).kubernetes_objects()


def test_service_routing_renders_exactly_what_a_stack_without_the_key_renders():
    without = run_program(full_config("dev"))
    explicit = run_program(full_config("dev", serving={"routing": "service"}))
    assert sorted((r.type, r.name, repr(r.inputs)) for r in explicit.resources) == \
        sorted((r.type, r.name, repr(r.inputs)) for r in without.resources)
    assert not [r for r in without.resources if "Router" in r.type or "InferencePool" in r.type]


# Each routing rule, broken on purpose.

def test_a_pool_or_picker_selecting_more_than_the_leaders_is_a_violation(epp, gateway):
    objs = objects(gateway)
    find(objs, "InferencePool")["spec"]["selector"]["matchLabels"] = {LWS_NAME_LABEL: "vllm"}  # workers too
    assert any("routing: InferencePool vllm/vllm selects" in p for p in rules.routing(objs))
    objs = objects(epp)
    picker = containers(find(objs, "Deployment", "vllm-router"))["epp"]
    index = picker["args"].index("--endpoint-selector")
    picker["args"][index + 1] = f"{LWS_NAME_LABEL}=vllm"
    assert any("endpoint picker selects" in p for p in rules.routing(objs))


def test_dangling_pool_references_and_ports_are_violations(gateway):
    objs = objects(gateway)
    find(objs, "HealthCheckPolicy")["spec"]["targetRef"]["name"] = "other"
    find(objs, "InferencePool")["spec"]["targetPorts"] = [{"number": 9999}]
    find(objs, "InferencePool")["spec"]["endpointPickerRef"]["port"]["number"] = 1234
    found = rules.routing(objs)
    assert any("HealthCheckPolicy vllm/vllm refers to InferencePool other" in p for p in found)
    assert any("targets port 9999" in p for p in found)
    assert any("endpointPickerRef vllm-epp:1234 is no Service port" in p for p in found)


def test_several_pickers_with_the_approximate_prefix_scorer_are_a_violation(epp):
    objs = objects(epp)
    find(objs, "Deployment", "vllm-router")["spec"]["replicas"] = 2
    assert any("runs 2 endpoint pickers with the approximate prefix scorer" in p for p in rules.routing(objs))
    assert rules.routing(objects(epp)) == []
