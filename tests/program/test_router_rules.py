"""What Pulumi, the load balancer, the API server's RBAC, Envoy and the kubelet do with the routing objects
(planner/router_rules.py), on the objects the program renders under Pulumi's mocks: each rule holds on the dev stack
with routing epp and gke-gateway, and each breaks when its object is put back the way a real deploy failed."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from planner import router_rules as rr
from planner import routing
from planner.commands import DRAIN_SECONDS
from tests.program.test_routing import dev, find, objects
from tools.mocks import run_program

ROUTER = ("Deployment", "vllm", "vllm-router")
POOL = ("InferencePool", "vllm", "vllm")


def container(objs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    spec = find(objs, "Deployment", "vllm-router")["spec"]["template"]["spec"]
    return next(c for c in spec["containers"] if c["name"] == name)


def test_the_rendered_routing_stacks_break_no_router_rule(epp, gateway):
    for rec in (epp, gateway):
        assert rr.check(objects(rec), rec.waits()) == []


# awaits: issue 40 item 1

def test_the_picker_waits_for_its_pool_and_nothing_on_the_gateway_side_waits_for_the_picker(gateway):
    waits = gateway.waits()
    assert POOL in waits[ROUTER] and ("Service", "vllm", "vllm-epp") in waits[ROUTER]
    for kind, name in (("InferencePool", "vllm"), ("HTTPRoute", "vllm"), ("Gateway", "vllm"),
                       ("HealthCheckPolicy", "vllm"), ("GCPBackendPolicy", "vllm"), ("Service", "vllm-epp")):
        assert ROUTER not in waits[(kind, "vllm", name)], f"{kind} {name} waits for the picker: a deadlock"


def test_a_pool_that_waits_for_its_picker_is_the_deadlock_and_a_picker_created_first_never_gets_ready(gateway):
    objs, waits = objects(gateway), gateway.waits()
    deadlock = {**waits, POOL: waits[POOL] | {ROUTER}, ROUTER: waits[ROUTER] - {POOL}}
    assert any("waits for Deployment vllm/vllm-router" in p and "deadlocks" in p for p in rr.awaits(objs, deadlock))
    early = {**waits, ROUTER: waits[ROUTER] - {POOL}}
    assert any("does not wait for InferencePool vllm/vllm" in p for p in rr.awaits(objs, early))
    # a Deployment Pulumi does not await cannot deadlock it
    find(objs, "Deployment", "vllm-router")["metadata"]["annotations"] = {rr.SKIP_AWAIT: "true"}
    assert rr.awaits(objs, deadlock) == []


# reach: issue 40 item 2

def test_without_googles_health_checker_ranges_the_leaders_and_the_picker_are_unreachable(gateway):
    objs = objects(gateway)
    for name in ("vllm", "vllm-router"):
        for rule in find(objs, "NetworkPolicy", name)["spec"]["ingress"]:
            rule["from"] = [p for p in rule.get("from", [{}]) if (p.get("ipBlock") or {}).get("cidr")
                            not in routing.HEALTH_CHECK_RANGES]
    found = rr.reach(objs)
    assert any("leader pods of InferencePool vllm/vllm do not admit" in p and "port 8000" in p for p in found)
    assert any("endpoint picker pods" in p and "port grpc" in p for p in found)
    assert any("endpoint picker pods" in p and f"port {routing.EPP_HEALTH_PORT}" in p for p in found)


def test_network_policies_are_allow_lists_read_by_port_number_or_name_with_excepts():
    labels = {"app": "x"}
    policy = {"kind": "NetworkPolicy", "metadata": {"namespace": "n"},
              "spec": {"podSelector": {"matchLabels": labels}, "policyTypes": ["Ingress"], "ingress": [
                  {"from": [{"ipBlock": {"cidr": "35.191.0.0/16", "except": ["35.191.7.0/24"]}}],
                   "ports": [{"port": "http"}]}]}}
    assert rr.admits([], "n", labels, {8000}, "35.191.0.0/16")  # nothing selects the pod: all admitted
    assert rr.admits([policy], "n", labels, {8000, "http"}, "35.191.0.0/16") is False  # except carves a hole
    policy["spec"]["ingress"][0]["from"][0]["ipBlock"].pop("except")
    assert rr.admits([policy], "n", labels, {8000, "http"}, "35.191.0.0/16")
    assert rr.admits([policy], "n", labels, {8000}, "35.191.0.0/16") is False  # another port
    assert rr.admits([policy], "n", labels, {"http"}, "130.211.0.0/22") is False  # another source
    assert rr.admits([policy], "other", labels, {"http"}, "130.211.0.0/22")  # policies are per namespace


# rbac: issue 40 item 4

@pytest.mark.parametrize("group, resource", [g for g in routing.EPP_POOL_READS])
def test_a_pool_mode_picker_that_may_not_watch_one_kind_it_reads_is_a_violation(gateway, group, resource):
    objs = objects(gateway)
    role = find(objs, "Role", "vllm-router")
    for rule in role["rules"]:
        if rule["apiGroups"] == [group]:
            rule["resources"] = [r for r in rule["resources"] if r != resource]
    found = rr.rbac(objs)
    assert len(found) == 1 and f"{resource}.{group or 'core'}" in found[0] and "pool mode" in found[0]


def test_the_standalone_picker_needs_pods_only_and_a_binding_to_another_account_grants_nothing(epp):
    objs = objects(epp)
    assert rr.rbac(objs) == []
    find(objs, "RoleBinding", "vllm-router")["subjects"][0]["name"] = "someone-else"
    assert any("may not get, list and watch pods.core" in p for p in rr.rbac(objs))


# envoy: issue 40 items 5, 6 and 7

def bootstrap(objs: list[dict[str, Any]]) -> dict[str, Any]:
    return yaml.safe_load(find(objs, "ConfigMap", "vllm-envoy")["data"]["envoy.yaml"])


def put(objs: list[dict[str, Any]], config: dict[str, Any]) -> None:
    find(objs, "ConfigMap", "vllm-envoy")["data"]["envoy.yaml"] = yaml.safe_dump(config)


def test_every_router_cluster_has_its_circuit_breakers_raised_and_the_default_is_a_violation(epp):
    objs = objects(epp)
    config = bootstrap(objs)
    for cluster in config["static_resources"]["clusters"]:
        assert cluster["circuit_breakers"]["thresholds"][0]["max_requests"] == routing.ENVOY_MAX_REQUESTS
        del cluster["circuit_breakers"]
    put(objs, config)
    found = rr.envoy(objs)
    assert {p.split(" cluster ")[1].split()[0] for p in found if "circuit breakers" in p} == \
        {"picked_endpoint", "leaders", "epp"}


def test_a_clients_destination_header_is_removed_before_the_picker_and_not_after(epp):
    objs = objects(epp)
    config = bootstrap(objs)
    manager = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    names = [f["name"] for f in manager["http_filters"]]
    assert names == ["envoy.filters.http.header_mutation", "envoy.filters.http.ext_proc", "envoy.filters.http.router"]
    manager["http_filters"] = [manager["http_filters"][1], manager["http_filters"][0], manager["http_filters"][2]]
    put(objs, config)
    assert any("ORIGINAL_DST" in p and "header_mutation filter before ext_proc" in p for p in rr.envoy(objs))
    del manager["http_filters"][1]
    put(objs, config)
    assert any("ORIGINAL_DST" in p for p in rr.envoy(objs))


def test_the_router_drains_running_requests_before_sigterm_and_rolls_without_an_outage(epp):
    objs = objects(epp)
    deployment = find(objs, "Deployment", "vllm-router")
    drain = routing.ENDPOINT_REMOVAL_SECONDS + min(600, DRAIN_SECONDS)
    assert container(objs, "envoy")["lifecycle"] == {"preStop": {"sleep": {"seconds": drain}}}
    assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > drain
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    deployment["spec"]["strategy"] = {"type": "Recreate"}
    deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 30  # what shipped before
    container(objs, "envoy").pop("lifecycle")
    found = rr.envoy(objs)
    assert any("drains 0 s before SIGTERM" in p for p in found)
    assert any("rolls out with Recreate: there is no router for the whole" in p for p in found)
    assert any(f"terminationGracePeriodSeconds 30 does not outlast its {drain} s" in p for p in found)


def test_a_short_request_timeout_drains_for_that_timeout_and_the_picker_outlasts_envoy():
    rec = run_program(dev("epp", requestTimeoutSeconds=30))
    objs = objects(rec)
    assert container(objs, "envoy")["lifecycle"]["preStop"]["sleep"]["seconds"] == \
        routing.ENDPOINT_REMOVAL_SECONDS + 30
    assert rr.envoy(objs) == []
    container(objs, "epp")["lifecycle"]["preStop"]["sleep"]["seconds"] = 1
    assert any("the endpoint picker stops before Envoy has drained" in p for p in rr.envoy(objs))
