"""Every stack config key, declared once: type, default, bounds, choices and description (pydantic v2 models).

pydantic is the Python ecosystem's standard for typed, validated configuration, and it exports JSON Schema, so the
same declarations give the validation (planner/config.py), Pulumi.yaml's `config:` block, the README's config
reference and docs/stack-config.schema.json (tools/readme.py writes all three; tests fail on drift).
Field names are snake_case in Python and camelCase in stack files (the alias). Checks that involve more than one
field, the catalog or the model's config.json live in planner/config.py.
"""

from __future__ import annotations

import ipaddress
import math
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from planner.catalog import ACCELERATORS, DISK_TYPES
from planner.gcp_names import (
    VPC_NEVER,
    bucket_problem,
    gce_name_problem,
    image_problem,
    vpc_range_problem,
    zone_problem,
)
from planner.labels import GKE_NAMESPACES
from planner.versions import VLLM_IMAGE
from planner.vllm_flags import owned_flag


def _bool(value: Any) -> Any:
    """true/false, or the strings Pulumi hands over for them; pydantic's own 'yes'/'on'/1 are refused."""
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if not isinstance(value, bool):
        raise ValueError("expected true or false")
    return value


ASCII_INT = re.compile(r"[0-9]+")
ASCII_NUMBER = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")
"""Numbers as strings (Pulumi hands `pulumi config set` values over as strings) in ASCII digits only: Python's
int()/float() and the regex class \\d also take other scripts' digits ('٣' is 3), which Kubernetes and GMP refuse."""


def _int(value: Any) -> Any:
    if isinstance(value, str) and ASCII_INT.fullmatch(value.strip()):
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("expected an integer written in ASCII digits 0-9")
    return value


def _float(value: Any) -> Any:
    if isinstance(value, str) and ASCII_NUMBER.fullmatch(value.strip()):
        value = float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError("expected a finite number written in ASCII digits 0-9")
    return float(value)


def _text(value: Any) -> Any:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("expected a non-empty string")
    return value


def _texts(value: Any) -> Any:
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v for v in value):
        raise ValueError("expected a list of non-empty strings")
    return tuple(value)


DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
"""Kubernetes namespace names: RFC 1123 labels, at most 63 characters."""
GKE_CLUSTER_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")
"""GKE: a lowercase letter first, then up to 39 lowercase letters, digits or hyphens, not ending in a hyphen."""
REGION = re.compile(r"^[a-z]+-[a-z]+[0-9]+$")
ZONE = re.compile(r"^[a-z]+-[a-z]+[0-9]+-[a-z]$")


def namespace_problem(name: str) -> str | None:
    """Why `name` cannot be a namespace the program creates, or None."""
    if len(name) > 63 or not DNS_LABEL.fullmatch(name):
        return ("a namespace is a DNS label: at most 63 characters, lowercase letters, digits and '-', starting and "
                "ending with a letter or digit, e.g. vllm")
    if name in GKE_NAMESPACES:
        return f"{name} is created and owned by Kubernetes or GKE; use a namespace of its own, e.g. vllm"
    return None


Bool = Annotated[bool, BeforeValidator(_bool)]
Int = Annotated[int, BeforeValidator(_int)]
Float = Annotated[float, BeforeValidator(_float)]
Text = Annotated[str, BeforeValidator(_text)]
Texts = Annotated[tuple[str, ...], BeforeValidator(_texts)]

AcceleratorType = Literal[tuple(ACCELERATORS)]  # type: ignore[valid-type]
DiskType = Literal[tuple(DISK_TYPES)]  # type: ignore[valid-type]


class Section(BaseModel):
    """One `vllm-gke:<key>` object of a stack file."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True,
                              validate_default=True)


class ClusterConfig(Section):
    """GKE cluster: an existing one to look up, or one to create."""

    name: Text = Field(description="Cluster name.")
    location: Text = Field(description="Region or zone of the cluster.")
    create: Bool = Field(False, description="false = look up an existing cluster; true = create one with Workload "
                                            "Identity, Managed Prometheus, Dataplane V2 and image streaming.")
    release_channel: Literal["RAPID", "REGULAR", "STABLE", "EXTENDED"] = Field(
        "REGULAR", description="GKE release channel of a created cluster.")
    image_mirror: Bool = Field(True, description="Serve Docker Hub images (vllm.image) through an Artifact Registry "
                                                 "remote repository the program creates, so GKE image streaming "
                                                 "applies to them (it streams only from Artifact Registry).")

    @property
    def region(self) -> str:
        """`us-central1-a` -> `us-central1`; a region stays as it is."""
        parts = self.location.split("-")
        return "-".join(parts[:2]) if len(parts) > 2 else self.location

    @field_validator("name")
    @classmethod
    def _gke_name(cls, name: str) -> str:
        if not GKE_CLUSTER_NAME.fullmatch(name):
            raise ValueError("GKE cluster names are 1-40 characters: a lowercase letter, then lowercase letters, "
                             "digits or hyphens, not ending in a hyphen, e.g. ml-dev")
        return name

    @field_validator("location")
    @classmethod
    def _location(cls, location: str) -> str:
        if not (REGION.fullmatch(location) or ZONE.fullmatch(location)):
            raise ValueError("expected a region (us-central1) or a zone (us-central1-a)")
        if ZONE.fullmatch(location) and (problem := zone_problem(location)):
            raise ValueError(problem)
        return location


Provisioning = Literal["on-demand", "spot", "reservation", "flex-start"]


def _zone(zone: str) -> str:
    if not ZONE.fullmatch(zone):
        raise ValueError(f"{zone} is not a zone name; expected e.g. us-central1-a")
    if problem := zone_problem(zone):
        raise ValueError(f"{zone} is no zone: {problem}")
    return zone


def _reservation_name(name: str | None) -> str | None:
    if name is not None and (problem := gce_name_problem(name)):
        raise ValueError(f"{problem}, e.g. h100-serving")
    return name


def _zones(zones: tuple[str, ...]) -> tuple[str, ...]:
    for zone in zones:
        _zone(zone)
    if len(set(zones)) != len(zones):
        raise ValueError("a zone is listed twice")
    return zones


Zone = Annotated[str, BeforeValidator(_text), AfterValidator(_zone)]
Zones = Annotated[tuple[str, ...], BeforeValidator(_texts), AfterValidator(_zones)]
ReservationName = Annotated[str, BeforeValidator(_text), AfterValidator(_reservation_name)]
"""A zone, a list of zones and a reservation name, each checked as Compute Engine checks it wherever it is used."""


def _options(value: Any) -> Any:
    """One way of buying, or an ordered list of them without repeats."""
    if isinstance(value, (list, tuple)):
        if not value:
            raise ValueError("list at least one way of buying: on-demand, spot, reservation or flex-start")
        if len(set(map(str, value))) != len(value):
            raise ValueError("a way of buying is listed twice")
    return value


class FallbackConfig(Section):
    """One fallback machine: the autoscaler's next rungs when the accelerator's own are sold out."""

    type: AcceleratorType = Field(description="GKE accelerator type of the fallback.")
    machine_type: Text | None = Field(None, description="Machine type; the one with the primary's GPUs per node "
                                                        "when unset.")
    provisioning: Annotated[Provisioning | tuple[Provisioning, ...] | None, BeforeValidator(_options)] = Field(
        None, description="How the fallback's nodes are bought, in order (default: the first way its machine "
                          "series is sold).")
    zones: Zones | None = Field(None, description="Zones of the fallback (default: accelerator.zones).")
    reservation: ReservationName | None = Field(None, description="Reservation name, with provisioning: reservation.")
    reservation_zone: Zone | None = Field(None, description="The reservation's zone, one of the fallback's zones "
                                                            "(a reservation is zonal); required when it has several.")


class AcceleratorConfig(Section):
    """GPU nodes: the accelerator and the machine type that carries it."""

    type: AcceleratorType = Field(description="GKE accelerator type.")
    machine_type: Text | None = Field(None, description="Machine type; derived from gpusPerNode when unset.")
    gpus_per_node: Int | None = Field(None, ge=1, description="GPUs per node; derived from machineType when unset.")
    zones: Zones = Field((), description="Serving zones, e.g. [us-central1-a]. Several zones need Hyperdisk ML "
                                         "weights (one disk per zone behind one volume) and make a ComputeClass.")
    provisioning: Annotated[Provisioning | tuple[Provisioning, ...] | None, BeforeValidator(_options)] = Field(
        None, description="How GPU nodes are bought: one way, or an ordered list the autoscaler walks on a stockout "
                          "(default: on-demand where Compute Engine sells the machine type so, else flex-start; "
                          "planner/catalog.py MACHINE_SERIES). The first is the Pulumi-managed pool's.")
    reservation: ReservationName | None = Field(None, description="Reservation name, with provisioning: reservation.")
    reservation_zone: Zone | None = Field(None, description="The reservation's zone, one of accelerator.zones (a "
                                                            "reservation is zonal: its rung, and the GPU pool when it "
                                                            "is the first, has nodes there only); required with "
                                                            "several zones.")
    fallbacks: tuple[FallbackConfig, ...] = Field(
        (), description="Other accelerators or machine types, in order, after every way of buying the primary: "
                        "each must run the same pod (GPUs per node, nodes per group) and is planned at preview.")
    spot_multi_node: Bool = Field(False, description="Allow spot rungs for multi-node groups: a Spot VM gets a 30 s "
                                                     "notice, shorter than a group's drain, and its loss restarts the "
                                                     "whole group.")

    driver_version: Literal["LATEST", "DEFAULT", "INSTALLATION_DISABLED"] = Field(
        "LATEST", description="GKE-managed NVIDIA driver version.")


class ModelConfig(Section):
    """The model to serve and where its weights come from."""

    id: Text = Field(description="Hugging Face repo id, e.g. meta-llama/Llama-3.1-8B-Instruct.")
    revision: Text = Field("main", description="Branch, tag or commit of the weights.")
    source: Literal["huggingface", "gcs"] = Field("huggingface", description="Where the download Job reads from.")
    gcs_uri: Text | None = Field(None, description="gs://bucket/prefix of the weights, with source: gcs. Without "
                                                   "configFile or architecture, the plan reads config.json and the "
                                                   "safetensors headers there (Application Default Credentials).")
    config_file: Text | None = Field(None, description="Local config.json (relative to the project) for offline "
                                                       "plans; without it or architecture, config.json and the "
                                                       "safetensors headers are read from the Hub (or from gcsUri "
                                                       "with source: gcs).")
    architecture: dict[str, Any] | None = Field(None, description="The config.json fields inline.")
    tensors_file: Text | None = Field(None, description="The checkpoint's tensors (names, dtypes, shapes from its "
                                                        "safetensors headers; python -m tools.checkpoint_tensors "
                                                        "writes it, with --compact a row per run of layers / "
                                                        "experts): the weights are planned from them, not counted "
                                                        "from config.json. models/tensors/ holds five real "
                                                        "checkpoints' files.")
    weights_gib: Float | None = Field(None, gt=0, le=100_000, description="Overrides the computed weight size.")
    trust_remote_code: Bool = Field(False, description="Run the model repository's own Python: vLLM starts with "
                                                       "--trust-remote-code and the download Job takes the "
                                                       "repository's *.py files. Needed where config.json's "
                                                       "auto_map names a config class that neither transformers "
                                                       "nor vLLM has (Llama-Nemotron's nemotron-nas); the plan "
                                                       "says so. Off: no code from the repository runs.")
    served_name: Text | None = Field(None, description="OpenAI model name (default: id).")

    @field_validator("gcs_uri")
    @classmethod
    def _gcs_uri(cls, uri: str | None) -> str | None:
        if uri is None:
            return uri
        if not uri.startswith("gs://"):
            raise ValueError("expected gs://bucket/prefix")
        if problem := bucket_problem(uri[len("gs://"):].split("/", 1)[0]):
            raise ValueError(f"{problem}, e.g. gs://my-models/llama")
        return uri

    @field_validator("architecture", mode="before")
    @classmethod
    def _mapping(cls, value: Any) -> Any:
        if value is not None and not isinstance(value, dict):
            raise ValueError("expected an object (a YAML mapping)")
        return value


class ParallelismConfig(Section):
    """Tensor, pipeline, data and expert parallelism; unset = planned (most output tokens per GPU, in a node)."""

    tensor: Int | None = Field(None, ge=1, description="--tensor-parallel-size.")
    pipeline: Int | None = Field(None, ge=1, description="--pipeline-parallel-size.")
    data: Int | None = Field(None, ge=1, description="--data-parallel-size: engines per replica (one pod, one API "
                                                     "server balancing over them), each with tensor x pipeline "
                                                     "GPUs.")
    expert: Bool | None = Field(None, description="--enable-expert-parallel: a mixture-of-experts model's experts "
                                                  "split whole over data x tensor GPUs instead of sharded.")
    min_concurrent_sequences: Int = Field(4, ge=1, description="Full-length sequences the automatic layout tries "
                                                               "to fit in one replica's KV cache.")
    typical_input_tokens: Int = Field(1024, ge=1, description="Prompt tokens of a typical request: the automatic "
                                                              "layout is chosen for output tokens per GPU at this "
                                                              "shape.")
    typical_output_tokens: Int = Field(256, ge=1, description="Output tokens of a typical request (see "
                                                              "typicalInputTokens).")


def pinned_image(image: str, example: str) -> str:
    """`image` when it is an image reference the kubelet accepts and names a tag other than latest, or a digest;
    ValueError (one line, with `example`) else."""
    if problem := image_problem(image):
        raise ValueError(f"{problem}, e.g. {example}")
    if image.endswith(":latest") or (":" not in image.rsplit("/", 1)[-1] and "@" not in image):
        raise ValueError(f"pin a tag or digest, e.g. {example}")
    return image


class VllmConfig(Section):
    """The vLLM server."""

    image: Text = Field(VLLM_IMAGE, description="Serving image, pinned to a tag or digest.")
    max_model_len: Int | None = Field(None, ge=16, description="--max-model-len (default: the model's context).")
    gpu_memory_utilization: Float = Field(0.9, gt=0.1, le=0.99, description="--gpu-memory-utilization.")
    dtype: Literal["auto", "bfloat16", "float16", "float32", "half"] = Field("auto", description="--dtype.")
    kv_cache_dtype: Literal["auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"] = Field(
        "auto", description="--kv-cache-dtype.")
    extra_args: Texts = Field((), description="Appended to the server's command line; the plan reads them as vLLM's "
                              "parser does (unambiguous prefixes, _ for -, dotted --flag.key value, a repeated flag's "
                              "last value).")
    compile_cache: Bool = Field(True, description="Keep vLLM's torch.compile cache in a Cloud Storage bucket of the "
                                                  "stack (GCS FUSE): replicas after the first skip compilation.")

    @field_validator("image")
    @classmethod
    def _pinned(cls, image: str) -> str:
        return pinned_image(image, VLLM_IMAGE)

    @field_validator("extra_args")
    @classmethod
    def _not_owned(cls, args: tuple[str, ...]) -> tuple[str, ...]:
        for arg in args:
            words = arg.split()
            if len(words) > 1 and arg.lstrip().startswith("-"):
                raise ValueError(f"one flag or value per list item: write {arg!r} as [{', '.join(words)}]")
            if flag := owned_flag(arg.strip()):
                raise ValueError(f"{arg} sets {flag}, which is set by the program from other keys; remove it")
        return args


class WeightsConfig(Section):
    """The persistent-disk image of the weights."""

    disk_type: DiskType | None = Field(None, description="Serving disk type (default: the cheapest type, size and "
                                                          "throughput the machine attaches that loads the weights "
                                                          "within weights.loadSeconds).")
    size_gib: Int | None = Field(None, ge=10, description="Disk size (default: weights + 15% + 10 GiB, grown for "
                                                          "read throughput on persistent disks).")
    load_seconds: Int = Field(60, ge=5, le=3600, description="Target time for a new node to read its share of the "
                                                             "weights; the planner picks the disk for it and warns "
                                                             "when no disk the machine attaches reaches it.")


class AutoscalingConfig(Section):
    """Replicas, each a whole LeaderWorkerSet group, scaled by an HPA on a vLLM metric."""

    min_replicas: Int = Field(1, ge=1, description="HPA minReplicas.")
    max_replicas: Int = Field(1, ge=1, description="HPA maxReplicas.")
    metric: Literal["queue", "batch"] = Field(
        "queue", description="queue = vllm:num_requests_waiting, batch = vllm:num_requests_running.")
    target: Float | None = Field(None, gt=0, le=10_000, description="Per-replica average (default: GKE's guidance "
                                                                    "for the metric).")
    headroom: Int = Field(0, ge=0, le=16, description="Spare serving-shaped slots kept warm by placeholder pods at a "
                                                      "negative priority (vLLM image pulled, weights in the page "
                                                      "cache); a new replica preempts one instead of waiting for a "
                                                      "node. Each costs its nodes' price while idle; 0 = none.")


class ServingConfig(Section):
    """Namespace, exposure and the objects around the serving groups."""

    namespace: Text = Field("vllm", description="Namespace the program creates for the serving objects.")
    expose: Literal["cluster-ip", "internal-lb"] = Field("cluster-ip", description="How the API is reached.")
    install_lws: Bool = Field(True, description="false when the cluster already runs the LeaderWorkerSet "
                                                "controller.")
    allowed_namespaces: Texts = Field((), description="Namespaces allowed to reach the API port.")
    smoke_test: Bool = Field(True, description="Run a chat completion after deploy.")
    chat_ui: Bool = Field(False, description="Deploy a Gradio chat page in front of the API (kubectl port-forward, "
                                             "or an internal load balancer with expose: internal-lb).")
    chat_ui_image: Text | None = Field(None, description="Chat page image (default: the one `make chat-ui-image` "
                                                         "pushes to the project's vllm-gke-images repository).")
    source_ranges: Texts = Field(("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"),
                                 description="CIDRs that may reach the internal load balancer.")
    routing: Literal["service", "epp", "gke-gateway"] = Field(
        "service", description="How requests reach the replicas: service = the vllm-leader Service spreads "
                               "connections; epp = the llm-d endpoint picker behind an Envoy sidecar picks a "
                               "replica per request by queue, KV-cache use and prefix (vllm-leader then selects "
                               "the router); gke-gateway = GKE Inference Gateway (Gateway, HTTPRoute, "
                               "InferencePool) with the same endpoint picker.")
    router_replicas: Int = Field(1, ge=1, le=5, description="Endpoint-picker pods (routing epp / gke-gateway). "
                                                            "More than one needs prefixScorer: off (the "
                                                            "approximate prefix index is per pod).")
    prefix_scorer: Literal["approximate", "off"] = Field(
        "approximate", description="The endpoint picker's prefix-cache scorer: approximate = it tracks which "
                                   "replica saw which prompt prefix; off = queue and KV-cache scorers only.")
    gateway_class: Literal["gke-l7-rilb", "gke-l7-regional-external-managed"] = Field(
        "gke-l7-rilb", description="GatewayClass with routing: gke-gateway (regional internal, or regional "
                                   "external if the policy pack allows public load balancers).")
    proxy_subnet_cidr: Text | None = Field(
        None, description="With routing: gke-gateway, the CIDR of a proxy-only subnet the program creates in "
                          "the cluster's region and network (e.g. 10.129.0.0/23); unset = the subnet must exist.")
    request_timeout_seconds: Int = Field(600, ge=10, le=86400, description="How long a request may run through "
                                                                            "the router or gateway.")

    @field_validator("chat_ui_image")
    @classmethod
    def _pinned(cls, image: str | None) -> str | None:
        return image if image is None else pinned_image(image, "REPO/chat-ui:1.0")

    @field_validator("namespace")
    @classmethod
    def _own_namespace(cls, name: str) -> str:
        if problem := namespace_problem(name):
            raise ValueError(problem)
        return name

    @field_validator("allowed_namespaces")
    @classmethod
    def _namespaces(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        for name in names:
            if len(name) > 63 or not DNS_LABEL.fullmatch(name):
                raise ValueError(f"{name} is not a namespace name (a DNS label of at most 63 characters)")
        return names

    @field_validator("proxy_subnet_cidr")
    @classmethod
    def _proxy_cidr(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if problem := vpc_range_problem(value):
            raise ValueError(f"{problem}; a proxy-only subnet is an IPv4 range from /8 to /26 (Google recommends "
                             "/23), e.g. 10.129.0.0/23")
        if ipaddress.ip_network(value).prefixlen > 26:
            raise ValueError("a proxy-only subnet is an IPv4 range from /8 to /26 (Google recommends /23), "
                             "e.g. 10.129.0.0/23")
        return value

    @field_validator("source_ranges")
    @classmethod
    def _cidrs(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        if not values:
            raise ValueError("expected at least one CIDR, e.g. [10.0.0.0/8]")
        for value in values:
            try:
                network = ipaddress.ip_network(value, strict=True)
            except ValueError as exc:
                raise ValueError(f"{value} is not a network in CIDR form ({exc}), e.g. 10.0.0.0/8") from None
            if network.version == 4 and any(network.subnet_of(bad) for bad in VPC_NEVER):
                raise ValueError(f"{value} is loopback, link-local, multicast or 0.0.0.0/8: no client of an internal "
                                 "load balancer comes from there; e.g. 10.0.0.0/8")
        return values


class MonitoringConfig(Section):
    """Managed Prometheus scraping, the dashboard and the metrics adapter."""

    scrape_interval: Any = Field("15s", description="PodMonitoring interval, 5s to 300s.",
                                 json_schema_extra={"type": "string", "pattern": "^[0-9]+s$"})
    dashboard: Bool = Field(True, description="Create the Cloud Monitoring dashboard.")
    install_adapter: Bool = Field(True, description="false when the custom-metrics Stackdriver adapter is already "
                                                    "installed.")

    @field_validator("scrape_interval")
    @classmethod
    def _seconds(cls, interval: Any) -> str:
        if not (isinstance(interval, str) and re.fullmatch(r"[0-9]+s", interval) and 5 <= int(interval[:-1]) <= 300):
            raise ValueError("expected whole seconds in ASCII digits 0-9, between 5s and 300s, e.g. 15s")
        return interval


SECTIONS: dict[str, type[Section]] = {
    "cluster": ClusterConfig, "accelerator": AcceleratorConfig, "model": ModelConfig,
    "parallelism": ParallelismConfig, "vllm": VllmConfig, "weights": WeightsConfig,
    "autoscaling": AutoscalingConfig, "serving": ServingConfig, "monitoring": MonitoringConfig,
}
"""Every `vllm-gke:` object key, in the order the README and Pulumi.yaml list them."""

SECRETS: dict[str, str] = {
    "hfToken": "Hugging Face token for gated models (download Job only).",
    "apiKey": "API key the vLLM server requires (VLLM_API_KEY from a Secret); unset = no key.",
}
"""Secret keys (`pulumi config set --secret`): only whether each is set is read at plan time."""


def section_defaults(section: type[Section]) -> dict[str, Any]:
    """A section's defaults by alias, the fields without a default (required) and those defaulting to None left out."""
    out = {}
    for name, info in section.model_fields.items():
        if info.is_required() or info.default is None:
            continue
        value = info.default
        out[info.alias or name] = list(value) if isinstance(value, tuple) else value
    return out
