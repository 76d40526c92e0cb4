"""Inference-aware routing in front of the leaders (serving.routing epp / gke-gateway): the llm-d endpoint picker
with an Envoy sidecar, or GKE Inference Gateway (Gateway, HTTPRoute, InferencePool, health check and backend
policies) with the same picker. Declared natively, not through the upstream chart (its defaults pull `main` tags and
request 8 CPUs); the rules and their sources are in planner/routing.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from components import load_balancer_peers
from planner import routing
from planner.commands import API_PORT, API_PORT_NAME
from planner.config import Stack
from planner.security import PART_OF, PART_OF_LABEL, container_security_context, pod_security_context
from planner.versions import ENVOY_IMAGE, EPP_IMAGE

GMP_NAMESPACE = "gmp-system"
INFERENCE_GROUP = "inference.networking.k8s.io"
GATEWAY_PORT = 80
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
"""Where client-go's in-cluster config reads the token, CA and namespace."""
EPP_RESOURCES = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "2Gi"}}
"""The picker scrapes each leader every 50 ms and scores per request: one core holds tens of replicas (the upstream
chart asks for none and its proxy for 4 CPUs / 8 GiB; both sized for a shared gateway, not one model)."""
ENVOY_RESOURCES = {"requests": {"cpu": "500m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}}
GRACE_MARGIN_SECONDS = 5
"""Past the preStop drain, for the containers to exit on SIGTERM before the kubelet kills them."""


def router_selector(name: str) -> dict[str, str]:
    """What selects the router pods (the Deployment, the picker's Service)."""
    return {"app.kubernetes.io/name": "vllm-router", "app.kubernetes.io/instance": name}


def router_labels(name: str) -> dict[str, str]:
    """The router pods' labels (vllm-leader selects them with routing epp)."""
    return {**router_selector(name), PART_OF_LABEL: PART_OF}


@dataclass(frozen=True)
class RouterArgs:
    """Inputs of Router."""

    namespace: pulumi.Input[str]
    mode: str
    """epp | gke-gateway."""
    leader_selector: dict[str, str]
    """The leader pods' labels (a multi-node group's workers serve no API)."""
    leaders_service: str
    """Headless Service of the leaders (the Envoy fail-open cluster)."""
    replicas: int
    prefix_scorer: str
    request_timeout_seconds: int
    scrape_interval: str
    gateway_class: str = routing.INTERNAL_GATEWAY_CLASS
    proxy_subnet_cidr: pulumi.Input[str] | None = None
    """The proxy-only subnet's range (gke-gateway): the GKE proxies reach the picker and the leaders from it."""
    allowed_namespaces: tuple[str, ...] = ()
    expose: str = "cluster-ip"
    source_ranges: tuple[str, ...] = ()

    @classmethod
    def from_plan(cls, stack: Stack, namespace: pulumi.Input[str], server: Any,
                  proxy_subnet_cidr: pulumi.Input[str] | None = None) -> RouterArgs:
        """`server`: the RayVllmServer whose leaders the router picks among (its leader selector and headless
        leaders Service)."""
        s = stack.settings.serving
        return cls(namespace=namespace, mode=s.routing, leader_selector=server.leader_selector,
                   leaders_service=server.leaders_service_name, replicas=s.router_replicas,
                   prefix_scorer=s.prefix_scorer,
                   request_timeout_seconds=s.request_timeout_seconds,
                   scrape_interval=stack.settings.monitoring.scrape_interval, gateway_class=s.gateway_class,
                   proxy_subnet_cidr=proxy_subnet_cidr, allowed_namespaces=s.allowed_namespaces, expose=s.expose,
                   source_ranges=s.source_ranges)


class Router(pulumi.ComponentResource):
    """The endpoint picker's Deployment (with Envoy in epp mode), its config, RBAC, PodMonitoring and
    NetworkPolicy; in gke-gateway mode also its Service and the Gateway API objects."""

    labels: dict[str, str]
    """The router pods' labels (vllm-leader selects them in epp mode)."""
    gateway_address: pulumi.Output[str] | None

    def __init__(self, name: str, args: RouterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("vllm-gke:serving:Router", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        ns, gateway = args.namespace, args.mode == routing.GATEWAY
        router = f"{name}-router"
        self.labels = labels = router_labels(name)
        meta = {"namespace": ns, "labels": labels}
        config = routing.epp_config(args.prefix_scorer)
        epp_config = k8s.core.v1.ConfigMap(f"{name}-epp-config", metadata={"name": f"{name}-epp", **meta},
                                           data={routing.CONFIG_FILE: config.to_yaml()}, opts=child)
        volumes: list[dict[str, Any]] = [
            {"name": "epp-config", "configMap": {"name": f"{name}-epp"}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
            # The picker's API credentials, mounted into its container alone (Envoy gets none): what the automount
            # would project, with a one-hour token that the kubelet rotates.
            {"name": "api-token", "projected": {"defaultMode": 0o444, "sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace",
                                            "fieldRef": {"fieldPath": "metadata.namespace"}}]}}]}}]

        # Least privilege: the picker reads pods (endpoints and their readiness) and, behind the gateway, its pool.
        account = k8s.core.v1.ServiceAccount(f"{name}-epp-sa", metadata={"name": router, **meta}, opts=child)
        role = k8s.rbac.v1.Role(f"{name}-epp-role", metadata={"name": router, **meta},
                                rules=routing.epp_rbac_rules(pool=gateway), opts=child)
        binding = k8s.rbac.v1.RoleBinding(
            f"{name}-epp-binding", metadata={"name": router, **meta},
            role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": router},
            subjects=[{"kind": "ServiceAccount", "name": router, "namespace": ns}], opts=child)

        security = container_security_context()
        # Both containers keep serving this long once the pod is told to stop (kubelet-side sleep: the images have no
        # shell), so requests already running finish; Envoy itself closes its listeners at once on SIGTERM.
        drain = routing.router_drain_seconds(args.request_timeout_seconds)
        stop = {"preStop": {"sleep": {"seconds": drain}}}
        epp = {
            "name": "epp", "image": EPP_IMAGE,
            "args": routing.epp_args(selector=None if gateway else args.leader_selector, target_port=API_PORT,
                                     pool=name if gateway else None, secure=gateway),
            "env": [{"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
            "ports": [{"name": "grpc", "containerPort": routing.EPP_GRPC_PORT},
                      {"name": "grpc-health", "containerPort": routing.EPP_HEALTH_PORT},
                      {"name": "metrics", "containerPort": routing.EPP_METRICS_PORT}],
            "resources": EPP_RESOURCES, "securityContext": security, "lifecycle": stop,
            "readinessProbe": {"grpc": {"port": routing.EPP_HEALTH_PORT, "service": routing.EPP_HEALTH_SERVICE},
                               "periodSeconds": 2, "failureThreshold": 3},
            "livenessProbe": {"grpc": {"port": routing.EPP_HEALTH_PORT, "service": routing.EPP_HEALTH_SERVICE},
                              "initialDelaySeconds": 5, "periodSeconds": 10, "failureThreshold": 3},
            "volumeMounts": [{"name": "epp-config", "mountPath": "/config", "readOnly": True},
                             {"name": "tmp", "mountPath": "/tmp"},
                             {"name": "api-token", "mountPath": SERVICE_ACCOUNT_DIR, "readOnly": True}]}
        containers = [epp]
        if not gateway:
            leaders_host = pulumi.Output.concat(args.leaders_service, ".", ns, ".svc.cluster.local")
            bootstrap = leaders_host.apply(lambda host: yaml.safe_dump(routing.envoy_bootstrap(
                leaders_host=host, api_port=API_PORT, timeout_seconds=args.request_timeout_seconds), sort_keys=False))
            envoy_config = k8s.core.v1.ConfigMap(f"{name}-envoy-config", metadata={"name": f"{name}-envoy", **meta},
                                                 data={"envoy.yaml": bootstrap}, opts=child)
            volumes.append({"name": "envoy-config", "configMap": {"name": f"{name}-envoy"}})
            containers.insert(0, {
                "name": "envoy", "image": ENVOY_IMAGE,
                "args": ["-c", "/etc/envoy/envoy.yaml", "--log-level", "warn", "--drain-strategy", "immediate",
                         "--drain-time-s", "15"],
                "ports": [{"name": API_PORT_NAME, "containerPort": routing.ROUTER_PORT},
                          {"name": "ready", "containerPort": routing.ENVOY_READY_PORT}],
                "resources": ENVOY_RESOURCES, "securityContext": security, "lifecycle": stop,
                "readinessProbe": {"httpGet": {"path": "/ready", "port": "ready"}, "periodSeconds": 5,
                                   "failureThreshold": 2},
                "livenessProbe": {"httpGet": {"path": "/ready", "port": "ready"}, "periodSeconds": 10,
                                  "failureThreshold": 3},
                "volumeMounts": [{"name": "envoy-config", "mountPath": "/etc/envoy", "readOnly": True},
                                 {"name": "tmp", "mountPath": "/tmp"}]})
        depends = [epp_config, account, role, binding, *([envoy_config] if not gateway else [])]
        self.gateway_address = None
        if gateway:
            # Pulumi waits for a Deployment to be Available, and a picker in pool mode is ready only once it has read
            # its InferencePool (llm-d-router cmd/epp/runner/health.go): the pool comes first, the picker after it.
            depends += self._gateway(name, args, meta)
        self.deployment = k8s.apps.v1.Deployment(
            router, metadata={"name": router, **meta},
            spec={"replicas": args.replicas,
                  # The new pod serves before the old one drains: a Recreate rollout would leave no router for the
                  # whole drain. Two prefix indexes overlap only for the requests the old pod still finishes.
                  "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                  "selector": {"matchLabels": router_selector(name)},
                  "template": {"metadata": {"labels": labels}, "spec": {
                      "serviceAccountName": router, "enableServiceLinks": False,
                      "automountServiceAccountToken": False,
                      "terminationGracePeriodSeconds": drain + GRACE_MARGIN_SECONDS,
                      "securityContext": pod_security_context(), "containers": containers, "volumes": volumes}}},
            opts=pulumi.ResourceOptions(parent=self, depends_on=depends))

        k8s.apiextensions.CustomResource(
            f"{name}-router-podmonitoring", api_version="monitoring.googleapis.com/v1", kind="PodMonitoring",
            metadata={"name": router, **meta},
            spec={"selector": {"matchLabels": labels},
                  "endpoints": [{"port": "metrics", "path": "/metrics", "interval": args.scrape_interval}]},
            opts=child)

        collectors = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": GMP_NAMESPACE}}}
        metrics_from = {"from": [collectors], "ports": [{"port": routing.EPP_METRICS_PORT, "protocol": "TCP"}]}
        if gateway:
            # The gateway's proxies call the picker from the proxy-only subnet, Google's health checkers probe it from
            # their own ranges.
            proxies = [{"ipBlock": {"cidr": cidr}} for cidr in (args.proxy_subnet_cidr, *routing.HEALTH_CHECK_RANGES)]
            ingress = [{"from": proxies, "ports": [{"port": routing.EPP_GRPC_PORT, "protocol": "TCP"},
                                                   {"port": routing.EPP_HEALTH_PORT, "protocol": "TCP"}]},
                       metrics_from]
        else:
            clients: list[dict[str, Any]] = [{"podSelector": {}}]
            clients += [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": n}}}
                        for n in args.allowed_namespaces]
            clients += load_balancer_peers(args.expose, args.source_ranges)
            ingress = [{"from": clients, "ports": [{"port": routing.ROUTER_PORT, "protocol": "TCP"}]}, metrics_from]
        k8s.networking.v1.NetworkPolicy(
            f"{name}-router-netpol", metadata={"name": router, **meta},
            spec={"podSelector": {"matchLabels": labels}, "policyTypes": ["Ingress"], "ingress": ingress},
            opts=child)

        self.register_outputs({})

    def _gateway(self, name: str, args: RouterArgs, meta: dict[str, Any]) -> list[pulumi.Resource]:
        """Gateway -> HTTPRoute -> InferencePool (leaders, picked by the EPP through its Service), the leaders'
        health check on /health (vLLM answers 404 on /) and the backend timeout for long generations. Returns what
        the picker's Deployment waits for: its pool and its Service."""
        child = pulumi.ResourceOptions(parent=self)
        epp_service = f"{name}-epp"
        service = k8s.core.v1.Service(
            f"{name}-epp-service", metadata={"name": epp_service, **meta},
            spec={"type": "ClusterIP", "selector": router_selector(name),
                  "ports": [{"name": "grpc", "port": routing.EPP_GRPC_PORT, "targetPort": "grpc",
                             "protocol": "TCP", "appProtocol": "http2"}]},
            opts=child)
        pool_ref = {"group": INFERENCE_GROUP, "kind": "InferencePool", "name": name}
        pool = k8s.apiextensions.CustomResource(
            f"{name}-inferencepool", api_version=f"{INFERENCE_GROUP}/v1", kind="InferencePool",
            metadata={"name": name, **meta},
            spec={"selector": {"matchLabels": dict(args.leader_selector)}, "targetPorts": [{"number": API_PORT}],
                  "endpointPickerRef": {"name": epp_service, "port": {"number": routing.EPP_GRPC_PORT},
                                        "failureMode": "FailOpen"}},
            opts=child)
        policy = pulumi.ResourceOptions(parent=self, depends_on=[pool])
        k8s.apiextensions.CustomResource(
            f"{name}-healthcheckpolicy", api_version="networking.gke.io/v1", kind="HealthCheckPolicy",
            metadata={"name": name, **meta},
            spec={"targetRef": pool_ref, "default": {"config": {"type": "HTTP", "httpHealthCheck": {
                "requestPath": "/health", "port": API_PORT, "portSpecification": "USE_FIXED_PORT"}}}},
            opts=policy)
        k8s.apiextensions.CustomResource(
            f"{name}-gcpbackendpolicy", api_version="networking.gke.io/v1", kind="GCPBackendPolicy",
            metadata={"name": name, **meta},
            spec={"targetRef": pool_ref, "default": {"timeoutSec": args.request_timeout_seconds,
                                                     "logging": {"enabled": True}}},
            opts=policy)
        gateway = _Gateway(
            f"{name}-gateway",
            # The address the smoke Job and chat page use is known once the load balancer exists.
            metadata={"name": name, **meta,
                      "annotations": {"pulumi.com/waitFor": "jsonpath={.status.addresses[0].value}"}},
            spec={"gatewayClassName": args.gateway_class,
                  "listeners": [{"name": "http", "protocol": "HTTP", "port": GATEWAY_PORT,
                                 "allowedRoutes": {"namespaces": {"from": "Same"}}}]},
            opts=child)
        k8s.apiextensions.CustomResource(
            f"{name}-httproute", api_version="gateway.networking.k8s.io/v1", kind="HTTPRoute",
            metadata={"name": name, **meta},
            spec={"parentRefs": [{"name": name}],
                  "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                             "backendRefs": [pool_ref]}]},
            opts=pulumi.ResourceOptions(parent=self, depends_on=[gateway, pool]))
        self.gateway_address = gateway.status.apply(
            lambda status: (((status or {}).get("addresses") or [{}])[0]).get("value", ""))
        return [pool, service]


class _Gateway(k8s.apiextensions.CustomResource):
    """A Gateway whose `status` is an output (the generic CustomResource exposes only what it was given): the
    smoke Job and chat page reach the model through the address GKE writes there."""

    status: pulumi.Output[Any]

    def __init__(self, resource_name: str, metadata: dict[str, Any], spec: dict[str, Any],
                 opts: pulumi.ResourceOptions) -> None:
        props = {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway", "metadata": metadata,
                 "spec": spec, "status": None}
        opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(version=k8s._utilities.get_version()))
        pulumi.CustomResource.__init__(self, "kubernetes:gateway.networking.k8s.io/v1:Gateway", resource_name,
                                       props, opts)
