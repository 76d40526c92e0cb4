"""vllm.compileCache under Pulumi's mocks: one bucket per stack, usable only by the serving pods' account through
Workload Identity, mounted into every pod of a group through the GCS FUSE CSI driver, and handed to the launcher."""

from components.compile_cache import bucket_name
from planner.config import Stack
from tests.helpers import full_config, settings
from tests.k8s_schema import validate_object
from tools.mocks import run_program


def templates(rec) -> list[dict]:
    lws = next(o for o in rec.kubernetes_objects() if o["kind"] == "LeaderWorkerSet")
    template = lws["spec"]["leaderWorkerTemplate"]
    return [template[k] for k in ("leaderTemplate", "workerTemplate") if k in template]


def test_each_pod_of_a_group_mounts_the_stacks_bucket_and_hands_it_to_the_launcher():
    rec = run_program(full_config("prod"))
    bucket = rec.one("gcp:storage/bucket:Bucket", "compile-cache").inputs
    assert bucket["uniformBucketLevelAccess"] is True and bucket["publicAccessPrevention"] == "enforced"
    assert bucket["forceDestroy"] is True, "pulumi destroy removes it with its archives"
    assert bucket["lifecycleRules"][0]["condition"]["age"] == 30
    grant = rec.one("gcp:storage/bucketIAMMember:BucketIAMMember", "compile-cache").inputs
    assert grant["role"] == "roles/storage.objectUser"
    assert grant["member"].endswith(".svc.id.goog/subject/ns/vllm/sa/vllm-serving")
    account = next(o for o in rec.kubernetes_objects() if o["kind"] == "ServiceAccount"
                   and o["metadata"]["name"] == "vllm-serving")
    assert account["automountServiceAccountToken"] is False
    pods = templates(rec)
    assert len(pods) == 2, "prod's groups have a leader and a worker template"
    for pod in pods:
        spec = pod["spec"]
        assert pod["metadata"]["annotations"]["gke-gcsfuse/volumes"] == "true"
        assert spec["serviceAccountName"] == "vllm-serving"
        volume = next(v for v in spec["volumes"] if v["name"] == "compile-cache")
        assert volume["csi"]["driver"] == "gcsfuse.csi.storage.gke.io"
        assert volume["csi"]["volumeAttributes"]["bucketName"] == bucket["name"]
        assert "uid=10001,gid=10001" in volume["csi"]["volumeAttributes"]["mountOptions"]
        command = spec["containers"][0]["command"]
        at = command.index("--compile-cache-store")
        assert command[at + 1] == "/compile-cache" and command[at + 2] == "--compile-cache-key"
        assert command[at + 3].startswith("v0.32.0-nvidia-h100-mega-80gb-tp8pp2-len32768-")
        assert {"name": "compile-cache", "mountPath": "/compile-cache"} in spec["containers"][0]["volumeMounts"]
    lws = next(o for o in rec.kubernetes_objects() if o["kind"] == "LeaderWorkerSet")
    validate_object(lws)


def test_off_there_is_no_bucket_no_volume_and_no_flag():
    rec = run_program(full_config(vllm={"compileCache": False}))
    assert not rec.of_type("gcp:storage/bucket:Bucket")
    for pod in templates(rec):
        assert "serviceAccountName" not in pod["spec"] and "gke-gcsfuse/volumes" not in str(pod["metadata"])
        assert "--compile-cache-store" not in pod["spec"]["containers"][0]["command"]


def test_a_created_cluster_runs_the_gcs_fuse_csi_driver():
    rec = run_program(full_config("prod"))
    cluster = rec.one("gcp:container/cluster:Cluster").inputs
    assert cluster["addonsConfig"]["gcsFuseCsiDriverConfig"]["enabled"] is True


def test_bucket_names_are_per_stack_and_valid_where_project_and_stack_are_long():
    dev, prod = (Stack(settings(), "my-proj", name=f"vllm-gke/{s}") for s in ("dev", "prod"))
    assert bucket_name(dev) == "my-proj-dev-vllm-cc" and bucket_name(prod) == "my-proj-prod-vllm-cc"
    long = bucket_name(Stack(settings(), "p" * 30, name="vllm-gke/" + "s" * 40))
    assert long.startswith("vllm-cc-") and len(long) <= 63
    assert bucket_name(Stack(settings(), "google-proj", name="x/dev")).startswith("vllm-cc-"), "no 'goog' in names"
