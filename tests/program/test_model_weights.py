"""ModelWeights under Pulumi's mocks: the disk/snapshot/image chain, the download Job, secrets, GCS access."""


from components.model_weights import weights_key
from tests.helpers import full_config, model, node_config
from tools.mocks import run_program


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
