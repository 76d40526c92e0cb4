"""vllm-gke: stack config -> plan -> components -> exports. Wiring only: every number comes from the plan."""

import pulumi

from components import serving_namespace
from components.autoscaling import Autoscaling, AutoscalingArgs
from components.chat_ui import ChatUi, ChatUiArgs
from components.compile_cache import CompileCache, CompileCacheArgs
from components.compute_class import ComputeClass, ComputeClassArgs
from components.gke_cluster import GkeCluster, GkeClusterArgs
from components.gpu_node_pool import GpuNodePool, GpuNodePoolArgs
from components.headroom import Headroom, HeadroomArgs
from components.image_mirror import serving_image
from components.lws_controller import LwsController, LwsControllerArgs
from components.model_weights import SERVING_MOUNT, ModelWeights, ModelWeightsArgs
from components.monitoring import Monitoring, MonitoringArgs
from components.ray_vllm_server import RayVllmServer, RayVllmServerArgs
from components.router import GATEWAY_PORT, Router, RouterArgs, router_labels
from components.smoke_check import SmokeCheck, SmokeCheckArgs
from planner.config import from_pulumi
from planner.sizing import plan

stack = from_pulumi()
sizing = plan(stack.settings)
for warning in sizing.warnings:
    pulumi.log.warn(warning)

cluster = GkeCluster("vllm", GkeClusterArgs.from_plan(stack))
gpu_pool = GpuNodePool("gpu", GpuNodePoolArgs.from_plan(stack, sizing, cluster=cluster.name))
gpu_capacity = gpu_pool if not stack.settings.accelerator.compute_class else ComputeClass(  # several zones or rungs
    "gpu", ComputeClassArgs.from_plan(stack, sizing, gpu_pool.name), opts=cluster.options(gpu_pool))
image = serving_image(stack)
namespace = serving_namespace(stack.settings.serving.namespace, cluster.options())
ns = namespace.metadata.name
weights = ModelWeights("weights", ModelWeightsArgs.from_plan(stack, sizing, ns, image=image), opts=cluster.options())
lws = LwsController("lws", LwsControllerArgs.from_plan(stack), opts=cluster.options())
cache = CompileCache("vllm", CompileCacheArgs.from_plan(stack, ns)) if stack.settings.vllm.compile_cache else None
routing = stack.settings.serving.routing  # service | epp | gke-gateway: who picks a replica for each request
server = RayVllmServer("vllm", RayVllmServerArgs.from_plan(
    stack, sizing, namespace=ns, weights_path=weights.model_path, weights_claim=weights.claim_name,
    weights_mount=SERVING_MOUNT, image=image, compile_cache_bucket=cache and cache.bucket_name,
    router_labels=router_labels("vllm") if routing == "epp" else None, proxy_subnet_cidr=cluster.proxy_subnet_cidr),
    opts=cluster.options(*lws.ready, gpu_capacity))
router = routing != "service" and Router("vllm", RouterArgs.from_plan(stack, ns, server, cluster.proxy_subnet_cidr),
                                         opts=cluster.options(server))
front, port = ((router.gateway_address, GATEWAY_PORT) if routing == "gke-gateway" else (server.service_name, None))
if sizing.headroom_nodes:  # autoscaling.headroom: spare serving-shaped slots
    Headroom("vllm", HeadroomArgs.from_plan(stack, sizing, ns, image, server, weights.claim_name, SERVING_MOUNT),
             opts=cluster.options(server))
autoscaling = Autoscaling("vllm", AutoscalingArgs.from_plan(stack, sizing, namespace=ns, lws_name=server.lws_name),
                          opts=cluster.options(server))
Monitoring("vllm", MonitoringArgs.from_plan(stack, leader_selector=server.leader_selector,
                                            hpa_name=autoscaling.hpa_name), opts=cluster.options(namespace))
if stack.settings.serving.smoke_test:
    SmokeCheck("vllm", SmokeCheckArgs.from_plan(stack, sizing, namespace=ns, service=front, port=port,
                                                api_key_secret=server.api_key_secret, image=image),
               opts=cluster.options(server.lws, server.service, *([router] if router else [])))
if stack.settings.serving.chat_ui:
    ChatUi("vllm", ChatUiArgs.from_plan(stack, namespace=ns, service=front, port=port,
                                        api_key_secret=server.api_key_secret), opts=cluster.options(server.service))

for key, value in {"sizing": sizing.as_dict(), "service": server.service.metadata.name, "cluster": cluster.name,
                   "gpu_node_pool": gpu_pool.name, "weights_claim": weights.claim_name,
                   "weights_image": weights.image.self_link, "compile_cache": cache and cache.bucket_name}.items():
    pulumi.export(key, value)
