"""GkeCluster under Pulumi's mocks: a created cluster's features, an existing one looked up."""


from tests.helpers import NODE_POOL, full_config
from tools.mocks import run_program


def test_created_cluster_has_workload_identity_prometheus_dataplane_v2_and_image_streaming():
    rec = run_program(full_config(cluster={"name": "c", "location": "us-central1", "create": True}))
    cluster = rec.one("gcp:container/cluster:Cluster", "cluster").inputs
    assert cluster["workloadIdentityConfig"]["workloadPool"] == "my-gcp-project.svc.id.goog"
    assert cluster["monitoringConfig"]["managedPrometheus"]["enabled"] is True
    assert cluster["datapathProvider"] == "ADVANCED_DATAPATH"
    assert cluster["nodePoolDefaults"]["nodeConfigDefaults"]["gcfsConfig"]["enabled"] is True
    assert rec.one(NODE_POOL, "system").inputs["nodeConfig"]["machineType"] == "e2-standard-4"


def test_existing_cluster_is_looked_up_not_created():
    rec = run_program(full_config())
    assert not rec.of_type("gcp:container/cluster:Cluster")
    provider = rec.one("pulumi:providers:kubernetes", "k8s")
    assert "gke-gcloud-auth-plugin" in provider.inputs["kubeconfig"]


def test_in_cluster_objects_wait_for_the_system_pool_through_the_kubernetes_provider():
    """Main created the provider (so the LWS release, the adapter and the download Job) without waiting for a
    schedulable node, and destroy could take the pool away while in-cluster objects were still being deleted."""
    rec = run_program(full_config(cluster={"name": "c", "location": "us-central1", "create": True}))
    provider = rec.one("pulumi:providers:kubernetes", "k8s")
    assert rec.one(NODE_POOL, "system").urn in provider.dependencies
    users = [r for r in rec.resources if r.provider and r.provider.startswith(provider.urn)]
    assert any(r.type == "kubernetes:batch/v1:Job" for r in users), "the download Job goes through that provider"
