"""ModelWeights under Pulumi's mocks: the disk/snapshot/image chain, the download Job, secrets, GCS access."""

import json

from tests.helpers import PROJECT_DIR, accel, full_config, model, node_config
from tools.mocks import Recording, run_program

DISK, JOB = "gcp:compute/disk:Disk", "kubernetes:batch/v1:Job"
LWS = "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet"
CHAIN_TYPES = {DISK, "gcp:compute/snapshot:Snapshot", "gcp:compute/image:Image", JOB,
               "kubernetes:core/v1:PersistentVolume", "kubernetes:core/v1:PersistentVolumeClaim"}


def chain_keys(rec: Recording) -> tuple[str, str]:
    """(download key, serving key) as the recorded names carry them."""
    job = rec.one(JOB, "download").inputs["metadata"]["name"]
    serving = next(r for r in rec.of_type(DISK) if not r.name.endswith("-staging"))
    return job.removeprefix("w-").removesuffix("-download"), serving.inputs["labels"]["vllm-gke-serving"]


def gce_and_cluster_names(rec: Recording) -> set[tuple[str, str]]:
    """Names that are unique per GCP project (disks, snapshots, images) or per cluster (PersistentVolumes)."""
    return {(r.type, r.inputs.get("name") or r.inputs["metadata"]["name"]) for r in rec.resources
            if r.type in ("gcp:compute/disk:Disk", "gcp:compute/snapshot:Snapshot", "gcp:compute/image:Image",
                          "kubernetes:core/v1:PersistentVolume")}


def test_weights_chain_depends_step_by_step_and_pvc_binds_the_pv():
    rec = run_program(full_config())
    key, serving = chain_keys(rec)
    staging_pvc = rec.one("kubernetes:core/v1:PersistentVolumeClaim", f"{key}-staging")
    job = rec.one("kubernetes:batch/v1:Job", f"{key}-download")
    detached = rec.one("kubernetes:batch/v1:Job", f"{key}-detached")
    snapshot = rec.one("gcp:compute/snapshot:Snapshot", key)
    image = rec.one("gcp:compute/image:Image", key)
    disk = rec.one("gcp:compute/disk:Disk", f"{serving}-serving")
    pv = next(r for r in rec.of_type("kubernetes:core/v1:PersistentVolume") if r.name.endswith(f"{serving}-pv"))
    pvc = next(r for r in rec.of_type("kubernetes:core/v1:PersistentVolumeClaim")
               if r.name.endswith(f"{serving}-pvc"))
    assert staging_pvc.urn in job.dependencies, "the Job runs after the staging PVC exists"
    assert job.urn in detached.dependencies and detached.urn in snapshot.dependencies, \
        "the snapshot waits for the download Job, then for the staging disk's detach"
    staging_pv = rec.one("kubernetes:core/v1:PersistentVolume", f"{key}-staging")
    command = detached.inputs["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--pv") + 1] == staging_pv.inputs["metadata"]["name"]
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
    assert chain_keys(before)[0].startswith("llama-3-1-8b-instruct-")
    assert set(chain_keys(before)).isdisjoint(chain_keys(after))
    for rec in (before, after):
        key, serving = chain_keys(rec)
        chain = [r for r in rec.resources if r.type in CHAIN_TYPES and "smoke" not in r.name]
        assert len(chain) == 10
        assert all(key in r.name or serving in r.name for r in chain), [r.name for r in chain]
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
    account = f"w-{chain_keys(rec)[0]}-downloader"
    assert binding.inputs["member"].endswith(f"/subject/ns/vllm/sa/{account}")
    job = rec.one("kubernetes:batch/v1:Job", "download")
    assert job.inputs["spec"]["template"]["spec"]["serviceAccountName"].endswith("-downloader")
    assert not rec.of_type("kubernetes:core/v1:Secret"), "GCS needs no token"


def test_two_stacks_in_one_project_share_no_gce_or_cluster_scoped_name():
    """Main named the chain from model id + revision only: a second stack serving the same model got 409."""
    dev = run_program(full_config(), stack="dev")
    staging = run_program(full_config(), stack="staging")
    assert gce_and_cluster_names(dev) and gce_and_cluster_names(dev).isdisjoint(gce_and_cluster_names(staging))


def test_a_weights_disk_type_change_is_a_new_serving_chain_next_to_the_one_in_use():
    """Main kept the serving disk's name through a type change: Pulumi had to delete the disk the pods use first."""
    before = run_program(full_config())
    after = run_program(full_config(weights={"diskType": "hyperdisk-ml"}))
    serving_a, serving_b = chain_keys(before)[1], chain_keys(after)[1]
    assert serving_a != serving_b, "a new serving disk, PV and PVC"
    serving_names = {n for t, n in gce_and_cluster_names(before) if serving_a in n}
    assert serving_names and serving_names.isdisjoint(gce_and_cluster_names(after))
    assert not any(r.delete_before_replace for r in after.resources), "nothing is deleted before its replacement"
    claim = after.one("kubernetes:core/v1:PersistentVolumeClaim", f"{serving_b}-pvc").inputs["metadata"]["name"]
    lws = after.one("kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet").inputs
    volumes = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["volumes"]
    assert any(v.get("persistentVolumeClaim", {}).get("claimName") == claim for v in volumes), "groups roll to it"


def test_a_failed_download_job_is_replaced_by_the_next_up():
    job = run_program(full_config()).one(JOB, "download")
    assert job.inputs["metadata"]["annotations"]["pulumi.com/replaceUnready"] == "true"


def test_snapshot_image_and_disks_get_a_create_timeout_for_their_size():
    rec = run_program(full_config("prod"))
    for res in [*rec.of_type(DISK), *rec.of_type("gcp:compute/snapshot:Snapshot"),
                *rec.of_type("gcp:compute/image:Image")]:
        seconds = int(res.create_timeout.rstrip("s"))
        assert seconds >= 20 * 60 and seconds >= 2 * rec.of_type(DISK)[0].inputs["size"], res.name


def test_the_detach_waiter_may_only_read_volume_attachments():
    rec = run_program(full_config())
    role = rec.one("kubernetes:rbac.authorization.k8s.io/v1:ClusterRole", "detach").inputs
    assert role["rules"] == [{"apiGroups": ["storage.k8s.io"], "resources": ["volumeattachments"],
                              "verbs": ["get", "list"]}]
    binding = rec.one("kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding", "detach").inputs
    job = rec.one(JOB, "detached").inputs["spec"]["template"]["spec"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": job["serviceAccountName"], "namespace": "vllm"}]


def nas_with_remote_code(tmp_path) -> dict:
    """model section of a Llama-Nemotron (nemotron-nas) config whose config class is remote code (auto_map), as the
    published checkpoints ship it."""
    cfg = json.loads((PROJECT_DIR / "bench" / "configs" / "nemotron-super-49b.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**cfg, "auto_map": {"AutoConfig": "configuration_decilm.DeciLMConfig",
                                                    "AutoModelForCausalLM": "modeling_decilm.DeciLMForCausalLM"}}))
    return {"id": "nvidia/Llama-3_3-Nemotron-Super-49B-v1", "configFile": str(path)}


def test_a_remote_code_model_runs_with_trust_remote_code_and_its_code_on_the_weights_disk(tmp_path):
    """model.trustRemoteCode: the leader runs vLLM with --trust-remote-code, the download Job takes the repository's
    *.py (download.py --code), and the weights chain is a new one (the disk's content differs)."""
    h100 = accel("nvidia-h100-80gb", "a3-highgpu-8g")
    rec = run_program(full_config(model={**nas_with_remote_code(tmp_path), "trustRemoteCode": True},
                                  accelerator=h100))
    job = rec.one(JOB, "download").inputs["spec"]["template"]["spec"]["containers"][0]["command"]
    assert "--code" in job
    leader = rec.one(LWS).inputs["spec"]["leaderWorkerTemplate"]
    pod = leader.get("leaderTemplate") or leader["workerTemplate"]
    assert "--trust-remote-code" in pod["spec"]["containers"][0]["command"]
    without = run_program(full_config(model={**model("Llama-3.1-8B-Instruct"), "trustRemoteCode": True},
                                      accelerator=h100))
    plain = run_program(full_config(model=model("Llama-3.1-8B-Instruct"), accelerator=h100))
    assert set(chain_keys(without)).isdisjoint(chain_keys(plain)), "code on the disk is another disk"
    plain_job = plain.one(JOB, "download").inputs["spec"]["template"]["spec"]["containers"][0]["command"]
    plain_pod = plain.one(LWS).inputs["spec"]["leaderWorkerTemplate"]
    plain_pod = plain_pod.get("leaderTemplate") or plain_pod["workerTemplate"]
    assert "--code" not in plain_job and "--trust-remote-code" not in plain_pod["spec"]["containers"][0]["command"]
