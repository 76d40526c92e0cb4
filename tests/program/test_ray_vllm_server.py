"""Serving layer under mocks: LWS groups, commands, probes, security, Service, NetworkPolicy."""

import pytest

from planner.commands import API_PORT, RAY_PORT
from tests.helpers import accel, full_config, model
from tests.k8s_schema import validate_object
from tests.serving_helpers import LWS_TYPE
from tools.mocks import run_program


@pytest.fixture(scope="module")
def dev():
    return run_program(full_config())


@pytest.fixture(scope="module")
def prod():
    return run_program(full_config("prod"))


def lws_spec(rec):
    return rec.one(LWS_TYPE).inputs["spec"]


def test_single_node_group_runs_vllm_directly_with_the_planned_layout(dev):
    spec = lws_spec(dev)
    tmpl = spec["leaderWorkerTemplate"]
    assert tmpl["size"] == 1 and "leaderTemplate" not in tmpl
    assert tmpl["restartPolicy"] == "RecreateGroupOnPodRestart"
    container = tmpl["workerTemplate"]["spec"]["containers"][0]
    cmd = container["command"]
    assert cmd[cmd.index("--group-size") + 1] == "1"
    server = cmd[cmd.index("--") + 1:]
    assert server[:3] == ["python3", "-m", "vllm.entrypoints.openai.api_server"]
    flags = dict(zip(server[3::2], server[4::2], strict=False))
    assert flags["--tensor-parallel-size"] == "1" and flags["--pipeline-parallel-size"] == "1"
    assert flags["--max-model-len"] == "8192" and flags["--served-model-name"] == "llama-3.1-8b-instruct"
    assert flags["--model"].startswith("/models/")
    assert "--distributed-executor-backend" not in server
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert spec["replicas"] == 1


def test_multi_node_group_has_ray_head_leader_and_ray_workers(prod):
    tmpl = lws_spec(prod)["leaderWorkerTemplate"]
    assert tmpl["size"] == 2
    leader = tmpl["leaderTemplate"]["spec"]["containers"][0]
    worker = tmpl["workerTemplate"]["spec"]["containers"][0]
    server = leader["command"][leader["command"].index("--") + 1:]
    assert server[server.index("--distributed-executor-backend") + 1] == "ray"
    assert server[server.index("--tensor-parallel-size") + 1] == "8"
    assert server[server.index("--pipeline-parallel-size") + 1] == "2"
    assert worker["command"][2] == "worker" and "--leader-address" not in worker["command"], \
        "workers take LWS_LEADER_ADDRESS from the environment LWS injects"
    for c in (leader, worker):
        assert c["resources"]["limits"]["nvidia.com/gpu"] == "8", "multi-node groups take whole nodes"
    assert worker["readinessProbe"]["tcpSocket"]["port"] == 8076


def test_pods_tolerate_the_gpu_taint_select_the_accelerator_and_mount_shm_in_memory(prod):
    tmpl = lws_spec(prod)["leaderWorkerTemplate"]
    for pod in (tmpl["leaderTemplate"], tmpl["workerTemplate"]):
        spec = pod["spec"]
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
        assert spec["nodeSelector"]["cloud.google.com/gke-accelerator"] == "nvidia-h100-mega-80gb"
        shm = next(v for v in spec["volumes"] if v["name"] == "dshm")
        assert shm["emptyDir"]["medium"] == "Memory" and shm["emptyDir"]["sizeLimit"].endswith("Gi")
        weights = next(v for v in spec["volumes"] if v["name"] == "weights")
        assert weights["persistentVolumeClaim"]["readOnly"] is True
        assert spec["automountServiceAccountToken"] is False
        sec = spec["containers"][0]["securityContext"]
        assert sec["capabilities"] == {"drop": ["ALL"]} and sec["allowPrivilegeEscalation"] is False
        assert sec["privileged"] is False and sec["readOnlyRootFilesystem"] is True
        assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
        assert spec["securityContext"]["runAsUser"] >= 10000 and spec["securityContext"]["runAsNonRoot"] is True


def test_leader_probes_follow_the_planner_and_a_one_node_leader_is_live_only_while_health_answers(dev):
    from tests.helpers import sizing

    container = lws_spec(dev)["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    startup = container["startupProbe"]
    assert startup["httpGet"]["path"] == "/health"
    assert startup["periodSeconds"] * startup["failureThreshold"] >= sizing().startup_probe_seconds
    assert container["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    # Before: an exec check that returned 0 without a heartbeat file, so a wedged one-node server lived forever.
    assert container["livenessProbe"]["httpGet"] == {"path": "/health", "port": "http"}, \
        "a one-node leader's liveness must fail when vLLM stops answering /health"
    grace = lws_spec(dev)["leaderWorkerTemplate"]["workerTemplate"]["spec"]["terminationGracePeriodSeconds"]
    cmd = container["command"]
    drain = int(cmd[cmd.index("--drain-timeout") + 1]) + int(cmd[cmd.index("--ray-stop-timeout") + 1])
    assert grace >= drain + container["lifecycle"]["preStop"]["sleep"]["seconds"], "drain must fit the grace period"


def test_multi_node_leader_liveness_needs_the_group_heartbeat_and_health_and_pins_the_pod_network(prod):
    tmpl = lws_spec(prod)["leaderWorkerTemplate"]
    leader = tmpl["leaderTemplate"]["spec"]["containers"][0]
    check = leader["livenessProbe"]["exec"]["command"]
    assert check[2:5] == ["check", "--max-age", "30"] and check[-2:] == ["--health-url", "http://127.0.0.1:8000/health"]
    for role in ("leaderTemplate", "workerTemplate"):
        env = {e["name"]: e.get("value") for e in tmpl[role]["spec"]["containers"][0]["env"]}
        assert env["VLLM_HOST_IP"] == "$(POD_IP)" and env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "eth0"
        names = [e["name"] for e in tmpl[role]["spec"]["containers"][0]["env"]]
        assert names.index("POD_IP") < names.index("VLLM_HOST_IP"), "$(POD_IP) expands only after POD_IP"


def test_one_node_groups_leave_nccl_and_gloo_to_choose_their_interface(dev):
    env = {e["name"] for e in lws_spec(dev)["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["env"]}
    assert not env & {"VLLM_HOST_IP", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"}


def test_spot_stacks_select_spot_nodes():
    rec = run_program(full_config(accelerator=accel("nvidia-l4", provisioning="spot")))
    pod = lws_spec(rec)["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    assert pod["nodeSelector"]["cloud.google.com/gke-spot"] == "true"


def test_service_selects_only_leader_pods_on_the_named_http_port(dev, prod):
    for rec, svc_type in ((dev, "ClusterIP"), (prod, "LoadBalancer")):
        svc = rec.one("kubernetes:core/v1:Service", "vllm-service").inputs
        assert svc["spec"]["selector"] == {"leaderworkerset.sigs.k8s.io/name": "vllm",
                                           "leaderworkerset.sigs.k8s.io/worker-index": "0"}
        assert svc["spec"]["ports"] == [{"name": "http", "port": API_PORT, "targetPort": "http", "protocol": "TCP"}]
        assert svc["spec"]["type"] == svc_type
        assert all(p["port"] != RAY_PORT for p in svc["spec"]["ports"]), "Ray ports are never in a Service"
    lb = prod.one("kubernetes:core/v1:Service", "vllm-service").inputs
    assert lb["metadata"]["annotations"]["networking.gke.io/load-balancer-type"] == "Internal"
    assert lb["spec"]["loadBalancerSourceRanges"] == ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"]


def test_the_api_service_is_not_named_like_the_lws_so_the_controllers_headless_service_can_exist(dev, prod):
    for rec in (dev, prod):
        svc = rec.one("kubernetes:core/v1:Service", "vllm-service").inputs
        lws = rec.one(LWS_TYPE).inputs
        assert svc["metadata"]["name"] == "vllm-leader" != lws["metadata"]["name"]


def test_internal_lb_admits_the_configured_source_ranges_only():
    rec = run_program(full_config("prod", serving={"sourceRanges": ["100.64.0.0/10"]}))
    svc = rec.one("kubernetes:core/v1:Service", "vllm-service").inputs
    assert svc["spec"]["loadBalancerSourceRanges"] == ["100.64.0.0/10"]
    api_rule = rec.one("kubernetes:networking.k8s.io/v1:NetworkPolicy", "vllm-netpol").inputs["spec"]["ingress"][1]
    blocks = [peer["ipBlock"]["cidr"] for peer in api_rule["from"] if "ipBlock" in peer]
    assert blocks == ["100.64.0.0/10"], "10.0.0.0/8 was hard-coded before; the VPC's ranges are config now"


def test_network_policy_keeps_ray_inside_the_lws_and_the_api_to_allowed_namespaces(prod):
    spec = prod.one("kubernetes:networking.k8s.io/v1:NetworkPolicy", "vllm-netpol").inputs["spec"]
    assert spec["podSelector"] == {"matchLabels": {"leaderworkerset.sigs.k8s.io/name": "vllm"}}
    ray_rule, api_rule = spec["ingress"]
    assert ray_rule["from"] == [{"podSelector": {"matchLabels": {"leaderworkerset.sigs.k8s.io/name": "vllm"}}}]
    assert api_rule["ports"] == [{"port": API_PORT, "protocol": "TCP"}], "outsiders reach only the API port"
    assert {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gateway"}}} in api_rule["from"]
    assert {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gmp-system"}}} in api_rule["from"], \
        "Managed Prometheus collectors must reach /metrics"
    deny = prod.one("kubernetes:networking.k8s.io/v1:NetworkPolicy", "deny-ingress").inputs["spec"]
    assert deny == {"podSelector": {"matchLabels": {"app.kubernetes.io/part-of": "vllm-gke"}},
                    "policyTypes": ["Ingress"]}, "Jobs take no inbound traffic"


def test_api_key_lives_in_a_secret_and_reaches_vllm_through_env():
    rec = run_program(full_config(apiKey={"secure": "v1:k"}))
    secret = rec.one("kubernetes:core/v1:Secret", "api-key")
    assert secret.inputs["stringData"] == {"__secret__": {"VLLM_API_KEY": "[secret]"}}
    container = lws_spec(rec)["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["VLLM_API_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "vllm-api-key"
    assert "--api-key" not in container["command"]


def test_lws_waits_for_the_controller_and_replicas_are_left_to_the_hpa(dev):
    lws = dev.one(LWS_TYPE)
    release = dev.one("kubernetes:helm.sh/v3:Release")
    assert release.inputs["version"] == "0.8.0" and release.inputs["chart"].endswith("/lws")
    assert release.urn in lws.dependencies
    assert "spec.replicas" in lws.ignore_changes


def test_install_lws_false_skips_the_chart():
    rec = run_program(full_config(serving={"installLws": False}))
    assert not rec.of_type("kubernetes:helm.sh/v3:Release")


def test_multi_gpu_single_node_replica_requests_tp_gpus_and_a_share_of_the_node():
    rec = run_program(full_config(accelerator=accel("nvidia-h100-80gb", "a3-highgpu-8g"),
                                  model=model("Llama-3.1-70B-Instruct")))
    container = lws_spec(rec)["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    assert container["resources"]["requests"]["nvidia.com/gpu"] == "4"
    assert int(container["resources"]["requests"]["cpu"]) <= 208 // 2


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_every_object_of_the_example_stacks_passes_strict_schema_validation(stack, dev, prod):
    objects = (dev if stack == "dev" else prod).kubernetes_objects()
    assert any(o["kind"] == "LeaderWorkerSet" for o in objects)
    for obj in objects:
        validate_object(obj)


def test_rotating_the_api_key_changes_the_pod_template_so_groups_roll():
    def annotation(key):
        rec = run_program(full_config(apiKey=key))
        meta = lws_spec(rec)["leaderWorkerTemplate"]["workerTemplate"]["metadata"]
        return meta["annotations"]["vllm-gke/api-key-sha256"]

    first, again, rotated = annotation("key-one"), annotation("key-one"), annotation("key-two")
    assert first == again and first != rotated
    assert "key-one" not in str(first), "only a digest of the key reaches the pod template"
