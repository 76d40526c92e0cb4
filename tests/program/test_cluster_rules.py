"""What a real GKE cluster would break, checked on the rendered objects of every example stack and of generated
stacks (planner/cluster_rules.py), and each rule shown to catch a deliberately broken object."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from planner import cluster_rules as rules
from planner.catalog import ACCELERATORS, GIB, gke_allocatable
from planner.config import PROJECT_DIR, build_settings
from planner.pods import injected_containers
from planner.sizing import DOWNLOAD_FLOOR_MIB_S, plan
from planner.versions import IMAGE_SOURCES, own_images, unmirrored
from planner.vllm_env import VLLM_0_32_ENV
from tests.helpers import accel, full_config, model
from tools.mocks import Recording, run_program
from tools.plan import namespaced


def server_env() -> frozenset[str]:
    """Every environment variable the vLLM release under test reads (planner/vllm_env.py, held to vllm/envs.py in
    tests/engine/test_vllm_refusals.py)."""
    return VLLM_0_32_ENV


def stack_facts(config: dict[str, Any]) -> tuple[Recording, rules.Budget, list[str]]:
    settings = build_settings(namespaced(config), PROJECT_DIR)
    sizing = plan(settings)
    budget = rules.Budget(sizing.estimated_load_seconds, sizing.weights_gib * GIB, DOWNLOAD_FLOOR_MIB_S)
    return run_program(config), budget, own_images(settings, config["gcp:project"])


def violations(config: dict[str, Any]) -> list[str]:
    recording, budget, images = stack_facts(config)
    pools = rules.node_pools(recording.rule_inputs(), recording.kubernetes_objects())
    return rules.check_all(recording.kubernetes_objects(), pools, budget, server_env(), own_images=images,
                           gcp_resources=recording.rule_inputs(), waits=recording.waits())


def _small_model_for(acc_type: str) -> dict[str, str]:
    return model("Llama-3.2-1B-Instruct" if acc_type == "nvidia-tesla-t4" else "Llama-3.1-8B-Instruct")


GENERATED = {
    **{f"default-{acc}": full_config(accelerator=accel(acc), model=_small_model_for(acc)) for acc in ACCELERATORS},
    "created-cluster-l4-spot": full_config(cluster={"create": True},
                                           accelerator=accel("nvidia-l4", provisioning="spot")),
    "70b-two-a3-nodes-pp": full_config("prod", model=model("Llama-3.1-70B-Instruct"),
                                       accelerator=accel("nvidia-h100-80gb", "a3-highgpu-8g"),
                                       parallelism={"tensor": 8, "pipeline": 2}, vllm={"maxModelLen": 8192}),
    "l4-shared-node-tp2": full_config(accelerator=accel("nvidia-l4", "g2-standard-48"),
                                      parallelism={"tensor": 2}, apiKey={"secure": "v1:k"}),
    "gcs-source-internal-lb": full_config(model={**model("Llama-3.1-8B-Instruct"), "source": "gcs",
                                                 "gcsUri": "gs://bucket/llama"},
                                          serving={"expose": "internal-lb"},
                                          vllm={"image": "vllm/vllm-openai:v0.31.1"}),
    # issue 32: a multi-node group on a ComputeClass over three zones, with a Spot rung and an H200 fallback
    "405b-mega-three-zones-ladder": full_config(
        "prod", accelerator={"type": "nvidia-h100-mega-80gb", "zones": ["us-central1-a", "us-central1-b",
                                                                        "us-central1-c"],
                             "provisioning": ["on-demand", "flex-start", "spot"], "spotMultiNode": True,
                             "fallbacks": [{"type": "nvidia-h200-141gb", "provisioning": ["flex-start"]}]},
        autoscaling={"minReplicas": 1, "maxReplicas": 2, "headroom": 1}),
    "l4-one-zone-on-demand-then-spot": full_config(accelerator=accel("nvidia-l4", provisioning=["on-demand", "spot"]),
                                                   autoscaling={"headroom": 1}),
    # issue 33: the endpoint picker behind Envoy (with an internal load balancer, an API key and the chat page), and
    # GKE Inference Gateway in front of multi-node groups on a created cluster
    "routing-epp": full_config(serving={"routing": "epp", "expose": "internal-lb", "chatUi": True,
                                        "allowedNamespaces": ["apps"]},
                               autoscaling={"maxReplicas": 3}, apiKey={"secure": "v1:k"}),
    "routing-gateway-70b-groups": full_config(
        "prod", serving={"routing": "gke-gateway", "proxySubnetCidr": "10.129.0.0/23", "prefixScorer": "off",
                         "routerReplicas": 2}, model=model("Llama-3.1-70B-Instruct"),
        accelerator=accel("nvidia-h100-80gb", "a3-highgpu-8g"), parallelism={"tensor": 8, "pipeline": 2},
        vllm={"maxModelLen": 8192}),
}


@pytest.mark.parametrize("stack", ["dev", "prod", "multizone"])
def test_example_stacks_break_no_cluster_rule(stack):
    assert violations(full_config(stack)) == []


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_generated_stacks_break_no_cluster_rule(name):
    assert violations(GENERATED[name]) == []


# ------------------------------------------------------------------ the objects each rule class is shown on

@pytest.fixture(scope="module")
def dev():
    recording, budget, _ = stack_facts(full_config())
    return recording, budget


@pytest.fixture(scope="module")
def prod():
    recording, budget, _ = stack_facts(full_config("prod"))
    return recording, budget


def objects(recording: Recording) -> list[dict[str, Any]]:
    return copy.deepcopy(recording.kubernetes_objects())


def pools(recording: Recording) -> list[rules.NodePool]:
    return rules.node_pools(recording.rule_inputs())


def find(objs: list[dict[str, Any]], kind: str, name_part: str = "") -> dict[str, Any]:
    return next(o for o in objs if o["kind"] == kind and name_part in o["metadata"]["name"])


def leader_container(objs: list[dict[str, Any]]) -> dict[str, Any]:
    tmpl = find(objs, "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]
    return (tmpl.get("leaderTemplate") or tmpl["workerTemplate"])["spec"]["containers"][0]


# ------------------------------------------------------------------ names

def test_a_service_named_like_the_lws_collides_with_the_controllers_headless_service_and_sets_vllm_port(dev):
    objs = objects(dev[0])
    find(objs, "Service", "vllm-leader")["metadata"]["name"] = "vllm"  # what main rendered before
    found = rules.names(objs, server_env())
    assert any("headless Service the LeaderWorkerSet controller creates" in p for p in found), found
    assert any("VLLM_PORT" in p for p in found), "a Service named vllm injects VLLM_PORT, which vLLM reads"


def test_per_replica_subdomains_reserve_one_service_name_per_replica_up_to_the_hpa_maximum(dev):
    objs = objects(dev[0])
    find(objs, "LeaderWorkerSet")["spec"]["networkConfig"] = {"subdomainPolicy": "UniquePerReplica"}
    extra = copy.deepcopy(find(objs, "Service", "vllm-leader"))
    extra["metadata"]["name"] = "vllm-1"  # dev's HPA may scale to 2 replicas: vllm-0 and vllm-1
    assert rules.names([*objs, extra]) != []
    extra["metadata"]["name"] = "vllm-2"
    assert rules.names([*objs, extra]) == []


def test_declaring_a_namespace_gke_owns_is_refused(dev):
    objs = objects(dev[0])
    find(objs, "Namespace", "vllm")["metadata"]["name"] = "default"
    assert any("Namespace default" in p for p in rules.names(objs))


def test_service_link_variables_follow_kubernetes_naming():
    svc = {"metadata": {"name": "vllm-leader"}, "spec": {"ports": [{"name": "http", "port": 8000}]}}
    assert rules.service_link_variables(svc) == {
        "VLLM_LEADER_SERVICE_HOST", "VLLM_LEADER_SERVICE_PORT", "VLLM_LEADER_SERVICE_PORT_HTTP", "VLLM_LEADER_PORT",
        "VLLM_LEADER_PORT_8000_TCP", "VLLM_LEADER_PORT_8000_TCP_PROTO", "VLLM_LEADER_PORT_8000_TCP_PORT",
        "VLLM_LEADER_PORT_8000_TCP_ADDR"}
    assert rules.service_link_variables({**svc, "spec": {**svc["spec"], "clusterIP": "None"}}) == set()


# ------------------------------------------------------------------ scheduling

def test_gke_allocatable_matches_the_published_examples():
    # GKE "Plan node sizes": a 4-vCPU / 16 GiB node keeps 80 m CPU and 2.6 GiB + 100 MiB eviction threshold.
    cpu, memory = gke_allocatable(4, 16)
    assert cpu == pytest.approx(3.92) and memory == pytest.approx(16 - 2.6 - 100 / 1024)
    assert gke_allocatable(150, 150)[1] == pytest.approx(140.1423, abs=1e-3)  # 9.8577 GiB reserved at 150 GiB


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_download_job_of_main_asking_4_cpus_fits_no_pool(stack, request):
    recording, _ = request.getfixturevalue(stack)
    objs = objects(recording)
    job = find(objs, "Job", "download")
    job["spec"]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "4", "memory": "8Gi"}, "limits": {"memory": "16Gi"}}  # what main rendered
    found = rules.scheduling(objs, pools(recording))
    assert len(found) == 1 and "download" in found[0] and "CPU requested exceed" in found[0], found


def test_a_gpu_pod_without_the_gpu_toleration_or_in_another_zone_fits_nowhere(prod):
    recording, _ = prod
    objs = objects(recording)
    worker = find(objs, "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    worker["tolerations"] = []
    assert any("does not tolerate the taint nvidia.com/gpu" in p for p in rules.scheduling(objs, pools(recording)))
    objs = objects(recording)
    job = find(objs, "Job", "download")["spec"]["template"]["spec"]
    job["nodeSelector"] = {rules.ZONE_LABEL: "us-central1-a", rules.ACCELERATOR_LABEL: "nvidia-l4"}
    assert any("download" in p for p in rules.scheduling(objs, pools(recording)))


def test_pods_sharing_a_gpu_node_must_fit_it_together():
    pool = rules.NodePool("g2-48", *gke_allocatable(48, 192), gpus=4, labels={})
    pod = {"containers": [{"resources": {"requests": {"cpu": "11", "memory": "40Gi", "nvidia.com/gpu": "1"},
                                         "limits": {"nvidia.com/gpu": "1"}}}]}
    assert rules.misfit(pod, pool) is None
    pod["containers"][0]["resources"]["requests"]["cpu"] = "12"  # 4 x 12 = 48 > 47.8 allocatable
    assert "4 pod(s) per node" in rules.misfit(pod, pool)


def test_the_gcs_fuse_sidecar_the_webhook_injects_counts_toward_the_fit(prod):
    """The serving pods opt into the compile-cache bucket's sidecar; GKE's webhook adds it, so the scheduling check
    adds its declared requests, and refuses an opt-in that does not declare them."""
    recording, _ = prod
    objs = objects(recording)
    lws = find(objs, "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]
    annotations = lws["workerTemplate"]["metadata"]["annotations"]
    assert annotations["gke-gcsfuse/volumes"] == "true" and rules.scheduling(objs, pools(recording)) == []
    sidecar = injected_containers(annotations)
    assert sidecar[0]["resources"]["requests"] == {"cpu": "250m", "memory": "256Mi"}
    annotations["gke-gcsfuse/memory-request"] = "500Gi"  # the node's memory, once added to the vLLM pod's share
    found = rules.scheduling(objs, pools(recording))
    assert any("workerTemplate fits no node pool" in p and "GiB memory requested" in p for p in found), found
    del annotations["gke-gcsfuse/memory-request"]
    found = rules.scheduling(objs, pools(recording))
    assert any("without gke-gcsfuse/memory-request" in p for p in found), found
    annotations["gke-gcsfuse/volumes"] = "false"
    assert rules.scheduling(objs, pools(recording)) == [], "no opt-in, no sidecar"


# ------------------------------------------------------------------ time budgets

def test_mains_prod_startup_probe_of_500_s_is_shorter_than_the_join_wait_plus_load(prod):
    recording, budget = prod
    objs = objects(recording)
    leader_container(objs)["startupProbe"].update(periodSeconds=10, failureThreshold=50)
    found = rules.budgets(objs, budget)
    assert any("startup probe allows 500 s" in p and "join wait (600 s)" in p for p in found), found


def test_mains_grace_period_could_not_hold_prestop_drain_and_ray_stop(prod):
    recording, budget = prod
    objs = objects(recording)
    container = leader_container(objs)
    cmd = container["command"]
    cmd[cmd.index("--ray-stop-timeout") + 1] = "60"  # main let `ray stop` run up to 60 s within a 120 s grace
    find(objs, "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"][
        "terminationGracePeriodSeconds"] = 120
    assert any("exceed terminationGracePeriodSeconds 120" in p for p in rules.budgets(objs, budget))


def test_a_server_draining_longer_than_the_launcher_waits_is_refused(dev):
    recording, budget = dev
    objs = objects(recording)
    cmd = leader_container(objs)["command"]
    cmd[cmd.index("--shutdown-timeout") + 1] = "300"
    assert any("launcher kills it" in p for p in rules.budgets(objs, budget))


def test_job_deadlines_cover_the_download_and_the_smoke_wait(prod):
    recording, budget = prod
    objs = objects(recording)
    find(objs, "Job", "download")["spec"]["activeDeadlineSeconds"] = 4 * 3600  # main's fixed 4 h for 756 GiB
    found = rules.budgets(objs, budget)
    assert any("download" in p and "756.0 GiB at 50 MiB/s" in p for p in found), found
    objs = objects(recording)
    cmd = find(objs, "Job", "smoke")["spec"]["template"]["spec"]["containers"][0]["command"]
    cmd[cmd.index("--timeout") + 1] = "300"
    assert any("waits 300 s for the server" in p for p in rules.budgets(objs, budget))


# ------------------------------------------------------------------ images

@pytest.mark.parametrize("image,expected", [
    ("vllm/vllm-openai:latest", "not pinned"), ("vllm/vllm-openai", "not pinned"),
    ("localhost:5000/vllm", "not pinned"),
    ("gcr.io/gke-release/custom-metrics-stackdriver-adapter:v0.16.1-gke.0", "no public listing"),  # main's pin
])
def test_unpinned_or_unlisted_images_are_refused(prod, image, expected):
    objs = objects(prod[0])
    find(objs, "Deployment", "custom-metrics")["spec"]["template"]["spec"]["containers"][0]["image"] = image
    found = rules.images(objs, stack_facts(full_config("prod"))[2])
    assert len(found) == 1 and expected in found[0], found


def test_every_recorded_image_source_is_used_and_the_default_vllm_image_is_listed():
    import yaml

    default = yaml.safe_load((PROJECT_DIR / "Pulumi.yaml").read_text())["config"]["vllm-gke:vllm"]["default"]
    assert default["image"] in IMAGE_SOURCES, "the default vllm.image needs a recorded public listing"
    rendered = {unmirrored(c["image"]) for stack in ("dev", "prod") for t in rules.pod_templates(
        run_program(full_config(stack)).kubernetes_objects()) for c in t.spec["containers"]}
    gcs = {unmirrored(c["image"]) for t in rules.pod_templates(run_program(GENERATED["gcs-source-internal-lb"])
                                                               .kubernetes_objects()) for c in t.spec["containers"]}
    routed = {unmirrored(c["image"]) for t in rules.pod_templates(run_program(GENERATED["routing-epp"])
                                                                  .kubernetes_objects()) for c in t.spec["containers"]}
    assert set(IMAGE_SOURCES) <= rendered | gcs | routed, "a pin nobody renders is stale"


# ------------------------------------------------------------------ runtime (read-only root, non-root ports)

def test_mains_adapter_binding_443_and_writing_certs_to_the_read_only_root_is_refused(prod):
    objs = objects(prod[0])
    adapter = find(objs, "Deployment", "custom-metrics")["spec"]["template"]["spec"]["containers"][0]
    assert rules.runtime(objs) == []
    adapter["ports"] = [{"name": "https", "containerPort": 443}]
    adapter["command"] = [c for c in adapter["command"] if not c.startswith(("--cert-dir", "--secure-port"))]
    adapter["command"].append("--cert-dir=apiserver.local.config/certificates")  # the adapter's default
    adapter.pop("volumeMounts")
    found = rules.runtime(objs)
    assert any("binds port 443" in p for p in found) and any("read-only root" in p for p in found), found


def test_the_adapter_serves_on_a_high_port_with_certificates_on_a_writable_volume(prod):
    objs = objects(prod[0])
    deployment = find(objs, "Deployment", "custom-metrics")
    adapter = deployment["spec"]["template"]["spec"]["containers"][0]
    assert "--cert-dir=/tmp/certs" in adapter["command"] and "--secure-port=6443" in adapter["command"]
    assert {"name": "tmp", "mountPath": "/tmp"} in adapter["volumeMounts"]
    service = find(objs, "Service", "custom-metrics")
    assert service["spec"]["ports"][0]["port"] == 443 and service["spec"]["ports"][0]["targetPort"] == "https"
    policy = find(objs, "NetworkPolicy", "custom-metrics")
    assert policy["spec"]["ingress"][0]["ports"] == [{"port": 6443, "protocol": "TCP"}], \
        "NetworkPolicy ports are the pod's ports, after the Service's translation"


def test_a_python_pod_without_user_or_logname_is_refused(dev):
    objs = objects(dev[0])
    container = leader_container(objs)
    assert {"USER", "LOGNAME"} <= {e["name"] for e in container["env"]}, "the rendered pods carry the fix"
    container["env"] = [e for e in container["env"] if e["name"] not in ("USER", "LOGNAME")]
    assert any("neither USER nor LOGNAME" in p for p in rules.runtime(objs))


# ------------------------------------------------------------------ Compute Engine: every catalog machine

EVERY_MACHINE = sorted((acc.type, m.name) for acc in ACCELERATORS.values() for m in acc.machines)


def gce_violations(recording: Recording) -> list[str]:
    return rules.gce(recording.rule_inputs())


@pytest.mark.parametrize(("acc_type", "machine"), EVERY_MACHINE)
def test_every_catalog_machine_with_default_settings_declares_what_compute_engine_accepts(acc_type, machine):
    rec = run_program(full_config(accelerator=accel(acc_type, machine), model=_small_model_for(acc_type),
                                  vllm={"maxModelLen": 4096}))
    assert gce_violations(rec) == []


def _pool_inputs(rec: Recording) -> dict[str, Any]:
    return next(r.inputs for r in rec.resources if r.type == rules.NODE_POOL_TYPE and "gpu" in r.name)


def test_mains_pd_ssd_boot_disk_on_a3_ultra_is_refused():
    rec = run_program(full_config(accelerator=accel("nvidia-h200-141gb"), model=_small_model_for("x"),
                                  vllm={"maxModelLen": 4096}))
    _pool_inputs(rec)["nodeConfig"]["diskType"] = "pd-ssd"
    assert any("boot disk pd-ssd on a3-ultragpu-8g" in p for p in gce_violations(rec))


def test_mains_on_demand_h100_default_machine_is_refused():
    rec = run_program(full_config(accelerator=accel("nvidia-h100-80gb"), model=_small_model_for("x")))
    config = _pool_inputs(rec)["nodeConfig"]
    config.pop("flexStart"), config.pop("reservationAffinity")
    found = gce_violations(rec)
    assert any("a3-highgpu-1g bought on-demand" in p for p in found), found


def test_a_flex_start_pool_that_starts_nodes_or_repairs_them_is_refused():
    rec = run_program(full_config(accelerator=accel("nvidia-h100-80gb"), model=_small_model_for("x")))
    inputs = _pool_inputs(rec)
    inputs["initialNodeCount"], inputs["management"]["autoRepair"] = 1, True
    found = gce_violations(rec)
    assert len(found) == 2, found
    assert any("initialNodeCount" in p and "management.autoRepair" in p for p in found), found
    assert any("starts 1 node(s) in each of 1 zone(s) = 1, above its planned minimum of 0" in p for p in found)


def test_a_serving_disk_the_gpu_machine_cannot_attach_is_refused():
    rec = run_program(full_config(accelerator=accel("nvidia-h200-141gb"), model=_small_model_for("x"),
                                  vllm={"maxModelLen": 4096}))
    disk = next(r for r in rec.resources if r.type == rules.DISK_TYPE and r.name.endswith("-serving"))
    assert disk.inputs["type"] == "hyperdisk-ml", "H200 machines attach no Persistent Disk: Hyperdisk ML by default"
    disk.inputs["type"] = "pd-ssd"
    assert any("cannot attach pd-ssd" in p for p in gce_violations(rec))



# ------------------------------------------------------------------ image streaming

def test_the_vllm_image_is_pulled_through_the_stacks_artifact_registry_remote_repository():
    """Main switched image streaming on for vllm/vllm-openai from Docker Hub, which GKE does not stream, and never
    enabled the Container File System API."""
    rec = run_program(full_config())
    repo = rec.one("gcp:artifactregistry/repository:Repository").inputs
    assert repo["mode"] == "REMOTE_REPOSITORY" and repo["format"] == "DOCKER"
    assert repo["remoteRepositoryConfig"]["dockerRepository"]["publicRepository"] == "DOCKER_HUB"
    apis = {r.inputs["service"] for r in rec.of_type("gcp:projects/service:Service")}
    assert {"containerfilesystem.googleapis.com", "artifactregistry.googleapis.com"} <= apis
    expected = f"us-central1-docker.pkg.dev/my-gcp-project/{repo['repositoryId']}/vllm/vllm-openai:v0.32.0"
    images = {c["image"] for t in rules.pod_templates(rec.kubernetes_objects()) for c in t.spec["containers"]}
    assert expected in images and "vllm/vllm-openai:v0.32.0" not in images
    assert any(p["nodeConfig"].get("gcfsConfig", {}).get("enabled") for p in
               (r.inputs for r in rec.resources if r.type == rules.NODE_POOL_TYPE)), "the GPU pool streams"


def test_no_mirror_when_turned_off_or_for_another_registry():
    off = run_program(full_config(cluster={"imageMirror": False}))
    other = run_program(full_config(vllm={"image": "europe-docker.pkg.dev/p/r/vllm:v1"}))
    for rec, image in ((off, "vllm/vllm-openai:v0.32.0"), (other, "europe-docker.pkg.dev/p/r/vllm:v1")):
        assert not rec.of_type("gcp:artifactregistry/repository:Repository")
        templates = rules.pod_templates(rec.kubernetes_objects())
        assert image in {c["image"] for t in templates for c in t.spec["containers"]}
