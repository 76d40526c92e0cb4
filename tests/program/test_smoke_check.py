"""SmokeCheck under Pulumi's mocks: the Job runs after the server and reruns on change."""



from tests.helpers import full_config
from tools.mocks import run_program


def test_smoke_job_runs_after_the_server_through_the_service_and_reruns_on_change():
    rec = run_program(full_config(apiKey={"secure": "v1:k"}))
    job = rec.one("kubernetes:batch/v1:Job", "smoke")
    lws = rec.one("kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet")
    service = rec.one("kubernetes:core/v1:Service", "vllm-service")
    assert {lws.urn, service.urn} <= set(job.dependencies), "the Job runs after the group and its Service"
    container = job.inputs["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][container["command"].index("--url") + 1] == "http://vllm-leader:8000"
    env = {e["name"]: e for e in container["env"]}
    assert env["VLLM_API_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "vllm-api-key"
    other = run_program(full_config(vllm={"maxModelLen": 4096}))
    assert other.one("kubernetes:batch/v1:Job", "smoke").inputs["metadata"]["name"] != job.inputs["metadata"]["name"]
    assert not run_program(full_config(serving={"smokeTest": False})).of_type("vllm-gke:smoke:SmokeTest")
