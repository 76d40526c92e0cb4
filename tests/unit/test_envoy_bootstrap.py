"""The router's Envoy bootstrap (planner/routing.py envoy_bootstrap) read by Envoy's own v3 API: the protos of
envoyproxy/data-plane-api (PyPI xds-protos), each typed_config resolved to its message. A field, enum value or
extension type Envoy does not know fails here, as Envoy would refuse the file at start."""

from __future__ import annotations

import copy
import importlib
import pkgutil
from typing import Any

import pytest
from envoy.config.bootstrap.v3 import bootstrap_pb2
from google.protobuf import json_format

from planner import routing


def bootstrap() -> dict[str, Any]:
    return routing.envoy_bootstrap(leaders_host="vllm-leaders.vllm.svc.cluster.local", api_port=8000,
                                   timeout_seconds=600)


def _types(value: Any) -> set[str]:
    if isinstance(value, dict):
        found = {value["@type"]} if "@type" in value else set()
        return found.union(*(_types(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_types(v) for v in value))
    return set()


def load_types(config: dict[str, Any]) -> None:
    """Import the proto modules of every `@type` the config names (an Any resolves only once its message is in the
    descriptor pool); an unknown package fails the import, as an unknown extension fails Envoy."""
    for url in _types(config):
        package = url.rsplit("/", 1)[-1].rsplit(".", 1)[0]
        module = importlib.import_module(package)
        for info in pkgutil.iter_modules(module.__path__):
            if info.name.endswith("_pb2"):
                importlib.import_module(f"{package}.{info.name}")


def parse(config: dict[str, Any]) -> bootstrap_pb2.Bootstrap:
    load_types(config)
    return json_format.ParseDict(config, bootstrap_pb2.Bootstrap(), ignore_unknown_fields=False)


def test_the_bootstrap_is_a_valid_envoy_v3_bootstrap_with_every_typed_config_resolved():
    config = bootstrap()
    message = parse(config)
    assert [c.name for c in message.static_resources.clusters] == ["picked_endpoint", "leaders", "epp"]
    for cluster in message.static_resources.clusters:
        assert cluster.circuit_breakers.thresholds[0].max_requests.value == routing.ENVOY_MAX_REQUESTS
    hcm_any = message.static_resources.listeners[0].filter_chains[0].filters[0].typed_config
    from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm
    manager = hcm.HttpConnectionManager()
    assert hcm_any.Unpack(manager)
    assert [f.name for f in manager.http_filters] == ["envoy.filters.http.header_mutation",
                                                      "envoy.filters.http.ext_proc", "envoy.filters.http.router"]
    from envoy.extensions.filters.http.header_mutation.v3 import header_mutation_pb2
    strip = header_mutation_pb2.HeaderMutation()
    assert manager.http_filters[0].typed_config.Unpack(strip)
    assert [m.remove for m in strip.mutations.request_mutations] == [routing.DESTINATION_HEADER]
    assert set(_types(config)) >= {"type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor"}


def _hcm(config: dict[str, Any]) -> dict[str, Any]:
    return config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]


@pytest.mark.parametrize("break_it", [
    lambda c: c["static_resources"]["clusters"][0].update(circuit_breaker={}),  # misspelt field
    lambda c: c["static_resources"]["clusters"][1].update(lb_policy="ROUND_ROBINS"),  # no such enum value
    lambda c: _hcm(c)["http_filters"][1]["typed_config"].update(request_body_mode="STREAMED"),  # field one level up
    lambda c: _hcm(c)["http_filters"][1]["typed_config"]["processing_mode"].update(
        request_body_mode="FULL_DUPLEX"),
    lambda c: c["static_resources"]["clusters"][2].update(connect_timeout="1 second"),  # not a Duration
], ids=["unknown-field", "unknown-enum", "field-in-wrong-message", "unknown-nested-enum", "bad-duration"])
def test_a_bootstrap_envoy_would_refuse_fails_to_parse(break_it):
    config = copy.deepcopy(bootstrap())
    break_it(config)
    with pytest.raises(json_format.ParseError):
        parse(config)


def test_an_extension_type_envoy_does_not_have_fails_to_resolve():
    config = copy.deepcopy(bootstrap())
    _hcm(config)["http_filters"][0]["typed_config"]["@type"] = "type.googleapis.com/envoy.extensions.filters.http." \
        "header_mutation.v3.HeaderMutations"
    with pytest.raises((json_format.ParseError, TypeError, KeyError)):
        parse(config)
