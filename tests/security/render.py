"""Write every Kubernetes object the example stacks declare, one YAML file each, for the security scan;
LeaderWorkerSet pod templates are also written as Pods, since scanners do not read the CRD."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.helpers import full_config
from tools.mocks import run_program

LWS_TYPE = "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet"


def lws_pods(obj: dict) -> list[dict]:
    template = obj["spec"]["leaderWorkerTemplate"]
    pods = []
    for part in ("leaderTemplate", "workerTemplate"):
        if part in template:
            meta = template[part].get("metadata", {})
            pods.append({"apiVersion": "v1", "kind": "Pod",
                         "metadata": {**meta, "name": f"{obj['metadata']['name']}-{part.lower()}",
                                      "namespace": obj["metadata"]["namespace"]},
                         "spec": template[part]["spec"]})
    return pods


VARIANTS = {"dev-epp": ("dev", {"serving": {"routing": "epp"}}),
            "dev-gke-gateway": ("dev", {"serving": {"routing": "gke-gateway"}})}
"""Stack variants scanned besides the example stacks: the router pods and the Gateway API objects (issue 33)."""


def render(out: Path, stacks: tuple[str, ...] = ("dev", "prod", "multizone", *VARIANTS)) -> int:
    count = 0
    for stack in stacks:
        base, sections = VARIANTS.get(stack, (stack, {}))
        for kind, obj in run_program(full_config(base, **sections), stack=base).kubernetes_resources():
            for i, doc in enumerate([obj, *(lws_pods(obj) if kind == LWS_TYPE else [])]):
                path = out / stack / f"{doc['kind'].lower()}-{doc['metadata']['name']}-{i}.yaml"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(yaml.safe_dump(doc, sort_keys=False))
                count += 1
    return count
