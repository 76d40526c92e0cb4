"""vllm-gke's Pulumi component resources, one per file, each file named after its class."""

from __future__ import annotations

from typing import Any

INTERNAL_LB = "internal-lb"


def exposed_service(expose: str, source_ranges: tuple[str, ...], spec: dict[str, Any]) -> tuple[dict, dict]:
    """(spec, annotations) of a Service exposed as serving.expose says: ClusterIP, or a GKE internal load balancer
    whose firewall admits only serving.sourceRanges (GKE turns loadBalancerSourceRanges into that rule)."""
    if expose != INTERNAL_LB:
        return {"type": "ClusterIP", **spec}, {}
    return ({"type": "LoadBalancer", **spec, "loadBalancerSourceRanges": list(source_ranges)},
            {"networking.gke.io/load-balancer-type": "Internal"})


def load_balancer_peers(expose: str, source_ranges: tuple[str, ...]) -> list[dict[str, Any]]:
    """NetworkPolicy peers for traffic through that load balancer (none for ClusterIP): the same sourceRanges."""
    return [{"ipBlock": {"cidr": cidr}} for cidr in source_ranges] if expose == INTERNAL_LB else []


def parent_depends_on(opts: Any) -> list[Any]:
    """The `depends_on` a component was created with, as a list. A component hands it on to the children that
    must wait for it, so the ordering is an explicit edge on each of them and does not rest on how an SDK
    version treats a parent's dependencies."""
    value = getattr(opts, "depends_on", None)
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def workload_identity_member(project: str, namespace: Any, service_account: Any, parent: Any) -> Any:
    """IAM member for exactly one Kubernetes service account through Workload Identity Federation
    (`principal://.../<project>.svc.id.goog/subject/ns/<ns>/sa/<ksa>`): no Google service account, no keys."""
    import pulumi
    import pulumi_gcp as gcp

    number = gcp.organizations.get_project_output(project_id=project, opts=pulumi.InvokeOptions(parent=parent)).number
    return pulumi.Output.concat("principal://iam.googleapis.com/projects/", number,
                                "/locations/global/workloadIdentityPools/", project, ".svc.id.goog/subject/ns/",
                                namespace, "/sa/", service_account)


def serving_namespace(name: str, opts: Any) -> Any:
    """The namespace the program creates for the serving objects (serving.namespace), labelled as the project's."""
    import pulumi_kubernetes as k8s

    from planner.security import PART_OF, PART_OF_LABEL

    return k8s.core.v1.Namespace("serving-namespace", metadata={"name": name, "labels": {PART_OF_LABEL: PART_OF}},
                                 opts=opts)
