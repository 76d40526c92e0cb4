"""GKE cluster: look up an existing one or create one, and build the Kubernetes provider for it."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from planner import compute_class, routing
from planner.config import Stack
from planner.errors import ConfigError

SYSTEM_MACHINE_TYPE = "e2-standard-4"


@dataclass(frozen=True)
class GkeClusterArgs:
    """Inputs of GkeCluster."""

    name: str
    """Cluster name."""
    location: str
    """Region or zone of the cluster."""
    create: bool
    """False: look the cluster up; true: create it."""
    project: str
    """GCP project id."""
    release_channel: str = "REGULAR"
    """GKE release channel when the cluster is created."""
    region: str = ""
    """The cluster's region (the proxy-only subnet's)."""
    gateway: bool = False
    """serving.routing gke-gateway: a created cluster gets the Gateway API and a GKE version that installs the
    InferencePool CRD; an existing one is checked for them at preview."""
    proxy_subnet_cidr: str | None = None
    """serving.proxySubnetCidr: create the region's proxy-only subnet with this range; None = it must exist."""
    min_master_version: str | None = None
    """The oldest control plane the stack runs on (planner/compute_class.py min_master_version): a created cluster's
    min_master_version; an existing cluster is checked against it at preview."""
    auto_creation: bool = False
    """The stack's ComputeClass creates node pools (accelerator.provisioning lists or fallbacks)."""

    @classmethod
    def from_plan(cls, stack: Stack) -> GkeClusterArgs:
        c, serving = stack.settings.cluster, stack.settings.serving
        gateway = serving.routing == routing.GATEWAY
        return cls(name=c.name, location=c.location, create=c.create, project=stack.project,
                   release_channel=c.release_channel, region=c.region, gateway=gateway,
                   proxy_subnet_cidr=serving.proxy_subnet_cidr if gateway else None,
                   min_master_version=compute_class.min_master_version(stack.settings),
                   auto_creation=compute_class.auto_creates(stack.settings.accelerator))


def _refuse(problem: str | None, key: str = "serving.routing", value: str = routing.GATEWAY) -> None:
    """Fail the preview with one line (pulumi.RunError: no traceback) when the cluster cannot carry the stack."""
    if problem:
        raise pulumi.RunError(str(ConfigError(key, value, problem)))


def _auto_creation_problem(name: str, version: str) -> str | None:
    """Why an existing cluster cannot run the stack's ComputeClass auto-creation, or None."""
    have, need = routing.gke_version_key(version), routing.gke_version_key(compute_class.AUTO_CREATION_MIN_GKE)
    if have is not None and have >= need:
        return None
    return (f"cluster {name} runs GKE {version or '(unknown)'}; a ComputeClass creates node pools from "
            f"{compute_class.AUTO_CREATION_MIN_GKE}: upgrade the control plane, or list one way of buying and no "
            "fallbacks")


def _network_name(network: str) -> str:
    return (network or "default").rstrip("/").rsplit("/", 1)[-1]


def kubeconfig(name: str, endpoint: pulumi.Input[str], ca: pulumi.Input[str]) -> pulumi.Output[str]:
    """A kubeconfig that authenticates with gke-gcloud-auth-plugin (no static credentials in state)."""
    return pulumi.Output.json_dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": name,
        "clusters": [{"name": name, "cluster": {"server": pulumi.Output.concat("https://", endpoint),
                                                "certificate-authority-data": ca}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "users": [{"name": name, "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1", "command": "gke-gcloud-auth-plugin",
            "installHint": "Install gke-gcloud-auth-plugin: gcloud components install gke-gcloud-auth-plugin",
            "provideClusterInfo": True}}}],
    })


class GkeCluster(pulumi.ComponentResource):
    """An existing or new GKE Standard cluster and a Kubernetes provider that targets it."""

    name: pulumi.Output[str]
    endpoint: pulumi.Output[str]
    provider: k8s.Provider
    workload_pool: str
    proxy_subnet_cidr: pulumi.Output[str] | None
    """The proxy-only subnet's range with routing gke-gateway (NetworkPolicies admit it), else None."""

    def __init__(self, name: str, args: GkeClusterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("vllm-gke:cluster:GkeCluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.workload_pool = f"{args.project}.svc.id.goog"
        self.proxy_subnet_cidr = None
        gateway_features = {}
        if args.gateway:
            # GKE Inference Gateway: Gateway API (standard channel), the HttpLoadBalancing add-on (on by default,
            # declared so it stays on), a version that installs the InferencePool CRD. VPC-native: the
            # ip_allocation_policy below.
            gateway_features = dict(
                gateway_api_config=gcp.container.ClusterGatewayApiConfigArgs(channel="CHANNEL_STANDARD"))
        if args.create:
            cluster = gcp.container.Cluster(
                f"{name}-cluster", name=args.name, location=args.location, project=args.project,
                # GKE needs a node pool at creation; ours are managed as separate resources.
                remove_default_node_pool=True, initial_node_count=1,
                release_channel=gcp.container.ClusterReleaseChannelArgs(channel=args.release_channel),
                workload_identity_config=gcp.container.ClusterWorkloadIdentityConfigArgs(
                    workload_pool=self.workload_pool),
                # The Cloud Storage FUSE CSI driver mounts the compile-cache bucket into the serving pods.
                addons_config=gcp.container.ClusterAddonsConfigArgs(
                    gcs_fuse_csi_driver_config=gcp.container.ClusterAddonsConfigGcsFuseCsiDriverConfigArgs(
                        enabled=True),
                    **({"http_load_balancing": gcp.container.ClusterAddonsConfigHttpLoadBalancingArgs(
                        disabled=False)} if args.gateway else {})),
                # Dataplane V2 enforces NetworkPolicy (the Ray ports must not be reachable by others).
                datapath_provider="ADVANCED_DATAPATH",
                monitoring_config=gcp.container.ClusterMonitoringConfigArgs(
                    enable_components=["SYSTEM_COMPONENTS"],
                    managed_prometheus=gcp.container.ClusterMonitoringConfigManagedPrometheusArgs(enabled=True)),
                # Image streaming starts the ~10 GB vLLM image in seconds instead of minutes.
                node_pool_defaults=gcp.container.ClusterNodePoolDefaultsArgs(
                    node_config_defaults=gcp.container.ClusterNodePoolDefaultsNodeConfigDefaultsArgs(
                        gcfs_config=gcp.container.ClusterNodePoolDefaultsNodeConfigDefaultsGcfsConfigArgs(
                            enabled=True))),
                ip_allocation_policy=gcp.container.ClusterIpAllocationPolicyArgs(),
                deletion_protection=False, min_master_version=args.min_master_version, **gateway_features,
                opts=child)
            network = pulumi.Output.from_input("default")
            system_pool = gcp.container.NodePool(
                f"{name}-system", cluster=cluster.name, location=args.location, project=args.project,
                autoscaling=gcp.container.NodePoolAutoscalingArgs(total_min_node_count=1, total_max_node_count=3),
                node_config=gcp.container.NodePoolNodeConfigArgs(
                    machine_type=SYSTEM_MACHINE_TYPE, disk_size_gb=100,
                    workload_metadata_config=gcp.container.NodePoolNodeConfigWorkloadMetadataConfigArgs(
                        mode="GKE_METADATA"),
                    oauth_scopes=["https://www.googleapis.com/auth/cloud-platform"]),
                management=gcp.container.NodePoolManagementArgs(auto_repair=True, auto_upgrade=True),
                opts=pulumi.ResourceOptions(parent=self, ignore_changes=["initialNodeCount", "nodeCount"]))
            self.name = cluster.name
            self.endpoint = cluster.endpoint
            ca = cluster.master_auth.cluster_ca_certificate
            # Every in-cluster object goes through this provider: it is created once a schedulable pool exists
            # (the LWS Helm release, the adapter and the download Job would otherwise start on a cluster with no
            # node) and, on destroy, the pool goes only after every in-cluster object (a registered metrics
            # APIService without its pods can stall namespace deletion).
            after_nodes = [system_pool]
        else:
            found = gcp.container.get_cluster_output(name=args.name, location=args.location, project=args.project,
                                                     opts=pulumi.InvokeOptions(parent=self))
            self.name = found.name
            self.endpoint = found.endpoint
            ca = found.master_auths.apply(lambda auths: auths[0].cluster_ca_certificate)
            after_nodes = []
            network = found.network.apply(_network_name)
            if args.auto_creation:
                checked = found.apply(lambda c: _refuse(_auto_creation_problem(args.name, c.master_version),
                                                        "cluster.name", args.name))
                ca = pulumi.Output.all(ca, checked).apply(lambda values: values[0])
            if args.gateway:
                # An existing cluster is checked as `pulumi preview` reads it (the lookup runs in previews).
                checked = found.apply(lambda c: _refuse(routing.cluster_problem(
                    name=args.name, version=c.master_version,
                    gateway_api_channel=(c.gateway_api_configs[0].channel if c.gateway_api_configs else ""),
                    http_load_balancing_disabled=bool(c.addons_configs and c.addons_configs[0].http_load_balancings
                                                      and c.addons_configs[0].http_load_balancings[0].disabled),
                    vpc_native=c.networking_mode == "VPC_NATIVE" or bool(c.ip_allocation_policies))))
                ca = pulumi.Output.all(ca, checked).apply(lambda values: values[0])
        if args.gateway:
            self.proxy_subnet_cidr = self._proxy_subnet(name, args, network)
        self.provider = k8s.Provider(
            f"{name}-k8s", kubeconfig=kubeconfig(args.name, self.endpoint, ca),
            # Server-side apply lets GKE's own controllers co-own fields without diffs.
            enable_server_side_apply=True, opts=pulumi.ResourceOptions(parent=self, depends_on=after_nodes))
        self.register_outputs({"name": self.name, "endpoint": self.endpoint})

    def options(self, *after: pulumi.Resource) -> pulumi.ResourceOptions:
        """ResourceOptions of an in-cluster object: this cluster's Kubernetes provider, created after `after`."""
        return pulumi.ResourceOptions(providers=[self.provider], depends_on=list(after))

    def _proxy_subnet(self, name: str, args: GkeClusterArgs, network: pulumi.Output[str]) -> pulumi.Output[str]:
        """The region's proxy-only subnet: created from serving.proxySubnetCidr, or found (one ACTIVE
        REGIONAL_MANAGED_PROXY subnet per network and region) and refused at preview when there is none."""
        if args.proxy_subnet_cidr is not None:
            subnet = gcp.compute.Subnetwork(
                f"{name}-proxy-only", name=f"{args.name}-proxy-only", project=args.project, region=args.region,
                network=network, ip_cidr_range=args.proxy_subnet_cidr, purpose=routing.PROXY_SUBNET_PURPOSE,
                role="ACTIVE", opts=pulumi.ResourceOptions(parent=self))
            return subnet.ip_cidr_range
        found = gcp.compute.get_subnetworks_output(
            project=args.project, region=args.region,
            filter=f'(purpose = "{routing.PROXY_SUBNET_PURPOSE}") (role = "ACTIVE")',
            opts=pulumi.InvokeOptions(parent=self))

        def pick(values: list) -> str:
            result, net = values
            ranges = [s.ip_cidr_range for s in result.subnetworks if _network_name(s.network_name or s.network) == net]
            _refuse(None if ranges else
                    f"network {net} has no proxy-only subnet in {args.region}; set serving.proxySubnetCidr (e.g. "
                    "10.129.0.0/23) and the program creates it")
            return ranges[0]
        return pulumi.Output.all(found, network).apply(pick)
