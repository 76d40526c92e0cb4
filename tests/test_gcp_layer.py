"""GCP layer under Pulumi mocks: cluster, GPU node pool, the weights image chain, secrets."""

import pytest

from components.catalog import ACCELERATORS
from components.mocks import run_program
from components.model_weights import weights_key
from tests.helpers import accel, full_config, model
from tests.k8s_schema import validate_object

NODE_POOL = "gcp:container/nodePool:NodePool"


def node_config(rec):
    return rec.one(NODE_POOL, "gpu").inputs


def model_for(acc_type):
    """A model whose automatic layout is single-node on every accelerator."""
    return model("Qwen2.5-7B-Instruct") if acc_type != "nvidia-tesla-t4" else {
        **model("Qwen2.5-7B-Instruct"), "weightsGib": 5.0}


@pytest.mark.parametrize("acc_type", sorted(ACCELERATORS))
def test_node_pool_matches_the_catalog_for_every_accelerator(acc_type):
    acc = ACCELERATORS[acc_type]
    machine = acc.machines[-1]
    rec = run_program(full_config(accelerator=accel(acc_type, machine.name), model=model_for(acc_type),
                                  vllm={"maxModelLen": 4096}))
    pool = node_config(rec)
    cfg = pool["nodeConfig"]
    assert cfg["machineType"] == machine.name
    gpu = cfg["guestAccelerators"][0]
    assert (gpu["type"], gpu["count"]) == (acc_type, machine.gpus)
    assert gpu["gpuDriverInstallationConfig"]["gpuDriverVersion"] == "LATEST"
    assert {"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"} in cfg["taints"]
    assert cfg["labels"]["cloud.google.com/gke-accelerator"] == acc_type
    assert pool["nodeLocations"] == ["us-central1-a"]
    assert pool["autoscaling"]["totalMinNodeCount"] == 1 and pool["autoscaling"]["totalMaxNodeCount"] == 2
    assert cfg["workloadMetadataConfig"]["mode"] == "GKE_METADATA"
    assert cfg["gvnic"]["enabled"] is True
    assert "placementPolicy" not in pool, "single-node replicas need no compact placement"
    assert bool(cfg.get("ephemeralStorageLocalSsdConfig")) == (machine.local_ssd_count > 0)
    assert {"initialNodeCount", "nodeCount"} <= set(rec.one(NODE_POOL, "gpu").ignore_changes)


def test_spot_nodes_are_spot_and_labelled_so_pods_can_select_them():
    cfg = node_config(run_program(full_config(accelerator=accel("nvidia-l4", provisioning="spot"))))["nodeConfig"]
    assert cfg["spot"] is True and cfg["labels"]["cloud.google.com/gke-spot"] == "true"


def test_reservation_nodes_consume_the_named_reservation():
    cfg = node_config(run_program(full_config(
        accelerator=accel("nvidia-l4", provisioning="reservation", reservation="l4-res"))))["nodeConfig"]
    assert cfg["reservationAffinity"] == {"consumeReservationType": "SPECIFIC_RESERVATION",
                                          "key": "compute.googleapis.com/reservation-name", "values": ["l4-res"]}
    assert cfg["spot"] is False


def test_compact_placement_only_for_multi_node_replicas_on_supporting_machines():
    multi = run_program(full_config(accelerator=accel("nvidia-l4", "g2-standard-24"),
                                    model=model("Llama-3.1-70B-Instruct")))
    pool = node_config(multi)
    assert pool["placementPolicy"] == {"type": "COMPACT"}
    assert pool["autoscaling"]["totalMaxNodeCount"] == 8, "2 replicas x 4 nodes"
    t4 = run_program(full_config(accelerator=accel("nvidia-tesla-t4"), parallelism={"tensor": 1, "pipeline": 2}))
    assert "placementPolicy" not in node_config(t4), "N1 does not support compact placement"


def test_weights_chain_depends_step_by_step_and_pvc_binds_the_pv():
    rec = run_program(full_config())
    key = weights_key("meta-llama/Llama-3.1-8B-Instruct", "main")
    staging_pvc = rec.one("kubernetes:core/v1:PersistentVolumeClaim", f"{key}-staging")
    job = rec.one("kubernetes:batch/v1:Job", key)
    snapshot = rec.one("gcp:compute/snapshot:Snapshot", key)
    image = rec.one("gcp:compute/image:Image", key)
    disk = rec.one("gcp:compute/disk:Disk", f"{key}-serving")
    pv = next(r for r in rec.of_type("kubernetes:core/v1:PersistentVolume") if r.name.endswith(f"{key}-pv"))
    pvc = next(r for r in rec.of_type("kubernetes:core/v1:PersistentVolumeClaim") if r.name.endswith(f"{key}-pvc"))
    assert staging_pvc.urn in job.dependencies, "the Job runs after the staging PVC exists"
    assert job.urn in snapshot.dependencies, "the snapshot waits for the download Job"
    assert snapshot.urn in image.dependencies and image.inputs["sourceSnapshot"].endswith(f"/snapshots/{snapshot.name}")
    assert image.urn in disk.dependencies and disk.inputs["image"].endswith(f"/images/{image.name}")
    assert disk.urn in pv.dependencies
    assert pv.inputs["spec"]["csi"]["volumeHandle"].endswith(f"/disks/{disk.inputs['name']}")
    assert pv.urn in pvc.dependencies and pvc.inputs["spec"]["volumeName"] == pv.inputs["metadata"]["name"]
    spec = pv.inputs["spec"]
    assert spec["accessModes"] == ["ReadOnlyMany"] and spec["csi"]["readOnly"] is True
    assert spec["csi"]["driver"] == "pd.csi.storage.gke.io" and spec["mountOptions"] == ["read_ahead_kb=4096"]
    zone_terms = spec["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]
    assert zone_terms == {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-central1-a"]}


def test_a_model_change_renames_the_whole_chain_and_leaves_the_node_pool_alone():
    before = run_program(full_config())
    after = run_program(full_config(model={**model("Llama-3.1-8B-Instruct"), "id": "meta-llama/Llama-3.1-8B",
                                           "revision": "v2"}))
    old_key = weights_key("meta-llama/Llama-3.1-8B-Instruct", "main")
    new_key = weights_key("meta-llama/Llama-3.1-8B", "v2")
    assert old_key != new_key
    chain_types = {"gcp:compute/disk:Disk", "gcp:compute/snapshot:Snapshot", "gcp:compute/image:Image",
                   "kubernetes:batch/v1:Job", "kubernetes:core/v1:PersistentVolume",
                   "kubernetes:core/v1:PersistentVolumeClaim"}
    for rec, key in ((before, old_key), (after, new_key)):
        chain = [r for r in rec.resources if r.type in chain_types and "smoke" not in r.name]
        assert len(chain) == 9
        assert all(key in r.name for r in chain), [r.name for r in chain if key not in r.name]
    assert node_config(before) == node_config(after), "a model change must not touch the node pool"


def test_hf_token_reaches_kubernetes_only_as_a_secret_marked_secret():
    rec = run_program(full_config(hfToken={"secure": "v1:x"}))
    secret = rec.one("kubernetes:core/v1:Secret", "hf-token")
    assert secret.inputs["stringData"] == {"__secret__": {"HF_TOKEN": "[secret]"}}, "the token must be a Pulumi secret"
    assert {"data", "stringData"} <= set(secret.additional_secret_outputs)
    job = rec.one("kubernetes:batch/v1:Job", "download")
    env = job.inputs["spec"]["template"]["spec"]["containers"][0]["env"]
    token_env = next(e for e in env if e["name"] == "HF_TOKEN")
    assert "value" not in token_env and token_env["valueFrom"]["secretKeyRef"]["key"] == "HF_TOKEN"
    for res in rec.resources:
        if res is not secret:
            assert "[secret]" not in str(res.inputs), f"{res.name} carries the token outside the Secret"


def test_gcs_source_grants_read_on_the_bucket_to_the_jobs_workload_identity_principal():
    rec = run_program(full_config(model={**model("Llama-3.1-8B-Instruct"), "source": "gcs",
                                         "gcsUri": "gs://my-models/llama"}))
    binding = rec.one("gcp:storage/bucketIAMMember:BucketIAMMember", "gcs-reader")
    assert binding.inputs["bucket"] == "my-models" and binding.inputs["role"] == "roles/storage.objectViewer"
    assert binding.inputs["member"].startswith("principal://iam.googleapis.com/projects/123456789012/")
    account = f"w-{weights_key('org/Llama-3.1-8B-Instruct', 'main')}-downloader"
    assert binding.inputs["member"].endswith(f"/subject/ns/vllm/sa/{account}")
    job = rec.one("kubernetes:batch/v1:Job", "download")
    assert job.inputs["spec"]["template"]["spec"]["serviceAccountName"].endswith("-downloader")
    assert not rec.of_type("kubernetes:core/v1:Secret"), "GCS needs no token"


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


def test_every_kubernetes_object_is_valid_against_the_upstream_schema():
    for obj in run_program(full_config()).kubernetes_objects():
        validate_object(obj)
