"""Stack configuration -> validated, frozen settings.

The program reads `pulumi.Config` exactly once (`from_pulumi`); everything else takes the
`Settings` built here. Defaults live only in `Pulumi.yaml`'s `config:` block: for object keys the
stack's object is merged field by field over the project default, so a stack names only what it
changes. Every invalid value raises one `ConfigError` naming the key, the value and what is
accepted; unknown keys are errors too, so a typo never passes silently.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from planner.architecture import ModelArchitecture, load_architecture
from planner.catalog import ACCELERATORS, DISK_TYPES, Accelerator, MachineType
from planner.errors import NAMESPACE, ConfigError, fmt_value

PROJECT_DIR = Path(__file__).resolve().parent.parent
SECRET_KEYS = ("hfToken", "apiKey")
OBJECT_KEYS = ("cluster", "accelerator", "model", "parallelism", "vllm", "weights",
               "autoscaling", "serving", "monitoring")

PROVISIONING = ("on-demand", "spot", "reservation")
MODEL_SOURCES = ("huggingface", "gcs")
DTYPES = ("auto", "bfloat16", "float16", "float32", "half")
KV_CACHE_DTYPES = ("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2")
EXPOSE = ("cluster-ip", "internal-lb")
METRICS = ("queue", "batch")
RELEASE_CHANNELS = ("RAPID", "REGULAR", "STABLE", "EXTENDED")


class _Section:
    """Reads one config object, remembering which fields were consumed."""

    def __init__(self, key: str, raw: Any):
        if not isinstance(raw, Mapping):
            raise ConfigError(key, raw, "expected an object (a YAML mapping)")
        self.key, self.raw, self.seen = key, raw, set()

    def _get(self, name: str, required: bool) -> Any:
        self.seen.add(name)
        value = self.raw.get(name)
        if value is None and required:
            raise ConfigError(f"{self.key}.{name}", None, "is required")
        return value

    def str(self, name: str, required: bool = False, choices: tuple[str, ...] = ()) -> str | None:
        value = self._get(name, required)
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"{self.key}.{name}", value, "expected a non-empty string")
        if choices and value not in choices:
            raise ConfigError(f"{self.key}.{name}", value, f"accepted: {', '.join(choices)}")
        return value

    def int(self, name: str, required: bool = False, minimum: int = 1) -> int | None:
        value = self._get(name, required)
        if value is None:
            return None
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ConfigError(f"{self.key}.{name}", value, f"expected an integer >= {minimum}")
        return value

    def float(self, name: str, low: float, high: float, required: bool = False) -> float | None:
        value = self._get(name, required)
        if value is None:
            return None
        try:
            number = float(value) if not isinstance(value, bool) else None
        except (TypeError, ValueError):
            number = None
        if number is None or not (low < number <= high):
            raise ConfigError(f"{self.key}.{name}", value, f"expected a number in ({low}, {high}]")
        return number

    def bool(self, name: str, required: bool = False) -> bool | None:
        value = self._get(name, required)
        if value is None:
            return None
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        if not isinstance(value, bool):
            raise ConfigError(f"{self.key}.{name}", value, "expected true or false")
        return value

    def str_list(self, name: str) -> tuple[str, ...]:
        value = self._get(name, False)
        if value is None:
            return ()
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise ConfigError(f"{self.key}.{name}", value, "expected a list of non-empty strings")
        return tuple(value)

    def obj(self, name: str) -> dict[str, Any] | None:
        value = self._get(name, False)
        if value is not None and not isinstance(value, Mapping):
            raise ConfigError(f"{self.key}.{name}", value, "expected an object (a YAML mapping)")
        return dict(value) if value is not None else None

    def done(self) -> None:
        unknown = sorted(set(self.raw) - self.seen)
        if unknown:
            raise ConfigError(f"{self.key}.{unknown[0]}", self.raw[unknown[0]],
                              f"unknown key; accepted keys: {', '.join(sorted(self.seen))}")


@dataclass(frozen=True)
class ClusterSettings:
    name: str
    location: str
    create: bool
    release_channel: str


@dataclass(frozen=True)
class AcceleratorSettings:
    type: str
    machine_type: str
    gpus_per_node: int
    zones: tuple[str, ...]
    provisioning: str
    reservation: str | None
    driver_version: str

    @property
    def catalog(self) -> Accelerator:
        return ACCELERATORS[self.type]

    @property
    def machine(self) -> MachineType:
        machine = self.catalog.machine(self.machine_type)
        assert machine is not None  # checked when the settings were built
        return machine


@dataclass(frozen=True)
class ModelSettings:
    id: str
    revision: str
    source: str
    gcs_uri: str | None
    weights_gib: float | None
    served_name: str
    architecture: ModelArchitecture


@dataclass(frozen=True)
class ParallelismSettings:
    tensor: int | None
    pipeline: int | None
    min_concurrent_sequences: int


@dataclass(frozen=True)
class VllmSettings:
    image: str
    max_model_len: int
    gpu_memory_utilization: float
    dtype: str
    kv_cache_dtype: str
    extra_args: tuple[str, ...]


@dataclass(frozen=True)
class WeightsSettings:
    disk_type: str
    size_gib: int | None


@dataclass(frozen=True)
class AutoscalingSettings:
    min_replicas: int
    max_replicas: int
    metric: str
    target: float | None


@dataclass(frozen=True)
class ServingSettings:
    namespace: str
    expose: str
    install_lws: bool
    allowed_namespaces: tuple[str, ...]
    smoke_test: bool
    source_ranges: tuple[str, ...]


@dataclass(frozen=True)
class MonitoringSettings:
    scrape_interval: str
    dashboard: bool
    install_adapter: bool


@dataclass(frozen=True)
class Settings:
    cluster: ClusterSettings
    accelerator: AcceleratorSettings
    model: ModelSettings
    parallelism: ParallelismSettings
    vllm: VllmSettings
    weights: WeightsSettings
    autoscaling: AutoscalingSettings
    serving: ServingSettings
    monitoring: MonitoringSettings
    has_hf_token: bool = False
    has_api_key: bool = False
    warnings: tuple[str, ...] = field(default=())


def project_defaults(project_dir: Path = PROJECT_DIR) -> dict[str, Any]:
    """The `default` of every key declared in Pulumi.yaml's `config:` block."""
    project = yaml.safe_load((project_dir / "Pulumi.yaml").read_text())
    defaults: dict[str, Any] = {}
    for key, decl in (project.get("config") or {}).items():
        name = key.split(":", 1)[1] if key.startswith(f"{NAMESPACE}:") else key
        if isinstance(decl, Mapping) and "default" in decl:
            defaults[name] = decl["default"]
    return defaults


def _decode(key: str, value: Any) -> Any:
    """Pulumi hands object values to Python as JSON strings; stack files as YAML mappings."""
    if key in OBJECT_KEYS and isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            raise ConfigError(key, value, "expected an object (a YAML mapping)") from None
    return value


def merge_with_defaults(raw: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    merged: dict[str, Any] = {k: v for k, v in defaults.items()}
    for key, value in raw.items():
        value = _decode(key, value)
        base = merged.get(key)
        if isinstance(base, Mapping) and isinstance(value, Mapping):
            merged[key] = {**base, **value}
        else:
            merged[key] = value
    return merged


def _accelerator(sec: _Section) -> AcceleratorSettings:
    acc_type = sec.str("type", required=True, choices=tuple(ACCELERATORS))
    acc = ACCELERATORS[acc_type]
    machine_type = sec.str("machineType")
    gpus = sec.int("gpusPerNode")
    if machine_type is not None:
        machine = acc.machine(machine_type)
        if machine is None:
            names = ", ".join(m.name for m in acc.machines)
            raise ConfigError("accelerator.machineType", machine_type,
                              f"does not carry {acc_type}; accepted: {names}")
        if gpus is not None and gpus != machine.gpus:
            raise ConfigError("accelerator.gpusPerNode", gpus,
                              f"{machine_type} has {machine.gpus} x {acc_type}; "
                              f"use {machine.gpus} or leave it unset")
    else:
        wanted = gpus if gpus is not None else acc.gpu_counts()[0]
        machine = acc.default_machine(wanted)
        if machine is None:
            counts = ", ".join(str(c) for c in acc.gpu_counts())
            raise ConfigError("accelerator.gpusPerNode", gpus,
                              f"{acc_type} machine types carry {counts} GPUs")
    zones = sec.str_list("zones")
    if not zones:
        raise ConfigError("accelerator.zones", list(zones), "list at least one zone, e.g. [us-central1-a]")
    if len(zones) > 1:
        # The read-only weights disk is zonal and a LeaderWorkerSet mounts one claim.
        raise ConfigError("accelerator.zones", list(zones),
                          "one serving zone per stack (the weights disk is zonal); use one stack per zone")
    provisioning = sec.str("provisioning", required=True, choices=PROVISIONING)
    reservation = sec.str("reservation")
    if provisioning == "reservation" and reservation is None:
        raise ConfigError("accelerator.reservation", None,
                          "is required when accelerator.provisioning is reservation")
    if provisioning != "reservation" and reservation is not None:
        raise ConfigError("accelerator.reservation", reservation,
                          f"only used with provisioning: reservation (provisioning is {provisioning})")
    driver = sec.str("driverVersion", required=True)
    if driver not in ("LATEST", "DEFAULT", "INSTALLATION_DISABLED"):
        raise ConfigError("accelerator.driverVersion", driver,
                          "accepted: LATEST, DEFAULT, INSTALLATION_DISABLED")
    sec.done()
    return AcceleratorSettings(acc_type, machine.name, machine.gpus, zones, provisioning,
                               reservation, driver)


def _cidrs(sec: _Section, name: str) -> tuple[str, ...]:
    """A non-empty list of IPv4/IPv6 networks in CIDR form, host bits clear (as Kubernetes' ipBlock wants)."""
    values = sec.str_list(name)
    if not values:
        raise ConfigError(f"{sec.key}.{name}", list(values), "expected at least one CIDR, e.g. [10.0.0.0/8]")
    for value in values:
        try:
            ipaddress.ip_network(value, strict=True)
        except ValueError as exc:
            raise ConfigError(f"{sec.key}.{name}", value, f"not a network in CIDR form ({exc}), e.g. 10.0.0.0/8")\
                from None
    return values


def _model(sec: _Section, project_dir: Path) -> tuple[ModelSettings, str | None]:
    model_id = sec.str("id", required=True)
    revision = sec.str("revision", required=True)
    source = sec.str("source", required=True, choices=MODEL_SOURCES)
    gcs_uri = sec.str("gcsUri")
    if source == "gcs" and (gcs_uri is None or not gcs_uri.startswith("gs://")):
        raise ConfigError("model.gcsUri", gcs_uri, "a gs://bucket/path URI is required when model.source is gcs")
    if source == "huggingface" and gcs_uri is not None:
        raise ConfigError("model.gcsUri", gcs_uri, "only used with model.source: gcs")
    config_file = sec.str("configFile")
    inline = sec.obj("architecture")
    weights_gib = sec.float("weightsGib", 0, 100_000)
    served_name = sec.str("servedName") or model_id
    sec.done()
    arch, note = load_architecture(model_id, revision, config_file, inline, project_dir)
    return ModelSettings(model_id, revision, source, gcs_uri, weights_gib, served_name, arch), note


def build_settings(raw: Mapping[str, Any], project_dir: Path = PROJECT_DIR,
                   defaults: Mapping[str, Any] | None = None) -> Settings:
    """Validate raw stack config (keys without the `vllm-gke:` prefix) into Settings."""
    if defaults is None:
        defaults = project_defaults(project_dir)
    known = set(OBJECT_KEYS) | set(SECRET_KEYS)
    for key in raw:
        if key not in known:
            raise ConfigError(key, raw[key], f"unknown key; accepted keys: {', '.join(sorted(known))}")
    cfg = merge_with_defaults(raw, defaults)
    for key in OBJECT_KEYS:
        if key not in cfg:
            raise ConfigError(key, None, "is required")

    sec = _Section("cluster", cfg["cluster"])
    cluster = ClusterSettings(sec.str("name", required=True), sec.str("location", required=True),
                              sec.bool("create", required=True),
                              sec.str("releaseChannel", required=True, choices=RELEASE_CHANNELS))
    sec.done()

    accelerator = _accelerator(_Section("accelerator", cfg["accelerator"]))
    model, note = _model(_Section("model", cfg["model"]), project_dir)

    sec = _Section("parallelism", cfg["parallelism"])
    parallelism = ParallelismSettings(sec.int("tensor"), sec.int("pipeline"),
                                      sec.int("minConcurrentSequences", required=True))
    sec.done()

    sec = _Section("vllm", cfg["vllm"])
    image = sec.str("image", required=True)
    if image.endswith(":latest") or (":" not in image.rsplit("/", 1)[-1] and "@" not in image):
        raise ConfigError("vllm.image", image, "pin a tag or digest, e.g. vllm/vllm-openai:v0.32.0")
    max_len = sec.int("maxModelLen", minimum=16) or model.architecture.max_position_embeddings
    if max_len > model.architecture.max_position_embeddings:
        raise ConfigError("vllm.maxModelLen", max_len,
                          f"{model.architecture.name} supports at most "
                          f"{model.architecture.max_position_embeddings} tokens")
    vllm = VllmSettings(image, max_len, sec.float("gpuMemoryUtilization", 0.1, 0.99, required=True),
                        sec.str("dtype", required=True, choices=DTYPES),
                        sec.str("kvCacheDtype", required=True, choices=KV_CACHE_DTYPES),
                        sec.str_list("extraArgs"))
    sec.done()
    owned = ("--tensor-parallel-size", "--pipeline-parallel-size", "--max-model-len", "--model",
             "--gpu-memory-utilization", "--dtype", "--kv-cache-dtype", "--api-key", "--port")
    for arg in vllm.extra_args:
        if arg.split("=", 1)[0] in owned:
            raise ConfigError("vllm.extraArgs", list(vllm.extra_args),
                              f"{arg.split('=', 1)[0]} is set by the program from other keys; remove it")

    sec = _Section("weights", cfg["weights"])
    weights = WeightsSettings(sec.str("diskType", required=True, choices=tuple(DISK_TYPES)),
                              sec.int("sizeGib", minimum=10))
    sec.done()
    if weights.disk_type == "hyperdisk-ml" and not accelerator.catalog.hyperdisk_ml:
        raise ConfigError("weights.diskType", "hyperdisk-ml",
                          f"{accelerator.machine_type} cannot attach Hyperdisk ML; use pd-ssd or pd-balanced")

    sec = _Section("autoscaling", cfg["autoscaling"])
    autoscaling = AutoscalingSettings(sec.int("minReplicas", required=True),
                                      sec.int("maxReplicas", required=True),
                                      sec.str("metric", required=True, choices=METRICS),
                                      sec.float("target", 0, 10_000))
    sec.done()
    if autoscaling.min_replicas > autoscaling.max_replicas:
        raise ConfigError("autoscaling.minReplicas", autoscaling.min_replicas,
                          f"must not exceed autoscaling.maxReplicas ({autoscaling.max_replicas})")

    sec = _Section("serving", cfg["serving"])
    serving = ServingSettings(sec.str("namespace", required=True), sec.str("expose", required=True, choices=EXPOSE),
                              sec.bool("installLws", required=True), sec.str_list("allowedNamespaces"),
                              sec.bool("smokeTest", required=True), _cidrs(sec, "sourceRanges"))
    sec.done()

    sec = _Section("monitoring", cfg["monitoring"])
    interval = sec.str("scrapeInterval", required=True)
    if not (interval.endswith("s") and interval[:-1].isdigit() and 5 <= int(interval[:-1]) <= 300):
        raise ConfigError("monitoring.scrapeInterval", interval, "expected seconds between 5s and 300s, e.g. 15s")
    monitoring = MonitoringSettings(interval, sec.bool("dashboard", required=True),
                                    sec.bool("installAdapter", required=True))
    sec.done()

    return Settings(cluster, accelerator, model, parallelism, vllm, weights, autoscaling, serving,
                    monitoring, has_hf_token=bool(raw.get("hfToken")), has_api_key=bool(raw.get("apiKey")),
                    warnings=(note,) if note else ())


@dataclass(frozen=True)
class Stack:
    """Everything the program reads from its stack, read once: validated settings, the GCP project and the
    secrets (Pulumi secret Outputs, or None where unset)."""

    settings: Settings
    project: str
    hf_token: Any = None
    api_key: Any = None


def from_pulumi() -> Stack:
    """Read the running Pulumi program's configuration: every `vllm-gke:` key, `gcp:project` and the secrets.
    Pulumi is imported here, not at module level, so the planner package imports without it."""
    import pulumi
    from pulumi.runtime import config as runtime_config

    prefix = f"{NAMESPACE}:"
    every = {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}
    raw = {k[len(prefix):]: v for k, v in every.items() if k.startswith(prefix)}
    settings = build_settings(raw, PROJECT_DIR)
    project = every.get("gcp:project")
    if not project:
        raise ConfigError("gcp:project", None, "is required: `pulumi config set gcp:project MY_PROJECT`")
    own = pulumi.Config(NAMESPACE)
    return Stack(settings, project,
                 hf_token=own.get_secret("hfToken") if settings.has_hf_token else None,
                 api_key=own.get_secret("apiKey") if settings.has_api_key else None)


__all__ = ["NAMESPACE", "ConfigError", "Settings", "Stack", "build_settings", "fmt_value", "from_pulumi"]
