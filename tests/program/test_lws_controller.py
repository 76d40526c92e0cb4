"""LwsController under Pulumi's mocks: the pinned chart when asked for, nothing otherwise."""

from planner.versions import LWS_CHART, LWS_VERSION
from tests.helpers import full_config
from tools.mocks import run_program

RELEASE = "kubernetes:helm.sh/v3:Release"


def test_the_lws_chart_is_installed_at_the_pinned_version_and_waited_for():
    release = run_program(full_config()).one(RELEASE, "lws").inputs
    assert release["chart"] == LWS_CHART and release["version"] == LWS_VERSION.removeprefix("v")
    assert release["atomic"] is True, "LWS objects are rejected until the controller and its webhook serve"


def test_install_lws_false_installs_nothing_and_the_group_does_not_wait_for_it():
    rec = run_program(full_config(serving={"installLws": False}))
    assert rec.of_type(RELEASE) == []
    lws = rec.one("kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet")
    assert all("Release" not in dep for dep in lws.dependencies)


BUILT_IN_GROUPS = {"core", "apps", "batch", "autoscaling", "policy", "networking.k8s.io", "rbac.authorization.k8s.io",
                   "apiregistration.k8s.io", "helm.sh"}
CRD_INSTALLED_BY = {"leaderworkerset.x-k8s.io": RELEASE,
                    "monitoring.googleapis.com": "gcp:container/cluster:Cluster"}
"""Where each custom resource's CRD comes from: the LWS chart (serving.installLws), and GKE's Managed Service for
Prometheus (PodMonitoring), a cluster feature created clusters turn on."""


def needs(rec, resource) -> set[str]:
    """Everything a resource waits for: its dependencies, theirs, and its provider's."""
    seen, todo = set(), [*resource.dependencies, *([resource.provider.rsplit("::", 1)[0]] if resource.provider else [])]
    while todo:
        urn = todo.pop()
        if urn in seen or urn not in {r.urn for r in rec.resources}:
            continue
        seen.add(urn)
        found = rec.by_urn(urn)
        todo += [*found.dependencies, *([found.provider.rsplit("::", 1)[0]] if found.provider else [])]
    return {rec.by_urn(u).type for u in seen}


def test_every_custom_resource_waits_for_what_installs_its_crd():
    """pulumi-kubernetes previews a custom resource whose CRD the cluster lacks without failing (Check assumes it is
    namespaced and skips schema validation when the kind is unknown; Create in preview returns the inputs when the GVK
    does not exist: provider/pkg/provider/provider.go), and on `up` it maps the kind afresh once creating it fails
    (clients.ResourceClient invalidates discovery and retries). So preview and the first up on a cluster without
    LWS pass exactly when the custom resource is created after its CRD: this dependency is what guards it."""
    rec = run_program(full_config(cluster={"create": True}))
    custom = [r for r in rec.resources if r.type.startswith("kubernetes:")
              and r.type.split(":")[1].split("/")[0] not in BUILT_IN_GROUPS]
    assert {r.type.split(":")[1].split("/")[0] for r in custom} == set(CRD_INSTALLED_BY)
    for resource in custom:
        installer = CRD_INSTALLED_BY[resource.type.split(":")[1].split("/")[0]]
        assert installer in needs(rec, resource), f"{resource.type} {resource.name} does not wait for {installer}"
    cluster = rec.one("gcp:container/cluster:Cluster").inputs
    assert cluster["monitoringConfig"]["managedPrometheus"]["enabled"] is True, "PodMonitoring's CRD comes with it"
