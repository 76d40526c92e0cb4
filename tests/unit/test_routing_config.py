"""The endpoint picker's config model and the Envoy bootstrap (planner/routing.py), without Pulumi."""

from __future__ import annotations

import pydantic
import pytest
import yaml

from planner import routing

LEADERS = {"leaderworkerset.sigs.k8s.io/name": "vllm", "leaderworkerset.sigs.k8s.io/worker-index": "0"}


def test_the_default_profile_round_trips_and_weighs_load_over_prefix():
    config = routing.epp_config("approximate")
    again = routing.EndpointPickerConfig.model_validate(yaml.safe_load(config.to_yaml()))
    assert again == config
    weights = {ref.plugin_ref: ref.weight for ref in config.scheduling_profiles[0].plugins}
    assert weights == {"queue-scorer": 2, "kv-cache-utilization-scorer": 2, "prefix-cache-scorer": 3}
    assert weights["queue-scorer"] + weights["kv-cache-utilization-scorer"] > weights["prefix-cache-scorer"]
    assert yaml.safe_load(config.to_yaml())["apiVersion"] == "llm-d.ai/v1alpha1"
    assert "prefix-cache-scorer" not in routing.epp_config("off").scorers()


@pytest.mark.parametrize("change, message", [
    (lambda c: c["plugins"].append({"type": "magic-scorer"}), "magic-scorer"),
    (lambda c: c["schedulingProfiles"][0]["plugins"].append({"pluginRef": "nowhere"}), "refers to nowhere"),
    (lambda c: c.update(saturationDetector={}), "Extra inputs are not permitted"),
    (lambda c: c["plugins"].append({"type": "queue-scorer"}), "plugin names repeat"),
    (lambda c: c.update(apiVersion="llm-d.ai/v1"), "llm-d.ai/v1alpha1"),
])
def test_a_config_the_picker_would_crash_on_is_refused_before_it_is_rendered(change, message):
    raw = yaml.safe_load(routing.epp_config("approximate").to_yaml())
    change(raw)
    with pytest.raises(pydantic.ValidationError, match=message):
        routing.EndpointPickerConfig.model_validate(raw)


def test_the_picker_command_line_targets_the_leaders_or_the_pool():
    standalone = routing.epp_args(selector=LEADERS, target_port=8000, pool=None, secure=False)
    assert routing.selector_flag(standalone) == LEADERS
    assert standalone[standalone.index("--endpoint-target-ports") + 1] == "8000"
    pooled = routing.epp_args(selector=None, target_port=8000, pool="vllm", secure=True)
    assert routing.selector_flag(pooled) is None and pooled[pooled.index("--pool-name") + 1] == "vllm"
    assert "--secure-serving=true" in pooled and "--metrics-endpoint-auth=false" in pooled
    with pytest.raises(ValueError):
        routing.epp_args(selector=None, target_port=8000, pool=None, secure=False)


def _filters(listener: dict) -> list[dict]:
    return listener["filter_chains"][0]["filters"][0]["typed_config"]["http_filters"]


def test_the_envoy_bootstrap_picks_by_header_and_fails_open_to_the_leaders():
    boot = routing.envoy_bootstrap(leaders_host="vllm-leaders.ns.svc.cluster.local", api_port=8000,
                                   timeout_seconds=600)
    assert boot["admin"]["address"]["socket_address"]["address"] == "127.0.0.1"
    api = next(lst for lst in boot["static_resources"]["listeners"] if lst["name"] == "api")
    assert api["address"]["socket_address"]["port_value"] == routing.ROUTER_PORT
    strip, ext_proc, router = _filters(api)
    assert ext_proc["name"] == "envoy.filters.http.ext_proc" and router["name"] == "envoy.filters.http.router"
    # a client's own destination header goes before the picker sees the request (ORIGINAL_DST would follow it)
    assert strip["typed_config"]["mutations"]["request_mutations"] == [{"remove": routing.DESTINATION_HEADER}]
    proc = ext_proc["typed_config"]
    assert proc["failure_mode_allow"] is True and proc["route_cache_action"] == "CLEAR"
    assert proc["processing_mode"]["request_body_mode"] == proc["processing_mode"]["response_body_mode"] == \
        "FULL_DUPLEX_STREAMED"
    routes = api["filter_chains"][0]["filters"][0]["typed_config"]["route_config"]["virtual_hosts"][0]["routes"]
    picked, fallback = routes
    assert picked["match"]["headers"] == [{"name": routing.DESTINATION_HEADER, "present_match": True}]
    clusters = {c["name"]: c for c in boot["static_resources"]["clusters"]}
    assert clusters[picked["route"]["cluster"]]["type"] == "ORIGINAL_DST"
    assert clusters[picked["route"]["cluster"]]["original_dst_lb_config"]["http_header_name"] == \
        routing.DESTINATION_HEADER
    leaders = clusters[fallback["route"]["cluster"]]
    assert "headers" not in fallback["match"] and leaders["type"] == "STRICT_DNS"
    assert leaders["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"] \
        == {"address": "vllm-leaders.ns.svc.cluster.local", "port_value": 8000}
    epp = clusters[proc["grpc_service"]["envoy_grpc"]["cluster_name"]]
    assert epp["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"] == \
        {"address": "127.0.0.1", "port_value": routing.EPP_GRPC_PORT}
    assert "http2_protocol_options" in str(epp["typed_extension_protocol_options"])  # gRPC needs HTTP/2
    assert picked["route"]["timeout"] == fallback["route"]["timeout"] == proc["message_timeout"] == "600s"
    for listener in boot["static_resources"]["listeners"]:  # every typed config names its proto type
        for item in _filters(listener):
            assert item["typed_config"]["@type"].startswith("type.googleapis.com/envoy.extensions.")


@pytest.mark.parametrize("version, ok", [("1.34.0-gke.1626000", True), ("1.34.1-gke.1829001", True),
                                         ("1.35.0-gke.100", True), ("1.34.0-gke.1625999", False),
                                         ("1.33.9-gke.9999999", False), ("", False), ("latest", False)])
def test_gke_versions_compare_by_their_numbers(version, ok):
    problem = routing.cluster_problem(name="c", version=version, gateway_api_channel="CHANNEL_STANDARD",
                                      http_load_balancing_disabled=False, vpc_native=True)
    assert (problem is None) == ok
