"""Where a stack's serving pods keep vLLM's compile cache: one Cloud Storage bucket per stack, mounted into every
leader and worker through GKE's Cloud Storage FUSE CSI driver. The launcher (images/vllm-ray/launcher.py) restores
a pod's cache from it before vLLM starts and publishes it once the group serves; docs/architecture.md says why.

GKE facts used (GKE "Mount Cloud Storage buckets as CSI ephemeral volumes"): the pod opts into the driver's sidecar
with the annotation `gke-gcsfuse/volumes: "true"`; the volume is `csi` with driver `gcsfuse.csi.storage.gke.io`
and `volumeAttributes.bucketName`/`mountOptions`; a non-root container needs `uid`/`gid` mount options; the pod's
Kubernetes service account reaches the bucket through Workload Identity Federation (no Google service account)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_gcp as gcp

from components import workload_identity_member
from planner.config import Stack
from planner.security import PART_OF, RUN_AS_UID

STORE_MOUNT = "/compile-cache"
"""Where the bucket is mounted in the serving pods (the launcher's --compile-cache-store)."""
GCSFUSE_DRIVER = "gcsfuse.csi.storage.gke.io"
GCSFUSE_ANNOTATIONS = {"gke-gcsfuse/volumes": "true", "gke-gcsfuse/cpu-request": "250m",
                       "gke-gcsfuse/memory-request": "256Mi"}
"""The pod opts into the driver's sidecar and declares its requests, so the planner's scheduling check
(planner/cluster_rules.py) counts them: the sidecar only moves a few tens of MiB of archive per pod start."""
SERVING_ACCOUNT = "vllm-serving"
"""The serving pods' Kubernetes service account: the only principal that may use the bucket."""
RETENTION_DAYS = 30
"""Archives of layouts no longer served are deleted after this long (a served layout's archive is rewritten only
when absent, so a live one may age out too: the next pod then compiles once and publishes again)."""


def bucket_name(stack: Stack) -> str:
    """Globally unique and readable where it fits: `<project>-<stack>-vllm-cc`, else a digest of both."""
    readable = f"{stack.project}-{stack.name.rsplit('/', 1)[-1]}-vllm-cc".lower()
    if len(readable) <= 63 and "goog" not in readable and all(c.isalnum() or c == "-" for c in readable):
        return readable
    return f"vllm-cc-{hashlib.sha256(f'{stack.project}/{stack.name}'.encode()).hexdigest()[:20]}"


def store_volume(bucket: pulumi.Input[str]) -> dict[str, Any]:
    """The pod's CSI ephemeral volume of the bucket, owned by the pods' UID (the FUSE mount is root's otherwise)."""
    return {"name": "compile-cache", "csi": {"driver": GCSFUSE_DRIVER, "volumeAttributes": {
        "bucketName": bucket,
        "mountOptions": f"implicit-dirs,uid={RUN_AS_UID},gid={RUN_AS_UID},file-mode=644,dir-mode=755"}}}


@dataclass(frozen=True)
class CompileCacheArgs:
    project: str
    region: str
    bucket: str
    namespace: pulumi.Input[str]
    service_account: str = SERVING_ACCOUNT

    @classmethod
    def from_plan(cls, stack: Stack, namespace: pulumi.Input[str]) -> CompileCacheArgs:
        return cls(project=stack.project, region=stack.settings.cluster.region, bucket=bucket_name(stack),
                   namespace=namespace)


class CompileCache(pulumi.ComponentResource):
    """The bucket (regional, uniform access, no public access, archives expire) and the serving account's grant."""

    bucket_name: pulumi.Output[str]

    def __init__(self, name: str, args: CompileCacheArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("vllm-gke:serving:CompileCache", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        bucket = gcp.storage.Bucket(
            f"{name}-compile-cache", name=args.bucket, project=args.project, location=args.region.upper(),
            uniform_bucket_level_access=True, public_access_prevention="enforced",
            # `pulumi destroy` removes it with its archives: they are a cache, rebuilt by the next start.
            force_destroy=True, labels={"part-of": PART_OF},
            lifecycle_rules=[gcp.storage.BucketLifecycleRuleArgs(
                action=gcp.storage.BucketLifecycleRuleActionArgs(type="Delete"),
                condition=gcp.storage.BucketLifecycleRuleConditionArgs(age=RETENTION_DAYS))],
            opts=child)
        gcp.storage.BucketIAMMember(
            f"{name}-compile-cache-user", bucket=bucket.name, role="roles/storage.objectUser",
            member=workload_identity_member(args.project, args.namespace, args.service_account, parent=self),
            opts=child)
        self.bucket_name = bucket.name
        self.register_outputs({"bucket": bucket.name})
