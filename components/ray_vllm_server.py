"""The serving group: one LeaderWorkerSet per model, Ray head + vLLM API server on the leader,
Ray workers on the other nodes; Service on the leaders, NetworkPolicy, PDB, API-key Secret."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components import exposed_service, load_balancer_peers, parent_depends_on
from components.compile_cache import GCSFUSE_ANNOTATIONS, SERVING_ACCOUNT, STORE_MOUNT, store_volume
from planner import compute_class, routing
from planner.commands import (
    API_PORT_NAME,
    DRAIN_SECONDS,
    LAUNCHER,
    LAUNCHER_DIR,
    NODE_MANAGER_PORT,
    OBJECT_MANAGER_PORT,
    RAY_JOIN_TIMEOUT,
    RAY_PORT,
    RAY_STOP_SECONDS,
    ServerSpec,
    compile_cache_key,
    leader_command,
    liveness_command,
    worker_command,
)
from planner.compute_class import class_name
from planner.config import Stack
from planner.labels import (
    ACCELERATOR_LABEL,
    GPU_TAINT_KEY,
    LWS_API,
    LWS_NAME_LABEL,
    LWS_WORKER_INDEX_LABEL,
    SPOT_LABEL,
)
from planner.security import PART_OF, PART_OF_LABEL, container_security_context, identity_env, pod_security_context
from planner.sizing import Sizing

API_KEY_DIGEST_ANNOTATION = "vllm-gke/api-key-sha256"
GMP_NAMESPACE = "gmp-system"
"""Where GKE's managed collection runs the Prometheus collectors."""
PRESTOP_SECONDS = 15
"""Endpoints removal reaches kube-proxy and load balancers before the server stops accepting."""
GRACE_MARGIN_SECONDS = 5
"""Process exit and the launcher's own bookkeeping after `ray stop`."""
GRACE_SECONDS = PRESTOP_SECONDS + DRAIN_SECONDS + RAY_STOP_SECONDS + GRACE_MARGIN_SECONDS
"""The grace period counts from the start of preStop (Kubernetes pod termination), so it must hold the
preStop sleep, the server's drain and `ray stop`; before, 15 + 90 + up to 60 s of Ray stop overran 120 s."""
POD_INTERFACE = "eth0"
"""The pod network's interface in a GKE pod (one NIC per pod without multi-networking)."""

@dataclass(frozen=True)
class RayVllmServerArgs:
    """Inputs of RayVllmServer."""

    namespace: pulumi.Input[str]
    """Namespace of every object."""
    image: pulumi.Input[str]
    """vLLM image (pinned tag)."""
    spec: ServerSpec
    """The server's command-line settings."""
    cpu: int
    """CPU cores each pod requests (the planner's share of the node)."""
    memory_gib: int
    """Memory each pod requests and is limited to."""
    shm_gib: int
    """Size of the /dev/shm tmpfs."""
    accelerator_type: str
    """Node selector value for cloud.google.com/gke-accelerator."""
    spot: bool
    """Select spot nodes."""
    gpus_per_pod: int
    """nvidia.com/gpu per pod: TP for one-node groups, all of a node's GPUs otherwise."""
    replicas: int
    """Initial LWS replicas (the HPA owns them afterwards)."""
    weights_claim: pulumi.Input[str]
    """Read-only PVC with the weights."""
    weights_mount: str
    """Where the weights volume is mounted."""
    startup_probe_seconds: int
    """Startup budget from the planner's load estimate."""
    expose: str = "cluster-ip"
    """cluster-ip | internal-lb."""
    allowed_namespaces: tuple[str, ...] = ()
    """Namespaces (besides its own) that may reach the API port."""
    source_ranges: tuple[str, ...] = ()
    """CIDRs that may reach the internal load balancer (serving.sourceRanges; used with expose internal-lb)."""
    api_key: pulumi.Input[str] | None = None
    """API key (Pulumi secret) the server requires."""
    compile_cache_bucket: pulumi.Input[str] | None = None
    """The stack's compile-cache bucket (components/compile_cache.py), mounted at the spec's store; None: no reuse."""
    compute_class: str | None = None
    """The stack's ComputeClass (several zones or rungs): pods select it instead of one accelerator type."""
    router_labels: dict[str, str] | None = None
    """routing epp: the router pods' labels; the vllm-leader Service selects them (port ROUTER_PORT) and a
    headless <name>-leaders Service keeps the leaders reachable directly."""
    proxy_subnet_cidr: pulumi.Input[str] | None = None
    """routing gke-gateway: the proxy-only subnet the GKE Gateway's proxies (requests, health checks) come from."""
    headless_leaders: bool = False
    """Declare the <name>-leaders headless Service (any routing but service)."""

    @classmethod
    def from_plan(cls, stack: Stack, sizing: Sizing, namespace: pulumi.Input[str], weights_path: str,
                  weights_claim: pulumi.Input[str], weights_mount: str,
                  image: pulumi.Input[str] | None = None,
                  compile_cache_bucket: pulumi.Input[str] | None = None,
                  router_labels: dict[str, str] | None = None,
                  proxy_subnet_cidr: pulumi.Input[str] | None = None) -> RayVllmServerArgs:
        """`image`: vllm.image as the pods pull it (components.image_mirror.serving_image); `compile_cache_bucket`:
        the CompileCache bucket when vllm.compileCache is on."""
        s, vllm = stack.settings, stack.settings.vllm
        spec = ServerSpec(model_path=weights_path, served_name=s.model.served_name,
                          tensor=sizing.tensor_parallel_size, pipeline=sizing.pipeline_parallel_size,
                          nodes=sizing.nodes_per_replica, gpus_per_node=sizing.gpus_per_pod,
                          max_model_len=vllm.max_model_len, gpu_memory_utilization=vllm.gpu_memory_utilization,
                          dtype=vllm.dtype, kv_cache_dtype=vllm.kv_cache_dtype, extra_args=vllm.extra_args,
                          data=sizing.data_parallel_size, expert=sizing.expert_parallel,
                          trust_remote_code=s.model.trust_remote_code)
        if compile_cache_bucket is not None:
            key = compile_cache_key(vllm.image, s.accelerator.type, spec, f"{s.model.id}@{s.model.revision}")
            spec = replace(spec, compile_cache_store=STORE_MOUNT, compile_cache_key=key)
        return cls(namespace=namespace, image=vllm.image if image is None else image, spec=spec, cpu=sizing.pod_cpu,
                   memory_gib=sizing.pod_memory_gib, shm_gib=sizing.pod_shm_gib,
                   accelerator_type=s.accelerator.type, spot=s.accelerator.provisioning == "spot",
                   compute_class=class_name(stack.name) if s.accelerator.compute_class else None,
                   gpus_per_pod=sizing.gpus_per_pod, replicas=s.autoscaling.min_replicas,
                   weights_claim=weights_claim, weights_mount=weights_mount,
                   startup_probe_seconds=sizing.startup_probe_seconds, expose=s.serving.expose,
                   allowed_namespaces=s.serving.allowed_namespaces, source_ranges=s.serving.source_ranges,
                   api_key=stack.api_key, compile_cache_bucket=compile_cache_bucket,
                   headless_leaders=s.serving.routing != routing.SERVICE, router_labels=router_labels,
                   proxy_subnet_cidr=proxy_subnet_cidr if s.serving.routing == routing.GATEWAY else None)


def _probe(kind: str, **kwargs: Any) -> dict[str, Any]:
    if kind == "http":
        return {"httpGet": {"path": "/health", "port": API_PORT_NAME}, **kwargs}
    if kind == "tcp":
        return {"tcpSocket": {"port": kwargs.pop("port")}, **kwargs}
    return {"exec": {"command": kwargs.pop("command")}, **kwargs}


class RayVllmServer(pulumi.ComponentResource):
    """A LeaderWorkerSet of vLLM serving groups and the objects around it."""

    lws_name: str
    service_name: str
    launcher_name: str
    """The launcher ConfigMap (placeholders run its `placeholder` role)."""
    pod_shape: dict[str, Any]
    """What a serving pod asks the scheduler for: resources, nodeSelector, tolerations (headroom copies it)."""
    api_key_secret: str | None
    leader_selector: dict[str, str]

    def __init__(self, name: str, args: RayVllmServerArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("vllm-gke:serving:RayVllmServer", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.lws_name = lws_name = name
        # Not `name`: the LeaderWorkerSet controller creates a headless Service named after the LWS and builds
        # LWS_LEADER_ADDRESS (<lws>-<group>.<lws>.<ns>) through it (kubernetes-sigs/lws, controller_utils.go
        # CreateHeadlessServiceIfNotExists). A Service named `vllm` would also inject VLLM_PORT-style variables
        # that vLLM reads into every pod of the namespace.
        self.service_name = f"{name}-leader"
        labels = {"app.kubernetes.io/name": "vllm", "app.kubernetes.io/instance": name,
                  PART_OF_LABEL: PART_OF}
        self.leader_selector = {LWS_NAME_LABEL: lws_name, LWS_WORKER_INDEX_LABEL: "0"}
        spec = args.spec

        self.launcher_name = f"{name}-launcher"
        launcher = k8s.core.v1.ConfigMap(
            f"{name}-launcher", metadata={"name": self.launcher_name, "namespace": args.namespace, "labels": labels},
            data={"launcher.py": LAUNCHER.read_text()}, opts=child)
        env: list[dict[str, Any]] = [
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            *identity_env(), {"name": "HOME", "value": "/tmp/home"}, {"name": "VLLM_NO_USAGE_STATS", "value": "1"},
            {"name": "RAY_USAGE_STATS_ENABLED", "value": "0"}, {"name": "HF_HUB_OFFLINE", "value": "1"}]
        if spec.nodes > 1:
            # Pin vLLM's, NCCL's and Gloo's traffic to the pod network: with a second NIC on the node
            # (GPUDirect, multi-networking) they may otherwise pick an address the peers cannot reach.
            env += [{"name": "VLLM_HOST_IP", "value": "$(POD_IP)"},
                    {"name": "NCCL_SOCKET_IFNAME", "value": POD_INTERFACE},
                    {"name": "GLOO_SOCKET_IFNAME", "value": POD_INTERFACE}]
        # What the component was told to wait for (the LWS controller, the GPU pool) holds for the
        # LeaderWorkerSet itself.
        depends = [launcher, *parent_depends_on(opts)]
        self.api_key_secret = f"{name}-api-key" if args.api_key is not None else None
        if args.api_key is not None:
            secret = k8s.core.v1.Secret(
                f"{name}-api-key",
                metadata={"name": self.api_key_secret, "namespace": args.namespace, "labels": labels},
                type="Opaque", string_data={"VLLM_API_KEY": args.api_key},
                opts=pulumi.ResourceOptions(parent=self, additional_secret_outputs=["data", "stringData"]))
            # vLLM reads VLLM_API_KEY: the key never appears in the command line or the pod spec.
            env.append({"name": "VLLM_API_KEY",
                        "valueFrom": {"secretKeyRef": {"name": self.api_key_secret, "key": "VLLM_API_KEY"}}})
            depends.append(secret)

        cpu, memory, shm = args.cpu, args.memory_gib, args.shm_gib
        resources = {"requests": {"cpu": str(cpu), "memory": f"{memory}Gi", "nvidia.com/gpu": str(args.gpus_per_pod)},
                     "limits": {"memory": f"{memory}Gi", "nvidia.com/gpu": str(args.gpus_per_pod)}}
        node_selector = {ACCELERATOR_LABEL: args.accelerator_type}
        if args.spot:
            node_selector[SPOT_LABEL] = "true"
        tolerations = [{"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]
        affinity = None
        if args.compute_class is not None:
            # Every rung (the pool, auto-created pools of other ways of buying or machines) carries the class's label
            # and taint; a multi-node group stays in one zone and one pool.
            node_selector = compute_class.node_selector(args.compute_class)
            tolerations.append(compute_class.toleration(args.compute_class))
            if spec.nodes > 1:
                affinity = compute_class.group_affinity(lws_name)
        self.pod_shape = {"resources": resources, "nodeSelector": node_selector, "tolerations": tolerations}
        volumes = [
            {"name": "weights", "persistentVolumeClaim": {"claimName": args.weights_claim, "readOnly": True}},
            {"name": "launcher", "configMap": {"name": f"{name}-launcher", "defaultMode": 0o555}},
            # NCCL and vLLM's workers exchange tensors through /dev/shm; the 64 MiB default is far too small.
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{shm}Gi"}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "50Gi"}}]
        mounts = [{"name": "weights", "mountPath": args.weights_mount, "readOnly": True},
                  {"name": "launcher", "mountPath": LAUNCHER_DIR, "readOnly": True},
                  {"name": "dshm", "mountPath": "/dev/shm"}, {"name": "tmp", "mountPath": "/tmp"}]
        pod_extra: dict[str, Any] = {}
        template_annotations: dict[str, Any] = {}
        if args.compile_cache_bucket is not None and spec.compile_cache_store:
            # The launcher keeps vLLM's compile cache in the stack's bucket, reached as this account
            # (components/compile_cache.py grants it); the driver's sidecar is injected on the annotation.
            account = k8s.core.v1.ServiceAccount(
                f"{name}-serving-sa", metadata={"name": SERVING_ACCOUNT, "namespace": args.namespace, "labels": labels},
                automount_service_account_token=False, opts=child)
            depends.append(account)
            volumes.append(store_volume(args.compile_cache_bucket))
            mounts.append({"name": "compile-cache", "mountPath": spec.compile_cache_store})
            pod_extra["serviceAccountName"] = SERVING_ACCOUNT
            template_annotations.update(GCSFUSE_ANNOTATIONS)
        self.pod_shape["annotations"] = dict(template_annotations)  # the sidecar webhook's requests, if any
        # HOME, caches (Hugging Face, Triton, torch.compile), Ray and NCCL all write under /tmp and /dev/shm,
        # both emptyDirs: the root filesystem stays read-only.
        security = container_security_context()
        ray_ports = [{"name": "ray-gcs", "containerPort": RAY_PORT},
                     {"name": "ray-node-mgr", "containerPort": NODE_MANAGER_PORT},
                     {"name": "ray-obj-mgr", "containerPort": OBJECT_MANAGER_PORT}]

        # vLLM reads the key at start: a digest of it in the pod template rolls the groups when it is rotated.
        template_meta: dict[str, Any] = {"labels": labels}
        if args.api_key is not None:
            # A truncated digest of a random key reveals nothing, and a secret here would hide the whole
            # LeaderWorkerSet spec in preview diffs: it is deliberately not marked secret.
            digest = pulumi.Output.unsecret(pulumi.Output.from_input(args.api_key).apply(
                lambda key: hashlib.sha256(key.encode()).hexdigest()[:16]))
            template_annotations[API_KEY_DIGEST_ANNOTATION] = digest
        if template_annotations:
            template_meta["annotations"] = template_annotations

        def pod(container: dict[str, Any]) -> dict[str, Any]:
            return {"metadata": template_meta, "spec": {
                **pod_extra, "automountServiceAccountToken": False, "enableServiceLinks": False,
                "terminationGracePeriodSeconds": GRACE_SECONDS, "nodeSelector": node_selector,
                "tolerations": tolerations, **({"affinity": affinity} if affinity else {}),
                "securityContext": pod_security_context(fs_group=True),
                "containers": [container], "volumes": volumes}}

        leader_container = {
            "name": "vllm", "image": args.image, "command": leader_command(spec), "env": env,
            "ports": [{"name": API_PORT_NAME, "containerPort": spec.port}, *(ray_ports if spec.nodes > 1 else [])],
            "resources": resources, "volumeMounts": mounts, "securityContext": security,
            # Weights loading and CUDA-graph capture: the budget comes from the planner's estimate.
            "startupProbe": _probe("http", periodSeconds=10, timeoutSeconds=5,
                                   failureThreshold=max(3, args.startup_probe_seconds // 10)),
            "readinessProbe": _probe("http", periodSeconds=5, timeoutSeconds=5, failureThreshold=3),
            # A wedged server is restarted through /health. /health can stay 200 after a Ray worker dies
            # (vLLM #16259): multi-node leaders also require the launcher's group heartbeat, which stops
            # when a Ray node is lost.
            "livenessProbe": (_probe("http", periodSeconds=15, timeoutSeconds=10, failureThreshold=3)
                              if spec.nodes == 1 else
                              _probe("exec", command=liveness_command(spec),
                                     periodSeconds=15, timeoutSeconds=10, failureThreshold=3)),
            "lifecycle": {"preStop": {"sleep": {"seconds": PRESTOP_SECONDS}}},
        }
        leader_pod = pod(leader_container)
        template: dict[str, Any] = {"size": spec.nodes, "restartPolicy": "RecreateGroupOnPodRestart"}
        if spec.nodes > 1:
            worker_container = {
                "name": "ray-worker", "image": args.image, "command": worker_command(spec), "env": env,
                "ports": ray_ports, "resources": resources, "volumeMounts": mounts, "securityContext": security,
                "readinessProbe": _probe("tcp", port=NODE_MANAGER_PORT, periodSeconds=5, failureThreshold=3),
                "livenessProbe": _probe("tcp", port=NODE_MANAGER_PORT, initialDelaySeconds=RAY_JOIN_TIMEOUT,
                                        periodSeconds=15, failureThreshold=4),
            }
            template |= {"leaderTemplate": leader_pod, "workerTemplate": pod(worker_container)}
        else:
            template |= {"workerTemplate": leader_pod}  # size 1: the only pod is the leader

        self.lws = k8s.apiextensions.CustomResource(
            f"{name}-lws", api_version=LWS_API, kind="LeaderWorkerSet",
            metadata={"name": lws_name, "namespace": args.namespace, "labels": labels},
            spec={"replicas": args.replicas, "startupPolicy": "LeaderCreated",
                  "rolloutStrategy": {"type": "RollingUpdate",
                                      "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": 0}},
                  "leaderWorkerTemplate": template},
            # The HPA owns the replica count once it exists.
            opts=pulumi.ResourceOptions(parent=self, depends_on=depends, ignore_changes=["spec.replicas"]))

        # Behind an internal load balancer, the NetworkPolicy below repeats its sourceRanges. With routing epp the
        # Service (and a load balancer) sends every request through the router, which picks a leader per request;
        # the router's Envoy names its listener API_PORT_NAME too, so the port is the same either way.
        api_ports = [{"name": API_PORT_NAME, "port": spec.port, "targetPort": API_PORT_NAME, "protocol": "TCP"}]
        front = {"selector": dict(args.router_labels or self.leader_selector), "ports": api_ports}
        service_spec, annotations = exposed_service(args.expose, args.source_ranges, front)
        self.service = k8s.core.v1.Service(
            f"{name}-service",
            metadata={"name": self.service_name, "namespace": args.namespace, "labels": labels,
                      "annotations": annotations},
            spec=service_spec,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.lws]))

        self.leaders_service_name = f"{name}-leaders"
        if args.headless_leaders:
            # The router's fail-open path and direct access to one leader (kubectl port-forward, debugging).
            k8s.core.v1.Service(
                f"{name}-leaders-service",
                metadata={"name": self.leaders_service_name, "namespace": args.namespace, "labels": labels},
                spec={"clusterIP": "None", "selector": self.leader_selector, "ports": api_ports},
                opts=pulumi.ResourceOptions(parent=self, depends_on=[self.lws]))

        api_from: list[dict[str, Any]] = [{"podSelector": {}}]  # same namespace (smoke Job, router, gateways)
        # Managed Prometheus collectors (gmp-system) scrape /metrics on the API port (PodMonitoring).
        api_from += [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}
                     for ns in (GMP_NAMESPACE, *args.allowed_namespaces)]
        api_from += load_balancer_peers(args.expose, args.source_ranges if not args.router_labels else ())
        if args.proxy_subnet_cidr is not None:
            # GKE Gateway's Envoy proxies send requests from the proxy-only subnet (Cloud Load Balancing "Proxy-only
            # subnets for Envoy-based load balancers"); its health checks (HealthCheckPolicy on /health) come from
            # Google's health-checker ranges (Cloud Load Balancing "Firewall rules").
            api_from += [{"ipBlock": {"cidr": cidr}} for cidr in (args.proxy_subnet_cidr, *routing.HEALTH_CHECK_RANGES)]
        k8s.networking.v1.NetworkPolicy(
            f"{name}-netpol", metadata={"name": name, "namespace": args.namespace, "labels": labels},
            spec={"podSelector": {"matchLabels": {LWS_NAME_LABEL: lws_name}}, "policyTypes": ["Ingress"],
                  "ingress": [
                      # Ray (GCS 6379, node and object managers, worker ports) means remote code
                      # execution: only pods of this LeaderWorkerSet may reach them.
                      {"from": [{"podSelector": {"matchLabels": {LWS_NAME_LABEL: lws_name}}}]},
                      {"from": api_from, "ports": [{"port": spec.port, "protocol": "TCP"}]}]},
            opts=child)
        # Every other vllm-gke pod here (download and smoke Jobs) takes no inbound traffic at all.
        k8s.networking.v1.NetworkPolicy(
            f"{name}-deny-ingress",
            metadata={"name": f"{name}-deny-ingress", "namespace": args.namespace, "labels": labels},
            spec={"podSelector": {"matchLabels": {PART_OF_LABEL: PART_OF}}, "policyTypes": ["Ingress"]},
            opts=child)
        k8s.policy.v1.PodDisruptionBudget(
            f"{name}-pdb", metadata={"name": name, "namespace": args.namespace, "labels": labels},
            spec={"maxUnavailable": 1, "selector": {"matchLabels": {LWS_NAME_LABEL: lws_name}}}, opts=child)
        self.register_outputs({"service": self.service.metadata.name})
