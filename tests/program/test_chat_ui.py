"""ChatUi under Pulumi's mocks: off by default; on, a schema-valid page next to the API with the API's key."""

from planner.versions import chat_ui_tag
from tests.helpers import full_config
from tests.k8s_schema import validate_object
from tools.mocks import run_program


def ui_objects(rec):
    return [o for o in rec.kubernetes_objects() if "chat-ui" in o["metadata"]["name"]]


def test_off_by_default_adds_nothing():
    assert ui_objects(run_program(full_config())) == []


def test_on_it_adds_a_page_that_streams_from_the_api_with_its_key():
    rec = run_program(full_config(serving={"chatUi": True}, apiKey={"secure": "v1:k"}))
    objs = {o["kind"]: o for o in ui_objects(rec)}
    assert set(objs) == {"ConfigMap", "Deployment", "Service", "NetworkPolicy"}
    for obj in objs.values():
        validate_object(obj)
    pod = objs["Deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"].endswith(f"/vllm-gke-images/chat-ui:{chat_ui_tag()}")
    env = {e["name"]: e for e in container["env"]}
    assert env["VLLM_URL"]["value"] == "http://vllm-leader:8000"
    assert env["VLLM_MODEL"]["value"] == "llama-3.1-8b-instruct"
    assert env["VLLM_API_KEY"]["valueFrom"]["secretKeyRef"]["key"] == "VLLM_API_KEY"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True and pod["securityContext"]["runAsNonRoot"]
    assert {m["mountPath"] for m in container["volumeMounts"]} == {"/opt/chat-ui", "/tmp"}
    assert objs["ConfigMap"]["data"]["app.py"].startswith("#!/usr/bin/env python3")
    assert objs["Service"]["spec"]["type"] == "ClusterIP"
    ingress = objs["NetworkPolicy"]["spec"]["ingress"]
    assert ingress == [{"from": [{"podSelector": {}}], "ports": [{"port": 7860, "protocol": "TCP"}]}]


def test_behind_an_internal_load_balancer_only_the_source_ranges_reach_the_page():
    rec = run_program(full_config(serving={"chatUi": True, "expose": "internal-lb", "sourceRanges": ["10.1.0.0/16"]}))
    objs = {o["kind"]: o for o in ui_objects(rec)}
    assert objs["Service"]["spec"]["type"] == "LoadBalancer"
    assert objs["Service"]["metadata"]["annotations"]["networking.gke.io/load-balancer-type"] == "Internal"
    assert objs["Service"]["spec"]["loadBalancerSourceRanges"] == ["10.1.0.0/16"]
    assert {"ipBlock": {"cidr": "10.1.0.0/16"}} in objs["NetworkPolicy"]["spec"]["ingress"][0]["from"]


def test_an_unpinned_chat_ui_image_is_refused():
    import pytest

    from planner.errors import ConfigError
    from tests.helpers import settings

    with pytest.raises(ConfigError, match=r"serving\.chatUiImage"):
        settings(serving={"chatUi": True, "chatUiImage": "example/chat-ui"})
