"""GPU node pool sized by the planner: machine type, GPUs, taint, zones, autoscaling bounds."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from planner.catalog import machine_series
from planner.compute_class import class_name, pool_taint
from planner.config import Stack
from planner.labels import ACCELERATOR_LABEL, COMPUTE_CLASS_LABEL, GPU_TAINT_KEY, GPU_TAINT_VALUE, SPOT_LABEL
from planner.sizing import Sizing

BOOT_DISK_GB = 200
"""The vLLM image is ~10 GB compressed, ~25 GB unpacked; room for two versions during a rollout."""


@dataclass(frozen=True)
class GpuNodePoolArgs:
    """Inputs of GpuNodePool."""

    cluster: pulumi.Input[str]
    """Cluster name."""
    location: str
    """Cluster location (region or zone)."""
    project: str
    """GCP project id."""
    accelerator_type: str
    """GKE accelerator type, e.g. nvidia-l4."""
    machine_type: str
    """Machine type carrying the GPUs."""
    gpus_per_node: int
    """GPUs on each node (from the catalog)."""
    zones: tuple[str, ...]
    """Node locations: the first rung's zones (a reserved rung has its reservation's zone only)."""
    min_nodes: int
    """minReplicas x nodes per replica."""
    max_nodes: int
    """maxReplicas x nodes per replica."""
    provisioning: str
    """on-demand | spot | reservation | flex-start (one the machine series is sold as: planner/catalog.py)."""
    reservation: str | None
    """Reservation name when provisioning is reservation."""
    driver_version: str
    """GKE-managed driver version: LATEST | DEFAULT | INSTALLATION_DISABLED."""
    compact_placement: bool
    """Place nodes close together (multi-node replicas on machine types that support it)."""
    boot_disk_type: str = "pd-ssd"
    """A boot disk type the machine series accepts (A3 Ultra and A4: hyperdisk-balanced only)."""
    local_ssd_count: int = 0
    """Local SSDs bundled with the machine type, used for ephemeral storage."""
    compute_class: str | None = None
    """The stack's ComputeClass (several zones or rungs): the pool joins it with its label and taint."""

    @classmethod
    def from_plan(cls, stack: Stack, sizing: Sizing, cluster: pulumi.Input[str]) -> GpuNodePoolArgs:
        acc = stack.settings.accelerator
        return cls(cluster=cluster, location=stack.settings.cluster.location, project=stack.project,
                   accelerator_type=acc.type, machine_type=acc.machine_type, gpus_per_node=acc.gpus_per_node,
                   zones=acc.pool_zones, min_nodes=sizing.min_nodes, max_nodes=sizing.max_nodes,
                   provisioning=acc.provisioning, reservation=acc.reservation, driver_version=acc.driver_version,
                   # Compact placement is one zone only (GKE "Define compact placement for GKE nodes").
                   compact_placement=(sizing.nodes_per_replica > 1 and acc.catalog.compact_placement
                                      and len(acc.pool_zones) == 1),
                   boot_disk_type=machine_series(acc.machine_type).boot_disk_types[0],
                   local_ssd_count=acc.machine.local_ssd_count,
                   compute_class=class_name(stack.name) if acc.compute_class else None)


class GpuNodePool(pulumi.ComponentResource):
    """A GKE node pool of GPU machines for the serving groups."""

    node_pool: gcp.container.NodePool
    name: pulumi.Output[str]

    def __init__(self, name: str, args: GpuNodePoolArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("vllm-gke:gpu:GpuNodePool", name, None, opts)
        labels = {ACCELERATOR_LABEL: args.accelerator_type}
        if args.provisioning == "spot":
            labels[SPOT_LABEL] = "true"
        taints = [gcp.container.NodePoolNodeConfigTaintArgs(key=GPU_TAINT_KEY, value=GPU_TAINT_VALUE,
                                                            effect="NO_SCHEDULE")]
        if args.compute_class is not None:
            # A hand-made pool joins a ComputeClass only with the class's node label and NoSchedule taint (GKE
            # "About custom ComputeClasses"); the class's rule 0 names this pool.
            labels[COMPUTE_CLASS_LABEL] = args.compute_class
            key, value, _ = pool_taint(args.compute_class)
            taints.append(gcp.container.NodePoolNodeConfigTaintArgs(key=key, value=value, effect="NO_SCHEDULE"))
        reservation = None
        if args.provisioning == "reservation":
            reservation = gcp.container.NodePoolNodeConfigReservationAffinityArgs(
                consume_reservation_type="SPECIFIC_RESERVATION",
                key="compute.googleapis.com/reservation-name", values=[args.reservation])
        # Flex-start (Dynamic Workload Scheduler): GKE provisions the nodes when pods wait for them, for up to seven
        # days each, consuming no reservation; such pools start empty, scale from zero and are not auto-repaired
        # (GKE "About flex-start provisioning"; cluster-toolkit gke-node-pool's enable_flex_start).
        flex = args.provisioning == "flex-start"
        if flex:
            reservation = gcp.container.NodePoolNodeConfigReservationAffinityArgs(
                consume_reservation_type="NO_RESERVATION")
        node_config = gcp.container.NodePoolNodeConfigArgs(
            machine_type=args.machine_type,
            guest_accelerators=[gcp.container.NodePoolNodeConfigGuestAcceleratorArgs(
                type=args.accelerator_type, count=args.gpus_per_node,
                gpu_driver_installation_config=(
                    gcp.container.NodePoolNodeConfigGuestAcceleratorGpuDriverInstallationConfigArgs(
                        gpu_driver_version=args.driver_version)))],
            # GKE adds this taint and label to GPU nodes by itself; declaring them keeps the next
            # preview free of diffs and documents what the serving pods must tolerate.
            taints=taints,
            labels=labels,
            spot=args.provisioning == "spot",
            flex_start=True if flex else None,
            reservation_affinity=reservation,
            # gVNIC: higher per-VM bandwidth for NCCL traffic between pipeline stages.
            gvnic=gcp.container.NodePoolNodeConfigGvnicArgs(enabled=True),
            # GKE metadata server: pods get Workload Identity, never the node's service account.
            workload_metadata_config=gcp.container.NodePoolNodeConfigWorkloadMetadataConfigArgs(mode="GKE_METADATA"),
            gcfs_config=gcp.container.NodePoolNodeConfigGcfsConfigArgs(enabled=True),
            disk_size_gb=BOOT_DISK_GB, disk_type=args.boot_disk_type,
            ephemeral_storage_local_ssd_config=(
                gcp.container.NodePoolNodeConfigEphemeralStorageLocalSsdConfigArgs(
                    local_ssd_count=args.local_ssd_count) if args.local_ssd_count else None),
            shielded_instance_config=gcp.container.NodePoolNodeConfigShieldedInstanceConfigArgs(
                enable_secure_boot=True, enable_integrity_monitoring=True),
            oauth_scopes=["https://www.googleapis.com/auth/cloud-platform"],
        )
        self.node_pool = gcp.container.NodePool(
            f"{name}-pool", cluster=args.cluster, location=args.location, project=args.project,
            node_locations=list(args.zones),
            autoscaling=gcp.container.NodePoolAutoscalingArgs(
                total_min_node_count=0 if flex else args.min_nodes, total_max_node_count=args.max_nodes,
                # ANY finds capacity wherever the zones have it; GPUs are scarce.
                location_policy="ANY"),
            # initialNodeCount is per zone (pulumi_gcp NodePool.initialNodeCount): a pool over several zones starts
            # empty and the autoscaler adds the planned minimum (totalMinNodeCount) where the serving pods land.
            initial_node_count=0 if flex or len(args.zones) > 1 else args.min_nodes,
            node_config=node_config,
            placement_policy=(gcp.container.NodePoolPlacementPolicyArgs(type="COMPACT")
                              if args.compact_placement else None),
            management=gcp.container.NodePoolManagementArgs(auto_repair=not flex, auto_upgrade=True),
            # Surge upgrades would need a spare GPU node; replace one node at a time instead.
            upgrade_settings=gcp.container.NodePoolUpgradeSettingsArgs(max_surge=0, max_unavailable=1),
            # The autoscaler owns the node count after creation.
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["initialNodeCount", "nodeCount"]))
        self.name = self.node_pool.name
        self.register_outputs({"name": self.name})
