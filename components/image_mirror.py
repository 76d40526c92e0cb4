"""An Artifact Registry remote repository in front of Docker Hub, so GKE image streaming applies to vllm.image."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from planner.config import Stack
from planner.versions import docker_hub_path, mirrored

STREAMING_APIS = ("artifactregistry.googleapis.com", "containerfilesystem.googleapis.com")
"""GKE image streaming needs the Container File System API and images in Artifact Registry (GKE "Use Image
streaming to pull container images"); the node pools already enable it (gcfsConfig)."""


def repository_id(stack_name: str) -> str:
    """One repository per stack (ids are unique per project and region): `vllm-gke-<8 hex>`."""
    return f"vllm-gke-{hashlib.sha256(stack_name.encode()).hexdigest()[:8]}"


@dataclass(frozen=True)
class ImageMirrorArgs:
    """Inputs of ImageMirror."""

    project: str
    region: str
    """Region of the repository: the cluster's (nodes pull within their region)."""
    repository: str
    image: str
    """The image as configured (vllm.image)."""

    @classmethod
    def from_plan(cls, stack: Stack) -> ImageMirrorArgs:
        return cls(project=stack.project, region=stack.settings.cluster.region,
                   repository=repository_id(stack.name), image=stack.settings.vllm.image)


class ImageMirror(pulumi.ComponentResource):
    """The APIs image streaming needs and a remote repository of Docker Hub; `image` is vllm.image as served
    through it, and resolves once the repository exists (pods never name a repository that is not there)."""

    image: pulumi.Output[str]

    def __init__(self, name: str, args: ImageMirrorArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("vllm-gke:images:ImageMirror", name, None, opts)
        services = [gcp.projects.Service(f"{name}-{api.split('.')[0]}", project=args.project, service=api,
                                         # other stacks and users of the project may rely on the API
                                         disable_on_destroy=False, opts=pulumi.ResourceOptions(parent=self))
                    for api in STREAMING_APIS]
        repository = gcp.artifactregistry.Repository(
            f"{name}-docker-hub", project=args.project, location=args.region, repository_id=args.repository,
            format="DOCKER", mode="REMOTE_REPOSITORY",
            description="Docker Hub through Artifact Registry, for GKE image streaming (vllm-gke)",
            remote_repository_config=gcp.artifactregistry.RepositoryRemoteRepositoryConfigArgs(
                description="Docker Hub",
                docker_repository=gcp.artifactregistry.RepositoryRemoteRepositoryConfigDockerRepositoryArgs(
                    public_repository="DOCKER_HUB")),
            opts=pulumi.ResourceOptions(parent=self, depends_on=services))
        target = mirrored(args.image, args.region, args.project, args.repository)
        self.image = repository.repository_id.apply(lambda _: target)
        self.register_outputs({"image": self.image})


def serving_image(stack: Stack, opts: pulumi.ResourceOptions | None = None) -> pulumi.Input[str]:
    """vllm.image as the pods pull it: through the stack's mirror when it is on, and the image is Docker Hub's."""
    if not stack.settings.cluster.image_mirror or docker_hub_path(stack.settings.vllm.image) is None:
        return stack.settings.vllm.image
    return ImageMirror("images", ImageMirrorArgs.from_plan(stack), opts).image
