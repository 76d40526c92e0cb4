"""Stack configuration -> validated, frozen settings.

The program reads `pulumi.Config` exactly once (`from_pulumi`); everything else takes the
`Settings` built here. Every key is declared once, with its type, default, bounds, choices and
description, in `planner/stack_schema.py` (pydantic); Pulumi.yaml's `config:` block, the README
reference and the JSON Schema are generated from it. A stack's object is read over the declared
defaults field by field, so a stack names only what it changes. Every invalid value raises one
`ConfigError` naming the key, the value and what is accepted; unknown keys are errors too, so a
typo never passes silently.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from planner import routing
from planner.architecture import ModelArchitecture
from planner.catalog import ACCELERATORS, DISK_TYPES, MACHINE_SERIES, Accelerator, MachineType, machine_series
from planner.checkpoint import hub_tensors, load_tensors_file, tensor_bytes, tensor_groups
from planner.config_errors import section
from planner.errors import NAMESPACE, ConfigError, fmt_value
from planner.gcs import GcsError, NotServableError, gcs_config, gcs_tensors
from planner.model_config import load_architecture, parse_hf_config
from planner.stack_schema import (
    SECRETS,
    SECTIONS,
    AcceleratorConfig,
    AutoscalingConfig,
    ClusterConfig,
    FallbackConfig,
    ModelConfig,
    MonitoringConfig,
    ParallelismConfig,
    ServingConfig,
    section_defaults,
)
from planner.vllm_rules import dsv4_rules, gpu_rules, inkling_rules, release_rules, vllm_rules

PROJECT_DIR = Path(__file__).resolve().parent.parent


class _OnMachine:
    """The catalog entries of a `type` and `machine_type` (an accelerator or one rung of it)."""

    type: str
    machine_type: str

    @property
    def catalog(self) -> Accelerator:
        return ACCELERATORS[self.type]

    @property
    def machine(self) -> MachineType:
        machine = self.catalog.machine(self.machine_type)
        assert machine is not None  # checked when the settings were built
        return machine


@dataclass(frozen=True)
class Rung(_OnMachine):
    """One node configuration the cluster autoscaler may create: a machine type, one way of buying it, its zones.
    The stack's rungs, in order, are the ComputeClass's priorities (planner/compute_class.py)."""

    key: str
    """Where it is configured: accelerator or accelerator.fallbacks[N]."""
    type: str
    machine_type: str
    provisioning: str
    zones: tuple[str, ...]
    reservation: str | None = None

    def describe(self) -> str:
        return f"{self.machine_type} ({self.type}) {self.provisioning} in {', '.join(self.zones)}"


@dataclass(frozen=True)
class AcceleratorSettings(_OnMachine):
    type: str
    machine_type: str
    gpus_per_node: int
    zones: tuple[str, ...]
    provisioning: str
    """The first way of buying: the Pulumi-managed pool's."""
    reservation: str | None
    driver_version: str
    rungs: tuple[Rung, ...] = ()
    """Every (machine, way of buying, zones) in the order the autoscaler tries them; the first is the pool's."""
    spot_multi_node: bool = False

    @property
    def compute_class(self) -> bool:
        """Several zones or several rungs: the serving pods select a ComputeClass, not one pool."""
        return len(self.rungs) > 1 or len(self.zones) > 1

    @property
    def pool_zones(self) -> tuple[str, ...]:
        """The Pulumi-managed GPU pool's zones: its rung's (a reservation's zone alone when that rung reserves)."""
        return self.rungs[0].zones if self.rungs else self.zones

    @property
    def all_zones(self) -> tuple[str, ...]:
        """Every zone a serving node may be in, the primary's first."""
        return tuple(dict.fromkeys(z for rung in self.rungs for z in rung.zones)) or self.zones


@dataclass(frozen=True)
class ModelSettings:
    id: str
    revision: str
    source: str
    gcs_uri: str | None
    weights_gib: float | None
    served_name: str
    architecture: ModelArchitecture
    checkpoint_bytes: float | None = None
    """The bytes vLLM loads of the checkpoint's tensors (model.tensorsFile, planner/checkpoint.py); None without."""
    skipped_tensors: int = 0
    """Tensors of model.tensorsFile vLLM does not load (multi-token-prediction layers)."""
    tensors_from: str = ""
    """Where the checkpoint's tensors were read: "model.tensorsFile", or the headers on the Hub or under
    model.gcsUri at preview."""
    tensors_key: str = ""
    """The stack key that names where they were read: model.tensorsFile, model.gcsUri or model.id."""
    trust_remote_code: bool = False
    """model.trustRemoteCode: vLLM runs with --trust-remote-code, the download Job takes the repository's *.py."""


@dataclass(frozen=True)
class VllmSettings:
    image: str
    max_model_len: int
    gpu_memory_utilization: float
    dtype: str
    kv_cache_dtype: str
    extra_args: tuple[str, ...]
    compile_cache: bool = True


@dataclass(frozen=True)
class WeightsSettings:
    disk_type: str | None
    """weights.diskType when set: the only type the planner considers."""
    size_gib: int | None
    load_seconds: int
    """weights.loadSeconds: the target for one node's share of the weights."""
    disk_types: tuple[str, ...]
    """The types the planner chooses among: the machine's attachable weights-disk types, or the forced one."""


@dataclass(frozen=True)
class Settings:
    """A stack's validated settings. The sections read as the user wrote them are the schema's own frozen models
    (planner/stack_schema.py: every key declared once); accelerator, model, vllm and weights carry what the planner
    derives from them (the catalog entries and rungs, the parsed architecture, the resolved maxModelLen, the disk
    types every rung attaches)."""

    cluster: ClusterConfig
    accelerator: AcceleratorSettings
    model: ModelSettings
    parallelism: ParallelismConfig
    vllm: VllmSettings
    weights: WeightsSettings
    autoscaling: AutoscalingConfig
    serving: ServingConfig
    monitoring: MonitoringConfig
    has_hf_token: bool = False
    has_api_key: bool = False
    warnings: tuple[str, ...] = field(default=())


def project_defaults() -> dict[str, Any]:
    """The default object of every `vllm-gke:` key (what Pulumi.yaml's `config:` block declares)."""
    return {key: section_defaults(model) for key, model in SECTIONS.items()}


def _decode(key: str, value: Any) -> Any:
    """Pulumi hands object values to Python as JSON strings; stack files as YAML mappings."""
    if key in SECTIONS and isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            raise ConfigError(key, value, "expected an object (a YAML mapping)") from None
    return value


def _options(key: str, value: str | tuple[str, ...] | None, machine: MachineType) -> tuple[str, ...]:
    """The ways of buying `machine` a rung list names (the series' default when unset), each one it is sold as."""
    series = machine_series(machine.name)
    options = (value,) if isinstance(value, str) else tuple(value or (series.provisioning[0],))
    for option in options:
        if option not in series.provisioning:
            raise ConfigError(key, option, f"Compute Engine does not sell {machine.name} ({series.name}) that way; "
                                           f"accepted: {', '.join(series.provisioning)}")
    return options


def _reservation(key: str, options: tuple[str, ...], reservation: str | None, zone: str | None,
                 zones: tuple[str, ...]) -> tuple[str, ...]:
    """The zones of the rung that consumes the reservation: its own zone only. A specific reservation is zonal
    (Compute Engine "Reservations of Compute Engine zonal resources"), and a node pool that pins one must be in that
    zone; a pool spanning others would try to create VMs the reservation cannot hold."""
    if "reservation" in options and reservation is None:
        raise ConfigError(f"{key}.reservation", None, f"is required when {key}.provisioning lists reservation")
    if "reservation" not in options:
        for name, value in (("reservation", reservation), ("reservationZone", zone)):
            if value is not None:
                raise ConfigError(f"{key}.{name}", value,
                                  f"only used with provisioning: reservation (provisioning is {', '.join(options)})")
        return zones
    if zone is None:
        if len(zones) > 1:
            raise ConfigError(f"{key}.reservationZone", None,
                              f"is required with several zones: a reservation is zonal; name the zone of "
                              f"{reservation}, one of {', '.join(zones)}")
        return zones
    if zone not in zones:
        raise ConfigError(f"{key}.reservationZone", zone, f"accepted: one of the rung's zones, {', '.join(zones)}")
    return (zone,)


def _fallback(index: int, fb: FallbackConfig, gpus: int, zones: tuple[str, ...]) -> list[Rung]:
    """The rungs of accelerator.fallbacks[index]: the same GPUs per node as the primary (one pod shape per
    LeaderWorkerSet), its own ways of buying, the primary's zones unless it names its own."""
    key = f"accelerator.fallbacks[{index}]"
    catalog = ACCELERATORS[fb.type]
    if fb.machine_type is not None:
        machine = catalog.machine(fb.machine_type)
        if machine is None:
            raise ConfigError(f"{key}.machineType", fb.machine_type,
                              f"does not carry {fb.type}; accepted: {', '.join(m.name for m in catalog.machines)}")
    else:
        machine = catalog.default_machine(gpus)
        if machine is None:
            counts = ", ".join(str(c) for c in catalog.gpu_counts())
            raise ConfigError(f"{key}.type", fb.type, f"{fb.type} machine types carry {counts} GPUs; a fallback must "
                                                      f"carry the primary's {gpus} per node (one pod shape)")
    if machine.gpus != gpus:
        raise ConfigError(f"{key}.machineType", machine.name,
                          f"has {machine.gpus} GPUs per node and the primary {gpus}; a LeaderWorkerSet has one pod "
                          f"shape, so a fallback must carry {gpus} GPUs per node")
    options = _options(f"{key}.provisioning", fb.provisioning, machine)
    where = fb.zones or zones
    reserved = _reservation(key, options, fb.reservation, fb.reservation_zone, where)
    return [Rung(key, fb.type, machine.name, option, reserved if option == "reservation" else where,
                 fb.reservation if option == "reservation" else None) for option in options]


def _accelerator(acc: AcceleratorConfig) -> AcceleratorSettings:
    catalog = ACCELERATORS[acc.type]
    gpus = acc.gpus_per_node
    if acc.machine_type is not None:
        machine = catalog.machine(acc.machine_type)
        if machine is None:
            names = ", ".join(m.name for m in catalog.machines)
            raise ConfigError("accelerator.machineType", acc.machine_type,
                              f"does not carry {acc.type}; accepted: {names}")
        if gpus is not None and gpus != machine.gpus:
            raise ConfigError("accelerator.gpusPerNode", gpus,
                              f"{acc.machine_type} has {machine.gpus} x {acc.type}; "
                              f"use {machine.gpus} or leave it unset")
    else:
        machine = catalog.default_machine(gpus if gpus is not None else catalog.gpu_counts()[0])
        if machine is None:
            counts = ", ".join(str(c) for c in catalog.gpu_counts())
            raise ConfigError("accelerator.gpusPerNode", gpus, f"{acc.type} machine types carry {counts} GPUs")
    if not acc.zones:
        raise ConfigError("accelerator.zones", list(acc.zones), "list at least one zone, e.g. [us-central1-a]")
    options = _options("accelerator.provisioning", acc.provisioning, machine)
    reserved = _reservation("accelerator", options, acc.reservation, acc.reservation_zone, acc.zones)
    rungs = [Rung("accelerator", acc.type, machine.name, option, reserved if option == "reservation" else acc.zones,
                  acc.reservation if option == "reservation" else None) for option in options]
    for index, fb in enumerate(acc.fallbacks):
        rungs += _fallback(index, fb, machine.gpus, acc.zones)
    if len(rungs) > 1 and acc.driver_version == "INSTALLATION_DISABLED":
        # A ComputeClass rule installs GKE's driver (gpu.driverVersion: default | latest); there is no "none".
        raise ConfigError("accelerator.driverVersion", acc.driver_version,
                          "the node pools GKE creates for the other rungs install GKE's driver; use LATEST or "
                          "DEFAULT, or a single way of buying and no fallbacks")
    return AcceleratorSettings(acc.type, machine.name, machine.gpus, acc.zones, options[0], acc.reservation,
                               acc.driver_version, tuple(rungs), acc.spot_multi_node)


def _series_attaching(disk_type: str) -> list[str]:
    """The machine families (A3, G2, ...) whose series attach `disk_type`, from planner/catalog.py."""
    return sorted({series.name.split(" ")[0] for series in MACHINE_SERIES if disk_type in series.data_disk_types})


def _weights_disk_types(accelerator: AcceleratorSettings, disk_type: str | None) -> tuple[str, ...]:
    """The weights-disk types every rung's machine attaches (weights.diskType when set). Several zones need
    Hyperdisk ML: the PD CSI driver serves one volume from same-named disks in several zones only for the disk types
    its multi-zone config lists (Hyperdisk ML on GKE), read-only, each disk labelled goog-gke-multi-zone
    (kubernetes-sigs/gcp-compute-persistent-disk-csi-driver, pkg/gce-pd-csi-driver/controller.go
    validateMultiZoneDisk)."""
    several = len(accelerator.all_zones) > 1
    if several and disk_type is not None and disk_type != "hyperdisk-ml":
        raise ConfigError("weights.diskType", disk_type,
                          f"serving zones {', '.join(accelerator.all_zones)} share one read-only volume only on "
                          "hyperdisk-ml (a pd-* disk is zonal); use weights.diskType: hyperdisk-ml or one zone")
    attachable: list[str] | None = None
    for rung in accelerator.rungs or [Rung("accelerator", accelerator.type, accelerator.machine_type,
                                           accelerator.provisioning, accelerator.zones)]:
        series = machine_series(rung.machine_type)
        kinds = [t for t in series.data_disk_types if t in DISK_TYPES]
        if several and "hyperdisk-ml" not in kinds:
            raise ConfigError(f"{rung.key}.machineType", rung.machine_type,
                              f"{series.name} cannot attach hyperdisk-ml, the only weights disk several zones can "
                              f"share; use a machine that can ({', '.join(_series_attaching('hyperdisk-ml'))}) or one "
                              "zone")
        if disk_type is not None and disk_type not in kinds:
            key = "weights.diskType" if rung.key == "accelerator" else f"{rung.key}.machineType"
            shown = disk_type if rung.key == "accelerator" else rung.machine_type
            raise ConfigError(key, shown, f"{rung.machine_type} ({series.name}) cannot attach {disk_type}; accepted: "
                                          f"{', '.join(kinds)}")
        attachable = kinds if attachable is None else [t for t in attachable if t in kinds]
    if disk_type is not None:
        return (disk_type,)
    if several:
        return ("hyperdisk-ml",)
    if not attachable:
        raise ConfigError("accelerator.fallbacks", [r.machine_type for r in accelerator.rungs],
                          "no weights-disk type attaches to every rung's machine; drop a fallback")
    return tuple(attachable)


def _gcs_architecture(m: ModelConfig) -> tuple[ModelArchitecture, str]:
    """config.json under model.gcsUri: the checkpoint the download Job stages is the prefix's, not the Hub's."""
    assert m.gcs_uri is not None
    try:
        data = gcs_config(m.gcs_uri)
    except GcsError as exc:
        raise ConfigError("model.gcsUri", m.gcs_uri,
                          f"could not read config.json there ({exc}); when offline or without Google credentials, "
                          "set model.configFile (a local config.json) or model.architecture") from None
    return (parse_hf_config(data, m.id.rsplit("/", 1)[-1], "model.gcsUri"),
            f"model architecture read from {m.gcs_uri.rstrip('/')}/config.json; commit it as model.configFile for "
            "reproducible offline plans")


def _model(m: ModelConfig, project_dir: Path) -> tuple[ModelSettings, str | None]:
    if m.source == "gcs" and m.gcs_uri is None:
        raise ConfigError("model.gcsUri", m.gcs_uri, "a gs://bucket/path URI is required when model.source is gcs")
    if m.source == "huggingface" and m.gcs_uri is not None:
        raise ConfigError("model.gcsUri", m.gcs_uri, "only used with model.source: gcs")
    on_gcs = m.source == "gcs" and not m.config_file and m.architecture is None
    if on_gcs:
        arch, note = _gcs_architecture(m)
    else:
        arch, note = load_architecture(m.id, m.revision, m.config_file, m.architecture, project_dir)
    if arch.remote_code and not m.trust_remote_code:  # before any read of the checkpoint's headers
        raise ConfigError("model.trustRemoteCode", False,
                          f"config.json's auto_map names {arch.remote_code} for model_type {arch.model_type}, a "
                          "config class neither transformers nor vLLM has, so vLLM starts this model only with "
                          "--trust-remote-code; set model.trustRemoteCode: true to run the repository's code")
    checkpoint, skipped, tensors, tensors_from = None, 0, None, ""
    key = "model.tensorsFile" if m.tensors_file is not None else "model.gcsUri" if on_gcs else "model.id"
    if m.tensors_file is not None:
        tensors, tensors_from = load_tensors_file(m.tensors_file, project_dir), "model.tensorsFile"
    elif note is not None and m.weights_gib is None:  # config.json was read remotely: the headers can be too
        place = f"at {m.gcs_uri}" if on_gcs else f"on the Hub, {m.id}@{m.revision}"
        try:
            tensors = (gcs_tensors(str(m.gcs_uri)) if on_gcs else hub_tensors(m.id, m.revision))[0]
            tensors_from = f"the safetensors headers {place}"
        except NotServableError as exc:
            raise ConfigError("model.gcsUri", m.gcs_uri, str(exc)) from None
        except Exception as exc:  # network, auth, not a safetensors checkpoint: the count stands, and says so
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            note += (f"; the checkpoint's safetensors headers could not be read {place} ({reason}), so the "
                     "weights are counted from config.json")
    if tensors is not None:
        checkpoint, skipped = tensor_bytes(tensors, arch.num_layers, arch.mtp_layers, key, arch)
        if checkpoint:
            arch = replace(arch, checkpoint_groups=tensor_groups(tensors, arch, key))
    return ModelSettings(m.id, m.revision, m.source, m.gcs_uri, m.weights_gib, m.served_name or m.id, arch,
                         checkpoint, skipped, tensors_from, key if tensors is not None else "",
                         m.trust_remote_code), note


def build_settings(raw: Mapping[str, Any], project_dir: Path = PROJECT_DIR) -> Settings:
    """Validate raw stack config (keys without the `vllm-gke:` prefix) into Settings. Each object is read over its
    declared defaults field by field (planner/stack_schema.py), so a stack names only what it changes."""
    known = set(SECTIONS) | set(SECRETS)
    for key in raw:
        if key not in known:
            raise ConfigError(key, raw[key], f"unknown key; accepted keys: {', '.join(sorted(known))}")
    cfg = {key: section(key, model, _decode(key, raw.get(key))) for key, model in SECTIONS.items()}

    cluster = c = cfg["cluster"]
    accelerator = _accelerator(cfg["accelerator"])
    zone = accelerator.zones[0]
    if zone != c.location and not zone.startswith(f"{c.location}-"):
        raise ConfigError("accelerator.zones", list(accelerator.zones),
                          f"{zone} is not in the cluster's location {c.location}; use a zone of {c.location}")
    for rung in accelerator.rungs:
        outside = [z for z in rung.zones if not z.startswith(f"{cluster.region}-")]
        if outside:
            raise ConfigError(f"{rung.key}.zones", list(rung.zones),
                              f"{outside[0]} is outside the cluster's region {cluster.region}; a node pool's zones "
                              f"are zones of its cluster's region")
    if c.create and not cfg["serving"].install_lws:
        raise ConfigError("serving.installLws", False, "a cluster this program creates has no LeaderWorkerSet "
                          "controller; leave serving.installLws true (false is for existing clusters running one)")
    model, note = _model(cfg["model"], project_dir)
    v = cfg["vllm"]
    max_len = v.max_model_len or model.architecture.context
    if not model.architecture.admits(max_len):
        raise ConfigError("vllm.maxModelLen", max_len,
                          f"{model.architecture.name} supports at most "
                          f"{model.architecture.max_position_embeddings} tokens")
    vllm = VllmSettings(v.image, max_len, v.gpu_memory_utilization, v.dtype, v.kv_cache_dtype, v.extra_args,
                        v.compile_cache)
    notes = [note] if note else []
    if model.trust_remote_code:
        code = model.architecture.remote_code
        notes.append("model.trustRemoteCode: vLLM runs the model repository's own Python (--trust-remote-code)"
                     + (f", here its config class {code}" if code else ""))
    notes += vllm_rules(v, model.architecture) + release_rules(v, model.architecture)
    gpu_rules(accelerator, v)
    dsv4_rules(accelerator, v, model.architecture)
    inkling_rules(v, model.architecture)

    w = cfg["weights"]
    types = _weights_disk_types(accelerator, w.disk_type)
    largest = max(DISK_TYPES[t].max_size_gib for t in types)
    if w.size_gib is not None and w.size_gib > largest:
        raise ConfigError("weights.sizeGib", w.size_gib, f"a {' or '.join(types)} disk holds at most {largest:,} GiB")
    weights = WeightsSettings(w.disk_type, w.size_gib, w.load_seconds, types)

    autoscaling = cfg["autoscaling"]
    if autoscaling.min_replicas > autoscaling.max_replicas:
        raise ConfigError("autoscaling.minReplicas", autoscaling.min_replicas,
                          f"must not exceed autoscaling.maxReplicas ({autoscaling.max_replicas})")

    settings = Settings(cluster, accelerator, model, cfg["parallelism"], vllm, weights, autoscaling, cfg["serving"],
                        cfg["monitoring"], has_hf_token=bool(raw.get("hfToken")), has_api_key=bool(raw.get("apiKey")),
                        warnings=tuple(notes))
    routed = routing.check(settings)  # the routing keys' refusals (ConfigError) and warnings
    return replace(settings, warnings=(*settings.warnings, *routed)) if routed else settings


@dataclass(frozen=True)
class Stack:
    """Everything the program reads from its stack, read once: validated settings, the GCP project and the
    secrets (Pulumi secret Outputs, or None where unset)."""

    settings: Settings
    project: str
    hf_token: Any = None
    api_key: Any = None
    name: str = "dev"
    """`<Pulumi project>/<stack>`: what makes the GCE and cluster-scoped names of one stack its own."""


def _edit_distance(a: str, b: str) -> int:
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


def check_namespaces(config: Mapping[str, Any]) -> None:
    """Refuse a key whose namespace is a near miss of this project's (`vllm_gke:`, `VLLM-GKE:`, `vllm-gk:`): Pulumi
    passes such keys by without a word, and the setting would silently stay at its default."""
    for key in config:
        namespace, _, name = str(key).partition(":")
        folded = namespace.strip().lower()
        if namespace != NAMESPACE and (re.sub(r"[^a-z0-9]", "", folded) == NAMESPACE.replace("-", "")
                                       or _edit_distance(folded, NAMESPACE) <= 2):
            raise ConfigError(str(key), config[key], f"the namespace {json.dumps(namespace)} is not this project's, so "
                                                     f"Pulumi would ignore the key; write it as {NAMESPACE}:{name}")


def from_pulumi() -> Stack:
    """Read the running Pulumi program's configuration: every `vllm-gke:` key, `gcp:project` and the secrets.
    Pulumi is imported here, not at module level, so the planner package imports without it."""
    import pulumi
    from pulumi.runtime import config as runtime_config

    prefix = f"{NAMESPACE}:"
    every = {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}
    check_namespaces(every)
    raw = {k[len(prefix):]: v for k, v in every.items() if k.startswith(prefix)}
    settings = build_settings(raw, PROJECT_DIR)
    project = every.get("gcp:project")
    if not project:
        raise ConfigError("gcp:project", None, "is required: `pulumi config set gcp:project MY_PROJECT`")
    own = pulumi.Config(NAMESPACE)
    return Stack(settings, project,
                 hf_token=own.get_secret("hfToken") if settings.has_hf_token else None,
                 api_key=own.get_secret("apiKey") if settings.has_api_key else None,
                 name=f"{pulumi.get_project()}/{pulumi.get_stack()}")


__all__ = ["NAMESPACE", "ConfigError", "Settings", "Stack", "build_settings", "check_namespaces", "fmt_value",
           "from_pulumi"]
