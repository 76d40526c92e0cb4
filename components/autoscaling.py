"""Custom-metrics Stackdriver adapter (+ Workload Identity IAM) and an HPA on the LeaderWorkerSet."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from components import workload_identity_member
from planner.config import Stack
from planner.labels import LWS_API
from planner.metrics import HPA_METRICS, custom_metric_name
from planner.security import PART_OF, PART_OF_LABEL, container_security_context, pod_security_context
from planner.sizing import Sizing
from planner.versions import CUSTOM_METRICS_ADAPTER_IMAGE

ADAPTER_NAMESPACE = "custom-metrics"
ADAPTER_NAME = "custom-metrics-stackdriver-adapter"
ADAPTER_PORT = 6443
"""The adapter's serving port. Not 443: the pod runs as UID 10001 with every capability dropped, so it cannot
bind a port below 1024 (no NET_BIND_SERVICE); the Service still listens on 443."""
ADAPTER_CERT_DIR = "/tmp/certs"
"""The adapter writes self-signed serving certificates at start. Its default, apiserver.local.config/ under
the working directory, is on the read-only root: the crash of GoogleCloudPlatform/k8s-stackdriver#488
(`mkdir apiserver.local.config: permission denied`); custom-metrics-apiserver's fix is --cert-dir on a
writable volume (kubernetes-sigs/custom-metrics-apiserver#107, #135)."""
SCALE_DOWN_STABILIZATION_SECONDS = 300
@dataclass(frozen=True)
class AutoscalingArgs:
    """Inputs of Autoscaling."""

    project: str
    """GCP project (Workload Identity pool and IAM binding)."""
    namespace: pulumi.Input[str]
    """Namespace of the LeaderWorkerSet."""
    lws_name: str
    """The LeaderWorkerSet the HPA scales (whole groups; its scale selector picks leaders)."""
    min_replicas: int
    """HPA minReplicas."""
    max_replicas: int
    """HPA maxReplicas."""
    metric: str
    """queue | batch."""
    target: float
    """AverageValue per replica."""
    install_adapter: bool
    """False when the cluster already runs the adapter."""
    engines: int = 1
    """Data-parallel engines per replica. vLLM labels each engine's series `engine` (vllm/v1/metrics/loggers.py
    PrometheusStatLogger: labelnames model_name, engine), so a DP leader exports one series per engine; the adapter
    serves a Pods metric per series it is filtered to (metric.labels.* selectors; its cross-series reducers carry no
    group-by, so they cannot sum per pod). The HPA reads engine 0 against target / engines: the API server's load
    balancer keeps the engines' queues even (vllm/v1/engine/core_client.py DPLBAsyncMPClient), so engine 0 carries
    1/engines of the replica's."""

    def pods_metric(self) -> dict[str, object]:
        metric: dict[str, object] = {"name": custom_metric_name(HPA_METRICS[self.metric])}
        if self.engines > 1:
            metric["selector"] = {"matchLabels": {"metric.labels.engine": "0"}}
        return metric

    def per_engine_target(self) -> str:
        return f"{self.target / self.engines:g}"

    @classmethod
    def from_plan(cls, stack: Stack, sizing: Sizing, namespace: pulumi.Input[str], lws_name: str) -> AutoscalingArgs:
        scaling = stack.settings.autoscaling
        return cls(project=stack.project, namespace=namespace, lws_name=lws_name,
                   min_replicas=scaling.min_replicas, max_replicas=scaling.max_replicas, metric=scaling.metric,
                   target=sizing.hpa_target, install_adapter=stack.settings.monitoring.install_adapter,
                   engines=sizing.data_parallel_size)


def _meta(name: str, namespace: str | None = None, **scan_skips: str) -> dict[str, object]:
    """Object metadata; `scan_skips` (check id -> reason) become checkov skip annotations on this object only."""
    meta: dict[str, object] = {"name": name, "labels": {PART_OF_LABEL: PART_OF}}
    if namespace:
        meta["namespace"] = namespace
    if scan_skips:
        meta["annotations"] = {f"checkov.io/skip{i}": f"{check}={reason}"
                               for i, (check, reason) in enumerate(sorted(scan_skips.items()), 1)}
    return meta


METRIC_NAMES_ARE_RESOURCES = ("external.metrics.k8s.io serves metric values only and names each metric as a "
                              "resource, so the HPA needs a wildcard there; no Secret is reachable")


class Autoscaling(pulumi.ComponentResource):
    """The adapter that serves Managed Prometheus metrics to HPAs, and the HPA itself."""

    hpa_name: str

    def __init__(self, name: str, args: AutoscalingArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("vllm-gke:autoscaling:Autoscaling", name, None, opts)
        depends: list[pulumi.Resource] = []
        if args.install_adapter:
            depends = self._adapter(name, args)
        self.hpa_name = name
        self.hpa = k8s.autoscaling.v2.HorizontalPodAutoscaler(
            f"{name}-hpa", metadata={"name": name, "namespace": args.namespace},
            spec={
                "scaleTargetRef": {"apiVersion": LWS_API, "kind": "LeaderWorkerSet",
                                   "name": args.lws_name},
                "minReplicas": args.min_replicas, "maxReplicas": args.max_replicas,
                "metrics": [{"type": "Pods", "pods": {
                    "metric": args.pods_metric(),
                    "target": {"type": "AverageValue", "averageValue": args.per_engine_target()}}}],
                "behavior": {
                    # Queues build fast and GPUs take minutes to arrive: scale up at once, one group
                    # per minute; scale down only after 5 quiet minutes so replicas do not flap.
                    "scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
                                "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}]},
                    "scaleDown": {"stabilizationWindowSeconds": SCALE_DOWN_STABILIZATION_SECONDS,
                                  "policies": [{"type": "Pods", "value": 1, "periodSeconds": 120}]}}},
            opts=pulumi.ResourceOptions(parent=self, depends_on=depends))
        self.register_outputs({"hpa": self.hpa.metadata.name})

    def _adapter(self, name: str, args: AutoscalingArgs) -> list[pulumi.Resource]:
        child = pulumi.ResourceOptions(parent=self)
        ns = k8s.core.v1.Namespace(f"{name}-adapter-ns", metadata=_meta(ADAPTER_NAMESPACE), opts=child)
        in_ns = pulumi.ResourceOptions(parent=self, depends_on=[ns])
        account = k8s.core.v1.ServiceAccount(f"{name}-adapter-sa", metadata=_meta(ADAPTER_NAME, ADAPTER_NAMESPACE),
                                             opts=in_ns)
        # Workload Identity Federation: the adapter's KSA itself may read Cloud Monitoring; no GSA, no keys.
        iam = gcp.projects.IAMMember(
            f"{name}-adapter-monitoring-viewer", project=args.project, role="roles/monitoring.viewer",
            member=workload_identity_member(args.project, ADAPTER_NAMESPACE, ADAPTER_NAME, parent=self), opts=child)
        subject = [{"kind": "ServiceAccount", "name": ADAPTER_NAME, "namespace": ADAPTER_NAMESPACE}]
        rbac = [
            k8s.rbac.v1.ClusterRoleBinding(
                f"{name}-adapter-auth-delegator", metadata=_meta("custom-metrics:system:auth-delegator"),
                role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                          "name": "system:auth-delegator"}, subjects=subject, opts=in_ns),
            k8s.rbac.v1.RoleBinding(
                f"{name}-adapter-auth-reader", metadata=_meta("custom-metrics-auth-reader", "kube-system"),
                role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                          "name": "extension-apiserver-authentication-reader"}, subjects=subject, opts=in_ns),
            k8s.rbac.v1.ClusterRole(
                f"{name}-adapter-resource-reader", metadata=_meta("custom-metrics-resource-reader"),
                rules=[{"apiGroups": [""], "resources": ["pods", "nodes", "nodes/stats"],
                        "verbs": ["get", "list", "watch"]}], opts=child),
            k8s.rbac.v1.ClusterRoleBinding(
                f"{name}-adapter-resource-reader-binding", metadata=_meta("custom-metrics-resource-reader"),
                role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                          "name": "custom-metrics-resource-reader"}, subjects=subject, opts=in_ns),
            k8s.rbac.v1.ClusterRole(
                f"{name}-external-metrics-reader",
                metadata=_meta("external-metrics-reader", CKV_K8S_49=METRIC_NAMES_ARE_RESOURCES),
                rules=[{"apiGroups": ["external.metrics.k8s.io"], "resources": ["*"],
                        "verbs": ["list", "get", "watch"]}], opts=child),
            k8s.rbac.v1.ClusterRoleBinding(
                f"{name}-external-metrics-reader-binding",
                metadata=_meta("external-metrics-reader", CKV2_K8S_5=METRIC_NAMES_ARE_RESOURCES),
                role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                          "name": "external-metrics-reader"},
                subjects=[{"kind": "ServiceAccount", "name": "horizontal-pod-autoscaler",
                           "namespace": "kube-system"}], opts=child),
        ]
        labels = {"run": ADAPTER_NAME, "k8s-app": ADAPTER_NAME}
        deployment = k8s.apps.v1.Deployment(
            f"{name}-adapter", metadata={**_meta(
                ADAPTER_NAME, ADAPTER_NAMESPACE,
                CKV_K8S_38="the adapter authenticates callers and reads pods through the API server with its token",
                CKV_K8S_8="the upstream adapter defines no health endpoint contract; kube-aggregator marks the "
                          "APIService unavailable when the adapter stops answering",
                CKV_K8S_9="readiness is the APIService's availability condition, checked by kube-aggregator"),
                "labels": labels},
            spec={"replicas": 1, "selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels},
                "spec": {"serviceAccountName": ADAPTER_NAME,
                         "securityContext": pod_security_context(),
                         "containers": [{
                             "name": "pod-custom-metrics-stackdriver-adapter", "image": CUSTOM_METRICS_ADAPTER_IMAGE,
                             "command": ["/adapter", "--use-new-resource-model=true",
                                         "--fallback-for-container-metrics=true",
                                         f"--secure-port={ADAPTER_PORT}", f"--cert-dir={ADAPTER_CERT_DIR}"],
                             "ports": [{"name": "https", "containerPort": ADAPTER_PORT}],
                             "resources": {"requests": {"cpu": "250m", "memory": "200Mi"},
                                           "limits": {"memory": "400Mi"}},
                             "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                             "securityContext": container_security_context()}],
                         "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}]}}},
            opts=pulumi.ResourceOptions(parent=self, depends_on=[account, iam, *rbac]))
        service = k8s.core.v1.Service(
            f"{name}-adapter-svc", metadata={**_meta(ADAPTER_NAME, ADAPTER_NAMESPACE), "labels": labels},
            spec={"type": "ClusterIP", "selector": labels,
                  "ports": [{"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"}]},
            opts=in_ns)
        # Only the API server's aggregation layer calls the adapter; nothing else reaches it.
        k8s.networking.v1.NetworkPolicy(
            f"{name}-adapter-netpol", metadata={**_meta(ADAPTER_NAME, ADAPTER_NAMESPACE), "labels": labels},
            spec={"podSelector": {"matchLabels": labels}, "policyTypes": ["Ingress"],
                  "ingress": [{"ports": [{"port": ADAPTER_PORT, "protocol": "TCP"}]}]}, opts=in_ns)
        services = []
        for group, version, priority in (("custom.metrics.k8s.io", "v1beta1", 100),
                                         ("custom.metrics.k8s.io", "v1beta2", 200),
                                         ("external.metrics.k8s.io", "v1beta1", 100)):
            services.append(k8s.apiregistration.v1.APIService(
                f"{name}-apiservice-{version}-{group.split('.')[0]}", metadata=_meta(f"{version}.{group}"),
                spec={"group": group, "version": version, "groupPriorityMinimum": 100,
                      "versionPriority": priority, "insecureSkipTLSVerify": True,
                      "service": {"name": ADAPTER_NAME, "namespace": ADAPTER_NAMESPACE}},
                opts=pulumi.ResourceOptions(parent=self, depends_on=[service, deployment])))
        return services
