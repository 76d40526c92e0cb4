"""The model weights as a persistent-disk image, served read-only-many to every GPU node.

Chain (each step depends on the one before, so `pulumi destroy` removes it in reverse):
    staging disk -> staging PV/PVC -> download Job -> snapshot -> image -> serving disk -> PV -> PVC
Names carry keys: the download half (staging disk to image) one made from the stack, model id, revision and disk
size; the serving half (disk, PV, PVC) one that adds the disk type and provisioned throughput. Whatever would
replace a resource in use (another model, another disk type or size) therefore gives new names: Pulumi creates
the new chain, the serving groups roll to its claim, and the old chain is deleted after that, never before.
Two stacks in one project never share a name (GCE answers 409 alreadyExists to the second).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from components import workload_identity_member
from planner.config import Stack
from planner.labels import ZONE_LABEL
from planner.security import PART_OF, PART_OF_LABEL, container_security_context, identity_env, pod_security_context
from planner.sizing import Sizing
from planner.versions import GCLOUD_IMAGE

DOWNLOADER = Path(__file__).resolve().parent.parent / "images" / "model-downloader" / "download.py"
WAIT_DETACHED = DOWNLOADER.with_name("wait_detached.py")
CSI_DRIVER = "pd.csi.storage.gke.io"
WEIGHTS_SUBDIR = "model"
"""Weights live in <disk>/model, next to ext4's lost+found."""
SERVING_MOUNT = "/models"
DOWNLOAD_RESOURCES = {"requests": {"cpu": "1", "memory": "2Gi", "ephemeral-storage": "10Gi"},
                      "limits": {"memory": "8Gi", "ephemeral-storage": "20Gi"}}
"""The download is network- and disk-bound. It runs on the untainted system pool (e2-standard-4: 3.92 CPUs and
13.3 GiB allocatable by GKE's formula, less GKE's own DaemonSets): the 4 CPUs asked before never fit there, so
the Job stayed Pending until its deadline. No CPU limit: it may use the node's idle cores."""
DETACH_TIMEOUT_SECONDS = 1800
"""How long the snapshot may wait for the staging disk's detach (kubelet unmount + CSI ControllerUnpublish take
seconds to a few minutes); past it the Job fails with the node still holding the disk."""
MULTI_ZONE = "multi-zone"
"""The zone part of a multi-zone volume handle: projects/P/zones/multi-zone/disks/NAME."""
MULTI_ZONE_LABEL = "goog-gke-multi-zone"
"""The label the PD CSI driver requires on each disk behind a multi-zone handle."""
REPLACE_UNREADY = {"pulumi.com/replaceUnready": "true"}
"""On a Job: one that failed (a bad token, a transient error) is replaced by the next `pulumi up` instead of being
awaited again forever (pulumi-kubernetes#1575)."""
JOB_ENV = (*identity_env(), {"name": "HOME", "value": "/tmp"})
"""Env of the weights Jobs' containers: a user name for the passwd-less UID, HOME on the /tmp emptyDir."""
DETACH_RESOURCES = {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}}


def weights_key(model_id: str, revision: str, *scope: object) -> str:
    """`meta-llama/Llama-3.1-8B-Instruct`@`main` -> `llama-3-1-8b-instruct-<8 hex>` (a GCE-safe name part); `scope`
    (the stack, the disk's shape) goes into the digest, so each scope gets its own names."""
    slug = re.sub(r"[^a-z0-9]+", "-", model_id.rsplit("/", 1)[-1].lower()).strip("-")[:28].strip("-")
    digest = hashlib.sha256("|".join([f"{model_id}@{revision}", *map(str, scope)]).encode()).hexdigest()[:8]
    return f"{slug or 'model'}-{digest}"


def gce_timeout(disk_gib: int) -> str:
    """Create timeout of the snapshot, image and disks: the provider's 20 minutes, or more for a large disk (2 s per
    GiB: 650 GiB -> 22 min); after a timeout Pulumi forgets the half-made resource and the next `up` meets 409."""
    return f"{max(20 * 60, 2 * disk_gib)}s"


@dataclass(frozen=True)
class ModelWeightsArgs:
    """Inputs of ModelWeights."""

    project: str
    """GCP project id."""
    zone: str
    """Zone of the staging and serving disks (the GPU nodes' zone)."""
    namespace: pulumi.Input[str]
    """Kubernetes namespace of the Job, PVCs and Secret."""
    model_id: str
    """Hugging Face repo id."""
    revision: str
    """Model revision (branch, tag or commit)."""
    source: str
    """huggingface | gcs."""
    gcs_uri: str | None
    """gs://bucket/prefix when source is gcs."""
    disk_type: str
    """Serving disk type: pd-ssd | pd-balanced | hyperdisk-ml."""
    disk_gib: int
    """Size of the staging and serving disks."""
    provisioned_mib_s: int
    """Hyperdisk ML provisioned throughput (ignored for persistent disks)."""
    min_bytes: int
    """The download fails verification below this many bytes of safetensors."""
    downloader_image: pulumi.Input[str]
    """Image for Hugging Face downloads (the vLLM image carries huggingface_hub)."""
    deadline_seconds: int
    """The Job's activeDeadlineSeconds (the planner's download deadline for the weights' size)."""
    hf_token: pulumi.Input[str] | None = None
    """Hugging Face token (a Pulumi secret) for gated models."""
    stack: str = "vllm-gke/dev"
    """`<project>/<stack>`, part of every key (planner.config.Stack.name)."""
    serving_zones: tuple[str, ...] = ()
    """Every zone a serving node may be in, when there are several: one Hyperdisk ML disk per zone behind one
    multi-zone PV. Empty: the serving disk is in `zone` alone."""
    code: bool = False
    """model.trustRemoteCode: the download takes the repository's *.py files and checks that the modules config.json's
    auto_map names are there (download.py --code)."""

    @property
    def job_image(self) -> pulumi.Input[str]:
        """The image of the weights Jobs: vllm.image (it carries huggingface_hub), the gcloud CLI for GCS."""
        return self.downloader_image if self.source == "huggingface" else GCLOUD_IMAGE

    @classmethod
    def from_plan(cls, stack: Stack, sizing: Sizing, namespace: pulumi.Input[str],
                  image: pulumi.Input[str] | None = None) -> ModelWeightsArgs:
        s = stack.settings
        return cls(project=stack.project, zone=s.accelerator.zones[0], namespace=namespace, model_id=s.model.id,
                   revision=s.model.revision, source=s.model.source, gcs_uri=s.model.gcs_uri,
                   disk_type=sizing.weights_disk_type, disk_gib=sizing.weights_disk_gib,
                   provisioned_mib_s=sizing.disk_provisioned_mib_s, min_bytes=sizing.min_weight_bytes,
                   downloader_image=s.vllm.image if image is None else image,
                   deadline_seconds=sizing.download_deadline_seconds,
                   hf_token=stack.hf_token, stack=stack.name, code=s.model.trust_remote_code,
                   serving_zones=s.accelerator.all_zones if len(s.accelerator.all_zones) > 1 else ())


class ModelWeights(pulumi.ComponentResource):
    """Staging disk, download Job, snapshot, image and the read-only serving disk, PV and PVC."""

    key: str
    claim_name: pulumi.Output[str]
    image: gcp.compute.Image
    serving_disk: gcp.compute.Disk
    model_path: str

    def __init__(self, name: str, args: ModelWeightsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("vllm-gke:weights:ModelWeights", name, None, opts)
        hyperdisk = args.disk_type == "hyperdisk-ml"
        throughput = args.provisioned_mib_s if hyperdisk else 0
        # The repository's code is part of the disk's content: with it the image, and the disks made from it, are new.
        code = ("code",) if args.code else ()
        self.key = key = weights_key(args.model_id, args.revision, args.stack, args.disk_gib, *code)
        multi = len(args.serving_zones) > 1
        # Several zones are part of the serving key: a PV's node affinity cannot change, so another zone list is a
        # new serving half (disks, PV, PVC) that the groups roll to.
        self.serving_key = serving = weights_key(args.model_id, args.revision, args.stack, args.disk_gib,
                                                 args.disk_type, throughput, *(args.serving_zones if multi else ()),
                                                 *code)
        self.model_path = f"{SERVING_MOUNT}/{WEIGHTS_SUBDIR}"
        timeouts = pulumi.CustomTimeouts(create=gce_timeout(args.disk_gib))
        slow = pulumi.ResourceOptions(parent=self, custom_timeouts=timeouts)
        labels = {PART_OF_LABEL: PART_OF, "vllm-gke/weights": key}
        gce_labels = {"vllm-gke-weights": key}

        staging = gcp.compute.Disk(
            f"{name}-{key}-staging", name=f"w-{key}-staging", project=args.project, zone=args.zone,
            type="pd-ssd", size=args.disk_gib, labels=gce_labels, opts=slow)
        staging_pv = self._pv(f"{name}-{key}-staging", f"w-{key}-staging", [staging],
                              pulumi.Output.concat("projects/", args.project, "/zones/", args.zone, "/disks/",
                                                   staging.name), [args.zone], args, labels, read_only=False)
        staging_pvc = self._pvc(f"{name}-{key}-staging", f"w-{key}-staging", staging_pv, args, labels,
                                read_only=False)

        script, job = self._download_job(name, key, args, staging_pvc, labels)
        detached = self._detached_job(name, key, args, job, script, staging_pv, labels)

        # The snapshot waits until the staging disk is attached to no node (wait_detached.py): Pulumi's Job await
        # returns on Complete, before kubelet's unmount and the detach, and a snapshot of a mounted ext4 is
        # "dirty" (the PD CSI driver then mounts the image with noload and without read_ahead_kb). The image is
        # made from the snapshot, never from the disk.
        snapshot = gcp.compute.Snapshot(
            f"{name}-{key}-snapshot", name=f"w-{key}", project=args.project, zone=args.zone,
            source_disk=staging.name, labels=gce_labels,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[detached], custom_timeouts=timeouts))
        self.image = gcp.compute.Image(
            f"{name}-{key}-image", name=f"w-{key}", project=args.project, source_snapshot=snapshot.self_link,
            labels=gce_labels, opts=slow)
        serving_labels = {**labels, "vllm-gke/serving": serving}
        if not multi:
            self.serving_disk = gcp.compute.Disk(
                f"{name}-{serving}-serving", name=f"w-{serving}-{args.zone.rsplit('-', 1)[-1]}", project=args.project,
                zone=args.zone, type=args.disk_type, size=args.disk_gib, image=self.image.self_link,
                access_mode="READ_ONLY_MANY" if hyperdisk else None,
                provisioned_throughput=throughput if hyperdisk else None,
                labels={**gce_labels, "vllm-gke-serving": serving}, opts=slow)
            self.serving_disks = [self.serving_disk]
            handle = pulumi.Output.concat("projects/", args.project, "/zones/", args.zone, "/disks/",
                                          self.serving_disk.name)
            zones = [args.zone]
        else:
            # One volume over several zones (the PD CSI driver's multi-zone volume handle): a same-named,
            # read-only-many Hyperdisk ML disk from the one image in every zone, each labelled goog-gke-multi-zone;
            # the driver attaches the disk of the node's zone (kubernetes-sigs/gcp-compute-persistent-disk-csi-driver,
            # pkg/common/constants.go MultiZoneValue / MultiZoneLabel, controller.go validateMultiZoneDisk).
            disk_name = f"w-{serving}"
            self.serving_disks = [gcp.compute.Disk(
                f"{name}-{serving}-{zone}-serving", name=disk_name, project=args.project, zone=zone,
                type=args.disk_type, size=args.disk_gib, image=self.image.self_link, access_mode="READ_ONLY_MANY",
                provisioned_throughput=throughput,
                labels={**gce_labels, "vllm-gke-serving": serving, MULTI_ZONE_LABEL: "true"}, opts=slow)
                for zone in args.serving_zones]
            self.serving_disk = self.serving_disks[0]
            handle = pulumi.Output.concat("projects/", args.project, f"/zones/{MULTI_ZONE}/disks/", disk_name)
            zones = list(args.serving_zones)
        serving_pv = self._pv(f"{name}-{serving}", f"w-{serving}", self.serving_disks, handle, zones, args,
                              serving_labels, read_only=True)
        serving_pvc = self._pvc(f"{name}-{serving}", f"w-{serving}", serving_pv, args, serving_labels,
                                read_only=True)
        self.claim_name = serving_pvc.metadata.name
        self.register_outputs({"key": key, "serving_key": serving, "claim_name": self.claim_name,
                               "image": self.image.self_link})

    def _pv(self, logical: str, pv_name: str, disks: list[gcp.compute.Disk], handle: pulumi.Input[str],
            zones: list[str], args: ModelWeightsArgs, labels: dict[str, str],
            read_only: bool) -> k8s.core.v1.PersistentVolume:
        return k8s.core.v1.PersistentVolume(
            f"{logical}-pv",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=pv_name, labels=labels),
            spec=k8s.core.v1.PersistentVolumeSpecArgs(
                capacity={"storage": f"{args.disk_gib}Gi"},
                access_modes=["ReadOnlyMany" if read_only else "ReadWriteOnce"],
                persistent_volume_reclaim_policy="Retain",  # Pulumi owns the disk's lifecycle, not Kubernetes
                storage_class_name="",
                # Large sequential reads of safetensors shards: read ahead 4 MiB.
                mount_options=["read_ahead_kb=4096"] if read_only else None,
                csi=k8s.core.v1.CSIPersistentVolumeSourceArgs(
                    driver=CSI_DRIVER, fs_type="ext4", read_only=read_only,
                    volume_handle=handle),
                node_affinity=k8s.core.v1.VolumeNodeAffinityArgs(required=k8s.core.v1.NodeSelectorArgs(
                    node_selector_terms=[k8s.core.v1.NodeSelectorTermArgs(match_expressions=[
                        k8s.core.v1.NodeSelectorRequirementArgs(key=ZONE_LABEL, operator="In",
                                                                values=zones)])]))),
            opts=pulumi.ResourceOptions(parent=self, depends_on=disks))

    def _pvc(self, logical: str, claim: str, pv: k8s.core.v1.PersistentVolume, args: ModelWeightsArgs,
             labels: dict[str, str], read_only: bool) -> k8s.core.v1.PersistentVolumeClaim:
        return k8s.core.v1.PersistentVolumeClaim(
            f"{logical}-pvc",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=claim, namespace=args.namespace, labels=labels),
            spec=k8s.core.v1.PersistentVolumeClaimSpecArgs(
                access_modes=["ReadOnlyMany" if read_only else "ReadWriteOnce"], storage_class_name="",
                volume_name=pv.metadata.name,
                resources=k8s.core.v1.VolumeResourceRequirementsArgs(requests={"storage": f"{args.disk_gib}Gi"})),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[pv]))

    def _detached_job(self, name: str, key: str, args: ModelWeightsArgs, download: k8s.batch.v1.Job,
                      script: k8s.core.v1.ConfigMap, staging_pv: k8s.core.v1.PersistentVolume,
                      labels: dict[str, str]) -> k8s.batch.v1.Job:
        """A Job that completes once the staging PV's disk has no VolumeAttachment (its account may only read
        those), on the image the download used (already on the node)."""
        child = pulumi.ResourceOptions(parent=self)
        account = k8s.core.v1.ServiceAccount(
            f"{name}-{key}-detach-sa", metadata=k8s.meta.v1.ObjectMetaArgs(
                name=f"w-{key}-detach", namespace=args.namespace, labels=labels), opts=child)
        role = k8s.rbac.v1.ClusterRole(
            f"{name}-{key}-detach-role", metadata=k8s.meta.v1.ObjectMetaArgs(name=f"w-{key}-detach", labels=labels),
            rules=[k8s.rbac.v1.PolicyRuleArgs(api_groups=["storage.k8s.io"], resources=["volumeattachments"],
                                              verbs=["get", "list"])], opts=child)
        binding = k8s.rbac.v1.ClusterRoleBinding(
            f"{name}-{key}-detach-binding",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=f"w-{key}-detach", labels=labels),
            role_ref=k8s.rbac.v1.RoleRefArgs(api_group="rbac.authorization.k8s.io", kind="ClusterRole",
                                             name=role.metadata.name),
            subjects=[k8s.rbac.v1.SubjectArgs(kind="ServiceAccount", name=account.metadata.name,
                                              namespace=args.namespace)], opts=child)
        timeout = DETACH_TIMEOUT_SECONDS
        return k8s.batch.v1.Job(
            f"{name}-{key}-detached",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=f"w-{key}-detached", namespace=args.namespace, labels=labels,
                annotations={**REPLACE_UNREADY,
                             "checkov.io/skip1": "CKV_K8S_38=the waiter reads VolumeAttachments from the API with this "
                                                 "token; its account may only get and list those"}),
            spec=k8s.batch.v1.JobSpecArgs(
                backoff_limit=2, active_deadline_seconds=timeout + 300,
                template=k8s.core.v1.PodTemplateSpecArgs(
                    metadata=k8s.meta.v1.ObjectMetaArgs(labels=labels),
                    spec=k8s.core.v1.PodSpecArgs(
                        restart_policy="Never", service_account_name=account.metadata.name,
                        automount_service_account_token=True,
                        security_context=pod_security_context(),
                        containers=[k8s.core.v1.ContainerArgs(
                            name="wait-detached", image=args.job_image,
                            command=["python3", "/opt/vllm-gke/wait_detached.py", "--pv", staging_pv.metadata.name,
                                     "--timeout", str(timeout)],
                            env=[k8s.core.v1.EnvVarArgs(**e) for e in JOB_ENV],
                            resources=k8s.core.v1.ResourceRequirementsArgs(**DETACH_RESOURCES),
                            security_context=container_security_context(),
                            volume_mounts=[
                                k8s.core.v1.VolumeMountArgs(name="script", mount_path="/opt/vllm-gke", read_only=True),
                                k8s.core.v1.VolumeMountArgs(name="tmp", mount_path="/tmp")])],
                        volumes=[
                            k8s.core.v1.VolumeArgs(name="script", config_map=k8s.core.v1.ConfigMapVolumeSourceArgs(
                                name=script.metadata.name)),
                            k8s.core.v1.VolumeArgs(name="tmp", empty_dir=k8s.core.v1.EmptyDirVolumeSourceArgs(
                                size_limit="64Mi"))]))),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[download, binding],
                                        custom_timeouts=pulumi.CustomTimeouts(create=f"{timeout + 600}s")))

    def _download_job(self, name: str, key: str, args: ModelWeightsArgs,
                      staging_pvc: k8s.core.v1.PersistentVolumeClaim,
                      labels: dict[str, str]) -> tuple[k8s.core.v1.ConfigMap, k8s.batch.v1.Job]:
        child = pulumi.ResourceOptions(parent=self)
        script = k8s.core.v1.ConfigMap(
            f"{name}-{key}-downloader",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=f"w-{key}-downloader", namespace=args.namespace,
                                                labels=labels),
            data={"download.py": DOWNLOADER.read_text(), "wait_detached.py": WAIT_DETACHED.read_text()}, opts=child)
        env = [k8s.core.v1.EnvVarArgs(**e) for e in (*JOB_ENV, {"name": "HF_HOME", "value": "/tmp/hf"})]
        depends: list[pulumi.Resource] = [staging_pvc, script]
        service_account = None
        if args.source == "huggingface":
            command = ["python3", "/opt/vllm-gke/download.py", "--source", "huggingface", "--model", args.model_id,
                       "--revision", args.revision]
            if args.hf_token is not None:
                secret = k8s.core.v1.Secret(
                    f"{name}-{key}-hf-token",
                    metadata=k8s.meta.v1.ObjectMetaArgs(name=f"w-{key}-hf-token", namespace=args.namespace,
                                                        labels=labels),
                    type="Opaque", string_data={"HF_TOKEN": args.hf_token},
                    opts=pulumi.ResourceOptions(parent=self, additional_secret_outputs=["data", "stringData"]))
                env.append(k8s.core.v1.EnvVarArgs(name="HF_TOKEN", value_from=k8s.core.v1.EnvVarSourceArgs(
                    secret_key_ref=k8s.core.v1.SecretKeySelectorArgs(name=secret.metadata.name, key="HF_TOKEN"))))
                depends.append(secret)
        else:
            command = ["python3", "/opt/vllm-gke/download.py", "--source", "gcs", "--gcs-uri", str(args.gcs_uri)]
            account = k8s.core.v1.ServiceAccount(
                f"{name}-{key}-downloader-sa",
                metadata=k8s.meta.v1.ObjectMetaArgs(name=f"w-{key}-downloader", namespace=args.namespace,
                                                    labels=labels), opts=child)
            service_account = account.metadata.name
            bucket = str(args.gcs_uri).removeprefix("gs://").split("/", 1)[0]
            # Read access to one bucket for exactly this Kubernetes service account.
            binding = gcp.storage.BucketIAMMember(
                f"{name}-{key}-gcs-reader", bucket=bucket, role="roles/storage.objectViewer",
                member=workload_identity_member(args.project, args.namespace, account.metadata.name, parent=self),
                opts=child)
            depends += [account, binding]
        command += ["--dest", f"/data/{WEIGHTS_SUBDIR}", "--min-bytes", str(args.min_bytes)]
        if args.code:
            command.append("--code")
        return script, k8s.batch.v1.Job(
            f"{name}-{key}-download",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=f"w-{key}-download", namespace=args.namespace, labels=labels, annotations=REPLACE_UNREADY),
            spec=k8s.batch.v1.JobSpecArgs(
                backoff_limit=3, active_deadline_seconds=args.deadline_seconds,
                template=k8s.core.v1.PodTemplateSpecArgs(
                    metadata=k8s.meta.v1.ObjectMetaArgs(labels=labels),
                    spec=k8s.core.v1.PodSpecArgs(
                        restart_policy="Never", service_account_name=service_account,
                        automount_service_account_token=service_account is not None,
                        # The staging disk is zonal: the pod must run where the disk is.
                        node_selector={ZONE_LABEL: args.zone},
                        security_context=pod_security_context(fs_group=True),
                        containers=[k8s.core.v1.ContainerArgs(
                            name="download", image=args.job_image, command=command, env=env,
                            resources=k8s.core.v1.ResourceRequirementsArgs(**DOWNLOAD_RESOURCES),
                            security_context=container_security_context(),
                            volume_mounts=[
                                k8s.core.v1.VolumeMountArgs(name="staging", mount_path="/data"),
                                k8s.core.v1.VolumeMountArgs(name="script", mount_path="/opt/vllm-gke",
                                                            read_only=True),
                                k8s.core.v1.VolumeMountArgs(name="tmp", mount_path="/tmp")])],
                        volumes=[
                            k8s.core.v1.VolumeArgs(name="staging", persistent_volume_claim=(
                                k8s.core.v1.PersistentVolumeClaimVolumeSourceArgs(
                                    claim_name=staging_pvc.metadata.name))),
                            k8s.core.v1.VolumeArgs(name="script", config_map=k8s.core.v1.ConfigMapVolumeSourceArgs(
                                name=script.metadata.name)),
                            k8s.core.v1.VolumeArgs(name="tmp", empty_dir=k8s.core.v1.EmptyDirVolumeSourceArgs(
                                size_limit="20Gi"))]))),
            # Pulumi waits for the Job to complete; a large model takes a while to download.
            opts=pulumi.ResourceOptions(parent=self, depends_on=depends,
                                        custom_timeouts=pulumi.CustomTimeouts(
                                            create=f"{args.deadline_seconds + 600}s",
                                            update=f"{args.deadline_seconds + 600}s")))
