"""Inference-aware routing (serving.routing): the llm-d endpoint picker (EPP) in front of the leaders, standalone
behind an Envoy sidecar (`epp`) or behind GKE Inference Gateway (`gke-gateway`). Pure Python: the EPP's config as a
typed model, the Envoy bootstrap, the GKE version and cluster-feature rules, and the stack-level refusals.

Sources (checked with the search tool, 2026-11):
- llm-d/llm-d-router v0.10.0, config/charts/routerlib/templates/_deployment.yaml: the EPP's flags (standalone:
  `--endpoint-selector`, `--endpoint-target-ports`; with a pool: `--pool-name`, `--pool-namespace`, `--pool-group`),
  ports 9002 (ext_proc gRPC), 9003 (gRPC health, service `inference-extension`), 9090 (metrics),
  `--metrics-endpoint-auth=false`, env NAMESPACE / POD_NAME; `_config.yaml`: the default plugins and weights
  (queue 2, KV-cache utilization 2, prefix cache 3) under `llm-d.ai/v1alpha1`; the chart's RBAC (pods read;
  inferencepools read with a pool).
- Gateway API Inference Extension, docs/proposals/004-endpoint-picker-protocol: the EPP names the chosen endpoint
  in the `x-gateway-destination-endpoint` header; the proxy forwards there (Envoy ORIGINAL_DST with
  use_http_header).
- GKE "Deploy GKE Inference Gateway": GKE 1.32.3+, VPC-native only, a proxy-only subnet, the HttpLoadBalancing
  add-on; llm-d's GKE guide: GKE installs the InferencePool CRD itself from 1.34.0-gke.1626000.
- Cloud Load Balancing "Proxy-only subnets for Envoy-based load balancers": packets from the proxies to backends come
  from the proxy-only subnet; at least 64 addresses (/26), /23 recommended; one ACTIVE REGIONAL_MANAGED_PROXY subnet
  per network and region. Cloud Load Balancing "Firewall rules": health checks come from 35.191.0.0/16 and
  130.211.0.0/22, not from the proxy-only subnet.
- llm-d/llm-d-router v0.10.0: in pool mode the EPP reads its InferencePool and watches InferenceObjective and
  InferenceModelRewrite in both groups where installed (pkg/epp/server/controller_config.go, runserver.go); the
  standalone chart's pool-mode Role grants exactly those reads (config/charts/llm-d-router-standalone/templates/
  rbac.yaml). Its Envoy preset raises every cluster's circuit breakers to 40,000 (values.yaml proxy preset envoy) and
  its proxy Deployment sleeps 5 s in preStop, kubelet-side (routerlib templates/_proxy-deployment.yaml).
- Envoy "Draining": on shutdown Envoy closes its listeners at once; "Original destination": the header ORIGINAL_DST
  reads is not sanitized, so a filter must remove a client's own copy before the picker sets it.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from planner.commands import DRAIN_SECONDS, last_switch
from planner.errors import ConfigError
from planner.vllm_flags import canonical_args

SERVICE, EPP, GATEWAY = "service", "epp", "gke-gateway"

ROUTER_PORT = 8081
"""Envoy's listener in the router pod (`vllm-leader` targets it with routing epp)."""
ENVOY_ADMIN_PORT = 19000
"""Envoy's admin interface, bound to 127.0.0.1 only."""
ENVOY_READY_PORT = 19001
"""Envoy's /ready listener (the router container's probes)."""
EPP_GRPC_PORT = 9002
EPP_HEALTH_PORT = 9003
EPP_METRICS_PORT = 9090
EPP_HEALTH_SERVICE = "inference-extension"
"""The gRPC health service the EPP reports for a single replica (upstream chart's probes)."""
DESTINATION_HEADER = "x-gateway-destination-endpoint"
HEALTH_CHECK_RANGES = ("35.191.0.0/16", "130.211.0.0/22")
"""Where Google Cloud's health checkers probe backends from (Cloud Load Balancing "Firewall rules", regional internal
and regional external Application Load Balancers): the GKE Gateway health-checks each leader (HealthCheckPolicy) and
the endpoint picker from these ranges, not from the proxy-only subnet."""
ENVOY_MAX_REQUESTS = 40_000
"""Circuit-breaker thresholds (connections, pending and active requests) of every router cluster. Envoy's default is
1,024 each: above that many concurrent requests across the replicas Envoy answers 503 without asking a leader.
llm-d-router's standalone Envoy preset sets 40,000."""
ENDPOINT_REMOVAL_SECONDS = 5
"""How long a terminating router pod waits before its drain counts: kube-proxy / Dataplane V2 and the load balancer
stop sending it new connections (llm-d-router's proxy Deployment sleeps 5 s in preStop for the same reason)."""
EPP_POOL_READS = (("", "pods"), ("inference.networking.k8s.io", "inferencepools"),
                  ("llm-d.ai", "inferenceobjectives"), ("llm-d.ai", "inferencemodelrewrites"),
                  ("inference.networking.x-k8s.io", "inferenceobjectives"),
                  ("inference.networking.x-k8s.io", "inferencemodelrewrites"))
"""(API group, resource) the EPP lists and watches in pool mode (llm-d-router v0.10.0 controller_config.go: each
objective / rewrite kind in either group where its CRD is installed; without list/watch its cache never syncs and
the pod crash-loops). The standalone chart's pool-mode Role grants these."""
EPP_SELECTOR_READS = (("", "pods"),)
"""What the EPP reads standalone on a label selector (no pool, no objectives)."""
READ_VERBS = ("get", "list", "watch")


def router_drain_seconds(request_timeout_seconds: int) -> int:
    """How long a router pod keeps serving once told to stop (a kubelet-side preStop sleep: the distroless Envoy and
    EPP images have no shell): the endpoint removal, then the requests already running, up to the leaders' own drain
    (a generation longer than that is cut by a leader restart too) or the request timeout, whichever is shorter."""
    return ENDPOINT_REMOVAL_SECONDS + min(request_timeout_seconds, DRAIN_SECONDS)


def epp_rbac_rules(*, pool: bool) -> list[dict[str, Any]]:
    """The EPP's Role: read-only, on what it reads in its mode (EPP_POOL_READS / EPP_SELECTOR_READS)."""
    by_group: dict[str, list[str]] = {}
    for group, resource in EPP_POOL_READS if pool else EPP_SELECTOR_READS:
        by_group.setdefault(group, []).append(resource)
    return [{"apiGroups": [group], "resources": resources, "verbs": list(READ_VERBS)}
            for group, resources in by_group.items()]

GATEWAY_MIN_GKE = "1.34.0-gke.1626000"
"""From this GKE version the cluster installs the InferencePool CRD (inference.networking.k8s.io/v1) itself with the
Gateway API; on older clusters a gke-gateway stack would have to own a cluster-wide CRD that GKE later takes over."""
GATEWAY_MIN_MASTER = "1.34"
"""min_master_version a created cluster gets with routing gke-gateway (every 1.34 patch GKE offers in 2026 is newer
than GATEWAY_MIN_GKE)."""
PROXY_SUBNET_PURPOSE = "REGIONAL_MANAGED_PROXY"
INTERNAL_GATEWAY_CLASS = "gke-l7-rilb"

EPP_METRICS = ("vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc",
               "vllm:lora_requests_info", "vllm:cache_config_info")
"""What the EPP's vLLM metrics extractor reads from each endpoint's /metrics (llm-d-router core-metrics-extractor
for engine vllm); tests/process/test_metrics_on_real_server.py checks that a real vLLM server exports each."""
LORA_ONLY_METRICS = ("vllm:lora_requests_info",)
"""Registered by vLLM only when it serves LoRA adapters (--enable-lora); the picker then skips LoRA affinity."""

CONFIG_API_VERSION = "llm-d.ai/v1alpha1"
"""The EndpointPickerConfig API of llm-d-router v0.10.0 (no v1 at that tag; a config file, not a CRD)."""
CONFIG_FILE = "config.yaml"
PLUGIN_TYPES = ("queue-scorer", "kv-cache-utilization-scorer", "prefix-cache-scorer", "metrics-data-source",
                "core-metrics-extractor")
"""The plugin types this project configures; each is registered by the EPP at v0.10.0."""
PREFIX_CACHING_OFF = "--no-enable-prefix-caching"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class PluginSpec(_Strict):
    type: Literal[PLUGIN_TYPES]  # type: ignore[valid-type]
    name: str | None = None
    parameters: dict[str, Any] | None = None

    @property
    def ref(self) -> str:
        return self.name or self.type


class PluginRef(_Strict):
    plugin_ref: str = Field(alias="pluginRef")
    weight: int | None = Field(None, ge=1, le=100)


class SchedulingProfile(_Strict):
    name: str = Field(min_length=1)
    plugins: tuple[PluginRef, ...] = Field(min_length=1)


class EndpointPickerConfig(_Strict):
    """The EPP's configuration file (llm-d-router apix/config/v1alpha1 EndpointPickerConfig), the fields this
    project sets. Unknown fields, unknown plugin types, dangling plugin references and duplicate names are refused
    here: the EPP itself would only find them at start, in a crash loop."""

    api_version: Literal["llm-d.ai/v1alpha1"] = Field(CONFIG_API_VERSION, alias="apiVersion")
    kind: Literal["EndpointPickerConfig"] = "EndpointPickerConfig"
    plugins: tuple[PluginSpec, ...] = Field(min_length=1)
    scheduling_profiles: tuple[SchedulingProfile, ...] = Field(alias="schedulingProfiles", min_length=1)

    @model_validator(mode="after")
    def _references(self) -> EndpointPickerConfig:
        names = [plugin.ref for plugin in self.plugins]
        if len(set(names)) != len(names):
            raise ValueError(f"plugin names repeat: {names}")
        profiles = [profile.name for profile in self.scheduling_profiles]
        if len(set(profiles)) != len(profiles):
            raise ValueError(f"profile names repeat: {profiles}")
        for profile in self.scheduling_profiles:
            for ref in profile.plugins:
                if ref.plugin_ref not in names:
                    raise ValueError(f"profile {profile.name} refers to {ref.plugin_ref}, which no plugin defines")
        return self

    def scorers(self) -> set[str]:
        """Plugin types the profiles score with."""
        by_ref = {plugin.ref: plugin.type for plugin in self.plugins}
        return {by_ref[ref.plugin_ref] for profile in self.scheduling_profiles for ref in profile.plugins}

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(by_alias=True, exclude_none=True), sort_keys=False)


def epp_config(prefix_scorer: str) -> EndpointPickerConfig:
    """The upstream chart's default profile (queue 2, KV-cache utilization 2, prefix 3: the load terms outweigh
    prefix affinity together, which llm-d's results show is needed), without the prefix scorer when it is off.
    vLLM's /metrics is plain HTTP on the API port (metrics-data-source, core-metrics-extractor for vllm)."""
    plugins: list[dict[str, Any]] = [{"type": "queue-scorer"}, {"type": "kv-cache-utilization-scorer"}]
    refs: list[dict[str, Any]] = [{"pluginRef": "queue-scorer", "weight": 2},
                                  {"pluginRef": "kv-cache-utilization-scorer", "weight": 2}]
    if prefix_scorer == "approximate":
        plugins.append({"type": "prefix-cache-scorer"})
        refs.append({"pluginRef": "prefix-cache-scorer", "weight": 3})
    plugins += [{"type": "metrics-data-source", "parameters": {"scheme": "http", "path": "/metrics"}},
                {"type": "core-metrics-extractor"}]
    return EndpointPickerConfig.model_validate(
        {"plugins": plugins, "schedulingProfiles": [{"name": "default", "plugins": refs}]})


def epp_args(*, selector: dict[str, str] | None, target_port: int, pool: str | None, secure: bool) -> list[str]:
    """The EPP's command line: standalone on a label selector (routing epp) or on an InferencePool (gke-gateway).
    `secure`: TLS on the ext_proc port (its own certificate; the gateway's proxies require it), off where Envoy
    reaches it on the pod's loopback."""
    if pool is None:
        if not selector:
            raise ValueError("a standalone EPP needs the leader selector")
        where = ["--endpoint-selector", ",".join(f"{k}={v}" for k, v in selector.items()),
                 "--endpoint-target-ports", str(target_port)]
    else:
        where = ["--pool-name", pool, "--pool-group", "inference.networking.k8s.io"]
    return [*where, f"--config-file=/config/{CONFIG_FILE}", f"--grpc-port={EPP_GRPC_PORT}",
            f"--grpc-health-port={EPP_HEALTH_PORT}", f"--metrics-port={EPP_METRICS_PORT}",
            f"--secure-serving={'true' if secure else 'false'}", "--metrics-endpoint-auth=false", "--tracing=false",
            "--zap-encoder=json"]


def selector_flag(args: list[str]) -> dict[str, str] | None:
    """The label selector an EPP command line targets (`--endpoint-selector a=b,c=d`), None when it has none."""
    for index, arg in enumerate(args):
        if arg == "--endpoint-selector" and index + 1 < len(args):
            return dict(part.split("=", 1) for part in args[index + 1].split(",") if "=" in part)
        if arg.startswith("--endpoint-selector="):
            return dict(part.split("=", 1) for part in arg.split("=", 1)[1].split(",") if "=" in part)
    return None


def _typed(kind: str, **fields: Any) -> dict[str, Any]:
    return {"@type": f"type.googleapis.com/{kind}", **fields}


def envoy_bootstrap(*, leaders_host: str, api_port: int, timeout_seconds: int) -> dict[str, Any]:
    """Envoy's static config for the router pod, written for this project.

    One listener on ROUTER_PORT. A client's own DESTINATION_HEADER is removed first (header_mutation): the
    ORIGINAL_DST cluster forwards to whatever address the header names, so only the picker may set it. The ext_proc
    filter streams headers and bodies to the EPP on the pod's loopback (FULL_DUPLEX_STREAMED both ways, as the EPP
    protocol requires) and may not fail the request: with the EPP down or slow (failure_mode_allow), the request
    has no destination header, matches the second route and goes round robin to the leaders' headless Service
    (fail-open). When the EPP answers, it sets DESTINATION_HEADER and clears the route cache, so the first route
    sends the request to exactly that endpoint (ORIGINAL_DST on the header). Every cluster's circuit breakers are at
    ENVOY_MAX_REQUESTS. Admin binds to 127.0.0.1; /ready on ENVOY_READY_PORT for the probes."""
    timeout = f"{timeout_seconds}s"
    hcm = "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
    routes = [
        {"name": "picked", "match": {"prefix": "/", "headers": [{"name": DESTINATION_HEADER, "present_match": True}]},
         "route": {"cluster": "picked_endpoint", "timeout": timeout, "idle_timeout": timeout}},
        {"name": "fail-open", "match": {"prefix": "/"},
         "route": {"cluster": "leaders", "timeout": timeout, "idle_timeout": timeout}},
    ]
    ext_proc = _typed(
        "envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor",
        grpc_service={"envoy_grpc": {"cluster_name": "epp"}, "timeout": "10s"},
        failure_mode_allow=True,
        processing_mode={"request_header_mode": "SEND", "response_header_mode": "SEND",
                         "request_body_mode": "FULL_DUPLEX_STREAMED", "response_body_mode": "FULL_DUPLEX_STREAMED",
                         "request_trailer_mode": "SEND", "response_trailer_mode": "SEND"},
        message_timeout=timeout, route_cache_action="CLEAR")
    api_listener = {
        "name": "api", "address": {"socket_address": {"address": "0.0.0.0", "port_value": ROUTER_PORT}},
        "filter_chains": [{"filters": [{"name": "envoy.filters.network.http_connection_manager",
                                        "typed_config": _typed(hcm, **{
            "stat_prefix": "api", "normalize_path": True, "merge_slashes": True,
            "common_http_protocol_options": {"headers_with_underscores_action": "REJECT_REQUEST"},
            "route_config": {"name": "api", "virtual_hosts": [
                {"name": "api", "domains": ["*"], "routes": routes}]},
            "http_filters": [
                {"name": "envoy.filters.http.header_mutation", "typed_config": _typed(
                    "envoy.extensions.filters.http.header_mutation.v3.HeaderMutation",
                    mutations={"request_mutations": [{"remove": DESTINATION_HEADER}]})},
                {"name": "envoy.filters.http.ext_proc", "typed_config": ext_proc},
                {"name": "envoy.filters.http.router", "typed_config": _typed(
                    "envoy.extensions.filters.http.router.v3.Router", suppress_envoy_headers=True)}]})}]}]}
    ready_listener = {
        "name": "ready", "address": {"socket_address": {"address": "0.0.0.0", "port_value": ENVOY_READY_PORT}},
        "filter_chains": [{"filters": [{"name": "envoy.filters.network.http_connection_manager",
                                        "typed_config": _typed(hcm, **{
            "stat_prefix": "ready",
            "route_config": {"name": "ready", "virtual_hosts": [{"name": "ready", "domains": ["*"], "routes": [
                {"match": {"prefix": "/"}, "direct_response": {"status": 404}}]}]},
            "http_filters": [
                {"name": "envoy.filters.http.health_check", "typed_config": _typed(
                    "envoy.extensions.filters.http.health_check.v3.HealthCheck", pass_through_mode=False,
                    headers=[{"name": ":path", "string_match": {"exact": "/ready"}}])},
                {"name": "envoy.filters.http.router", "typed_config": _typed(
                    "envoy.extensions.filters.http.router.v3.Router")}]})}]}]}
    h2 = {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": _typed(
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions", explicit_http_config={"http2_protocol_options": {}})}
    breakers = {"thresholds": [{"max_connections": ENVOY_MAX_REQUESTS, "max_pending_requests": ENVOY_MAX_REQUESTS,
                                "max_requests": ENVOY_MAX_REQUESTS}]}
    clusters = [
        {"name": "picked_endpoint", "type": "ORIGINAL_DST", "lb_policy": "CLUSTER_PROVIDED", "connect_timeout": "5s",
         "circuit_breakers": breakers,
         "original_dst_lb_config": {"use_http_header": True, "http_header_name": DESTINATION_HEADER}},
        {"name": "leaders", "type": "STRICT_DNS", "lb_policy": "ROUND_ROBIN", "connect_timeout": "5s",
         "circuit_breakers": breakers,
         "load_assignment": {"cluster_name": "leaders", "endpoints": [{"lb_endpoints": [{"endpoint": {"address": {
             "socket_address": {"address": leaders_host, "port_value": api_port}}}}]}]}},
        {"name": "epp", "type": "STATIC", "connect_timeout": "1s", "typed_extension_protocol_options": h2,
         "circuit_breakers": breakers,
         "load_assignment": {"cluster_name": "epp", "endpoints": [{"lb_endpoints": [{"endpoint": {"address": {
             "socket_address": {"address": "127.0.0.1", "port_value": EPP_GRPC_PORT}}}}]}]}},
    ]
    return {"admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": ENVOY_ADMIN_PORT}}},
            "static_resources": {"listeners": [api_listener, ready_listener], "clusters": clusters}}


_GKE_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?(?:-gke\.(\d+))?")


def gke_version_key(version: str) -> tuple[int, int, int, int] | None:
    """1.34.0-gke.1626000 -> (1, 34, 0, 1626000); None for text that is no GKE version."""
    found = _GKE_VERSION.match(version or "")
    if not found:
        return None
    return tuple(int(part or 0) for part in found.groups())  # type: ignore[return-value]


def cluster_problem(*, name: str, version: str, gateway_api_channel: str, http_load_balancing_disabled: bool,
                    vpc_native: bool) -> str | None:
    """Why an existing cluster cannot carry routing gke-gateway (from its description at preview), or None."""
    have, need = gke_version_key(version), gke_version_key(GATEWAY_MIN_GKE)
    if have is None or have < need:
        return (f"cluster {name} runs GKE {version or '(unknown)'}; GKE installs the InferencePool CRD from "
                f"{GATEWAY_MIN_GKE}: upgrade the control plane, or use serving.routing epp")
    if gateway_api_channel in ("", "CHANNEL_DISABLED"):
        return (f"cluster {name} has the Gateway API disabled: gcloud container clusters update {name} "
                "--gateway-api=standard, or use serving.routing epp")
    if http_load_balancing_disabled:
        return (f"cluster {name} has the HttpLoadBalancing add-on disabled: gcloud container clusters update {name} "
                "--update-addons=HttpLoadBalancing=ENABLED, or use serving.routing epp")
    if not vpc_native:
        return f"cluster {name} is not VPC-native (routes-based); GKE Gateway needs alias IPs: use serving.routing epp"
    return None


def check(settings: Any) -> list[str]:
    """Stack-level refusals of the routing keys (raises ConfigError); returns warnings."""
    serving = settings.serving
    warnings: list[str] = []
    if serving.routing == SERVICE:
        return warnings
    if serving.prefix_scorer == "approximate" and serving.router_replicas > 1:
        raise ConfigError("serving.routerReplicas", serving.router_replicas,
                          "the approximate prefix scorer keeps its index in each endpoint-picker pod, so more than "
                          "one pod scatters a prefix's requests; use 1, or set serving.prefixScorer: off")
    if serving.prefix_scorer == "approximate" and last_switch(canonical_args(settings.vllm.extra_args),
                                                               "--enable-prefix-caching") is False:
        raise ConfigError("vllm.extraArgs", list(settings.vllm.extra_args),
                          f"{PREFIX_CACHING_OFF} turns off the prefix cache the prefix scorer routes for; remove "
                          "it, or set serving.prefixScorer: off")
    if serving.routing == GATEWAY and serving.proxy_subnet_cidr is None and settings.cluster.create:
        raise ConfigError("serving.proxySubnetCidr", None,
                          "is required with routing gke-gateway on a created cluster: the GKE Gateway's proxies "
                          "need a proxy-only subnet in the region, e.g. 10.129.0.0/23")
    if settings.autoscaling.max_replicas == 1:
        warnings.append(f"serving.routing {serving.routing} with autoscaling.maxReplicas 1: there is one replica "
                        "to pick, so the router only adds a hop")
    return warnings
