"""vllm-gke: wires validated stack config through the planner into component resources."""

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from components.autoscaling import Autoscaling, AutoscalingArgs, default_target
from components.cluster import GkeCluster, GkeClusterArgs
from components.commands import API_PORT, API_PORT_NAME, ServerSpec
from components.config import from_pulumi
from components.gpu_node_pool import GpuNodePool, GpuNodePoolArgs
from components.lws_controller import LwsController, LwsControllerArgs
from components.model_weights import SERVING_MOUNT, ModelWeights, ModelWeightsArgs
from components.monitoring import Monitoring, MonitoringArgs
from components.ray_vllm import RayVllmServer, RayVllmServerArgs
from components.sizing import plan
from components.smoke_test import SmokeTest, SmokeTestArgs

settings = from_pulumi()
sizing = plan(settings)
for warning in sizing.warnings:
    pulumi.log.warn(warning)

gcp_config = pulumi.Config("gcp")
project = gcp_config.require("project")
acc = settings.accelerator
zone = acc.zones[0]

cluster = GkeCluster("vllm", GkeClusterArgs(
    name=settings.cluster.name, location=settings.cluster.location, create=settings.cluster.create,
    project=project, release_channel=settings.cluster.release_channel))
k8s_opts = pulumi.ResourceOptions(providers=[cluster.provider])

gpu_pool = GpuNodePool("gpu", GpuNodePoolArgs(
    cluster=cluster.name, location=settings.cluster.location, project=project, accelerator_type=acc.type,
    machine_type=acc.machine_type, gpus_per_node=acc.gpus_per_node, zones=acc.zones,
    min_nodes=sizing.min_nodes, max_nodes=sizing.max_nodes, provisioning=acc.provisioning,
    reservation=acc.reservation, driver_version=acc.driver_version,
    compact_placement=sizing.nodes_per_replica > 1 and acc.catalog.compact_placement,
    local_ssd_count=acc.machine.local_ssd_count))

namespace = k8s.core.v1.Namespace(
    "serving-namespace",
    metadata=k8s.meta.v1.ObjectMetaArgs(name=settings.serving.namespace,
                                        labels={"app.kubernetes.io/part-of": "vllm-gke"}),
    opts=k8s_opts)

secrets = pulumi.Config("vllm-gke")
hf_token = secrets.get_secret("hfToken") if settings.has_hf_token else None
api_key = secrets.get_secret("apiKey") if settings.has_api_key else None
weights = ModelWeights("weights", ModelWeightsArgs(
    project=project, zone=zone, namespace=namespace.metadata.name, model_id=settings.model.id,
    revision=settings.model.revision, source=settings.model.source, gcs_uri=settings.model.gcs_uri,
    disk_type=settings.weights.disk_type, disk_gib=sizing.weights_disk_gib,
    provisioned_mib_s=sizing.disk_provisioned_mib_s, min_bytes=int(sizing.weights_gib * 0.9 * 1024**3),
    downloader_image=settings.vllm.image, deadline_seconds=sizing.download_deadline_seconds, hf_token=hf_token),
    opts=k8s_opts)

lws = LwsController("lws", LwsControllerArgs(install=settings.serving.install_lws), opts=k8s_opts)

vllm = settings.vllm
server = RayVllmServer("vllm", RayVllmServerArgs(
    namespace=namespace.metadata.name, image=vllm.image,
    spec=ServerSpec(model_path=weights.model_path, served_name=settings.model.served_name,
                    tensor=sizing.tensor_parallel_size, pipeline=sizing.pipeline_parallel_size,
                    nodes=sizing.nodes_per_replica, gpus_per_node=sizing.gpus_per_pod,
                    max_model_len=vllm.max_model_len, gpu_memory_utilization=vllm.gpu_memory_utilization,
                    dtype=vllm.dtype, kv_cache_dtype=vllm.kv_cache_dtype, extra_args=vllm.extra_args),
    machine=acc.machine, accelerator_type=acc.type, spot=acc.provisioning == "spot",
    gpus_per_pod=sizing.gpus_per_pod, replicas=settings.autoscaling.min_replicas,
    weights_claim=weights.claim_name, weights_mount=SERVING_MOUNT,
    startup_probe_seconds=sizing.startup_probe_seconds, expose=settings.serving.expose,
    allowed_namespaces=settings.serving.allowed_namespaces, source_ranges=settings.serving.source_ranges,
    api_key=api_key,
    depends_on=[*lws.ready, gpu_pool]), opts=k8s_opts)

scaling = settings.autoscaling
autoscaling = Autoscaling("vllm", AutoscalingArgs(
    project=project, project_number=gcp.organizations.get_project_output(project_id=project).number,
    namespace=namespace.metadata.name, lws_name=server.lws_name, min_replicas=scaling.min_replicas,
    max_replicas=scaling.max_replicas, metric=scaling.metric,
    target=scaling.target or default_target(scaling.metric, sizing.max_concurrent_sequences),
    install_adapter=settings.monitoring.install_adapter), opts=pulumi.ResourceOptions(
        providers=[cluster.provider], depends_on=[server]))

Monitoring("vllm", MonitoringArgs(
    namespace=settings.serving.namespace, leader_selector=server.leader_selector, port_name=API_PORT_NAME,
    interval=settings.monitoring.scrape_interval, project=project, dashboard=settings.monitoring.dashboard,
    title=f"vLLM {settings.model.served_name} ({pulumi.get_stack()})", hpa_name=autoscaling.hpa_name),
    opts=pulumi.ResourceOptions(providers=[cluster.provider], depends_on=[namespace]))

if settings.serving.smoke_test:
    SmokeTest("vllm", SmokeTestArgs(
        namespace=namespace.metadata.name, service=server.service_name, port=API_PORT,
        model=settings.model.served_name, image=vllm.image,
        # Node provisioning + weights + engine start; GPU nodes alone can take ~10 minutes.
        wait_seconds=sizing.startup_probe_seconds + 900,
        fingerprint=f"{weights.key}|{vllm.image}|{sizing.as_dict()}",
        api_key_secret=server.api_key_secret, after=[server.lws, server.service]),
        opts=pulumi.ResourceOptions(providers=[cluster.provider]))

pulumi.export("sizing", sizing.as_dict())
pulumi.export("service", server.service.metadata.name)
pulumi.export("cluster", cluster.name)
pulumi.export("gpu_node_pool", gpu_pool.name)
pulumi.export("weights_claim", weights.claim_name)
pulumi.export("weights_image", weights.image.self_link)
