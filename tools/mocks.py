"""Run the real Pulumi program under Pulumi's mocks runtime and record what it declares.

Used by `tools.plan` and the tests: no CLI, no credentials, no network. Resources get
their inputs echoed back as outputs, plus the few computed outputs the program reads
(cluster endpoint and CA, image self links, project number).
"""

from __future__ import annotations

import copy
import gc
import hashlib
import json
import logging
import runpy
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import settings as pulumi_settings
from pulumi.runtime.config import set_all_config
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from planner.config import NAMESPACE, PROJECT_DIR

FAKE_CA = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCm1vY2sKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo="
FAKE_PROJECT_NUMBER = "123456789012"


@dataclass
class Recorded:
    """One resource the program registered."""

    type: str
    name: str
    urn: str
    inputs: dict[str, Any]
    parent: str | None = None
    provider: str | None = None
    dependencies: list[str] = field(default_factory=list)
    property_dependencies: dict[str, list[str]] = field(default_factory=dict)
    custom: bool = True
    ignore_changes: list[str] = field(default_factory=list)
    delete_before_replace: bool = False
    additional_secret_outputs: list[str] = field(default_factory=list)
    create_timeout: str = ""


EXISTING_CLUSTER = {"masterVersion": "1.34.1-gke.1829001", "networkingMode": "VPC_NATIVE",
                    "network": "projects/{project}/global/networks/default",
                    "gatewayApiConfigs": [{"channel": "CHANNEL_STANDARD"}],
                    "addonsConfigs": [{"httpLoadBalancings": [{"disabled": False}]}],
                    "ipAllocationPolicies": [{"clusterSecondaryRangeName": "pods"}]}
"""How the mocks describe an existing cluster (`cluster.create: false`): a current VPC-native Standard cluster with
the Gateway API on. What `make plan` assumes of it; the program checks the real one at preview."""
PROXY_ONLY_SUBNETS = [{"name": "proxy-only", "ipCidrRange": "10.129.0.0/23",
                       "network": "https://www.googleapis.com/compute/v1/projects/{project}/global/networks/default",
                       "networkName": "default"}]
"""The existing proxy-only subnet the mocks report in the cluster's region."""
GATEWAY_ADDRESS = "10.128.0.50"
"""The address the mocks give a Gateway once programmed (an internal address of the default network)."""


class _Mocks(pulumi.runtime.Mocks):
    def __init__(self, project: str, cluster: dict[str, Any] | None = None,
                 proxy_subnets: list[dict[str, Any]] | None = None) -> None:
        self.project = project
        self.cluster = {**EXISTING_CLUSTER, **(cluster or {})}
        self.proxy_subnets = PROXY_ONLY_SUBNETS if proxy_subnets is None else proxy_subnets

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict]:
        outputs = dict(args.inputs)
        if args.typ == "gcp:container/cluster:Cluster":
            outputs.update(endpoint="203.0.113.10", masterAuth={"clusterCaCertificate": FAKE_CA},
                           location=args.inputs.get("location"))
        if args.typ in ("gcp:compute/image:Image", "gcp:compute/snapshot:Snapshot", "gcp:compute/disk:Disk"):
            kind = args.typ.split(":")[-1].lower() + "s"
            outputs["selfLink"] = f"https://www.googleapis.com/compute/v1/projects/{self.project}/global/{kind}/{args.name}"
        if args.typ == "gcp:container/nodePool:NodePool" and not outputs.get("name"):
            # Pulumi auto-names a pool without a name: the logical name and 7 random hex characters.
            outputs["name"] = f"{args.name}-{hashlib.sha256(args.name.encode()).hexdigest()[:7]}"
        if args.typ == "gcp:serviceaccount/account:Account":
            outputs["email"] = f"{args.inputs.get('accountId')}@{self.project}.iam.gserviceaccount.com"
        if args.typ.startswith("kubernetes:") and isinstance(outputs.get("metadata"), dict):
            outputs["metadata"].setdefault("name", args.name)
        if args.typ == "kubernetes:gateway.networking.k8s.io/v1:Gateway":
            outputs["status"] = {"addresses": [{"type": "IPAddress", "value": GATEWAY_ADDRESS}]}
        return f"{args.name}-id", outputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> dict:
        if args.token == "gcp:container/getCluster:getCluster":
            return {"name": args.args.get("name"), "location": args.args.get("location"),
                    "endpoint": "203.0.113.10", "masterAuths": [{"clusterCaCertificate": FAKE_CA}],
                    "project": args.args.get("project") or self.project,
                    "workloadIdentityConfigs": [{"workloadPool": f"{self.project}.svc.id.goog"}],
                    **json.loads(json.dumps(self.cluster).replace("{project}", self.project))}
        if args.token == "gcp:compute/getSubnetworks:getSubnetworks":
            return {"subnetworks": json.loads(json.dumps(self.proxy_subnets).replace("{project}", self.project)),
                    "id": "subnetworks"}
        if args.token in ("gcp:organizations/getProject:getProject",
                          "gcp:organizations/getClientConfig:getClientConfig"):
            return {"number": FAKE_PROJECT_NUMBER, "projectId": self.project, "project": self.project}
        return dict(args.args)


class _RecordingMonitor(pulumi_mocks.MockMonitor):
    """MockMonitor that also keeps each registration's parent, provider and dependencies."""

    def __init__(self, mocks: _Mocks) -> None:
        super().__init__(mocks)
        self.recorded: list[Recorded] = []

    def RegisterResource(self, request):  # noqa: N802 (gRPC method name)
        from pulumi.runtime import rpc

        response = super().RegisterResource(request)
        inputs = rpc.deserialize_properties(request.object, keep_unknowns=True)
        self.recorded.append(Recorded(
            type=request.type, name=request.name, urn=response.urn, inputs=_plain(inputs),
            parent=request.parent or None, provider=request.provider or None,
            dependencies=list(request.dependencies),
            property_dependencies={k: list(v.urns) for k, v in request.propertyDependencies.items()},
            custom=request.custom, ignore_changes=list(request.ignoreChanges),
            delete_before_replace=request.deleteBeforeReplace,
            additional_secret_outputs=list(request.additionalSecretOutputs),
            create_timeout=request.customTimeouts.create,
        ))
        return response


def _plain(value: Any) -> Any:
    """Secrets as their values wrapped in a marker dict, everything else as plain JSON data."""
    from pulumi.runtime import rpc

    if isinstance(value, dict):
        if value.get(rpc._special_sig_key) == rpc._special_secret_sig:
            return {"__secret__": _plain(value.get("value"))}
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


@dataclass
class Recording:
    stack: str
    resources: list[Recorded]

    def of_type(self, type_token: str) -> list[Recorded]:
        return [r for r in self.resources if r.type == type_token]

    def one(self, type_token: str, name_contains: str = "") -> Recorded:
        found = [r for r in self.of_type(type_token) if name_contains in r.name]
        if len(found) != 1:
            raise AssertionError(f"expected one {type_token} named *{name_contains}*, found {[r.name for r in found]}")
        return found[0]

    def rule_inputs(self) -> list[tuple[str, str, dict[str, Any]]]:
        """(type token, logical name, inputs) of every resource: what planner/cluster_rules.py reads."""
        return [(r.type, r.name, r.inputs) for r in self.resources]

    def waits(self) -> dict[tuple[str, str, str], set[tuple[str, str, str]]]:
        """(kind, namespace, name) of each Kubernetes object -> every Kubernetes object it waits for before Pulumi
        creates it: its dependencies and property dependencies, a component standing for all it contains (what
        `depends_on` a component means), transitively. What planner/router_rules.py `awaits` reads."""
        children: dict[str, list[Recorded]] = {}
        for res in self.resources:
            if res.parent:
                children.setdefault(res.parent, []).append(res)
        by_urn = {res.urn: res for res in self.resources}

        def expanded(urn: str) -> set[str]:
            res = by_urn.get(urn)
            if res is None:
                return set()
            found = {urn} if res.custom else set()
            for child in children.get(urn, []) if not res.custom else []:
                found |= expanded(child.urn)
            return found

        direct = {res.urn: set().union(*(expanded(u) for u in {*res.dependencies,
                                                               *(u for us in res.property_dependencies.values()
                                                                 for u in us)})) for res in self.resources}

        def key(res: Recorded) -> tuple[str, str, str] | None:
            if not res.type.startswith("kubernetes:") or "kind" not in res.inputs:
                return None
            meta = res.inputs.get("metadata") or {}
            return str(res.inputs["kind"]), str(meta.get("namespace") or ""), str(meta.get("name") or res.name)

        closure: dict[str, set[str]] = {}

        def reach(urn: str, seen: frozenset[str] = frozenset()) -> set[str]:
            if urn not in closure:
                found = set(direct.get(urn, ()))
                for dep in list(found):
                    if dep not in seen:
                        found |= reach(dep, seen | {urn})
                closure[urn] = found
            return closure[urn]

        out = {}
        for res in self.resources:
            if (own := key(res)) is not None:
                out[own] = {k for dep in reach(res.urn) if (k := key(by_urn[dep])) is not None}
        return out

    def by_urn(self, urn: str) -> Recorded:
        return next(r for r in self.resources if r.urn == urn)

    def kubernetes_resources(self) -> list[tuple[str, dict[str, Any]]]:
        """(type token, object as it would be applied, secret values masked) for every Kubernetes object."""
        found = []
        for res in self.resources:
            if not res.type.startswith("kubernetes:") or res.type.startswith("kubernetes:helm") \
                    or "apiVersion" not in res.inputs:
                continue
            obj = json.loads(json.dumps(res.inputs, default=str))
            obj.pop("__secret__", None)
            found.append((res.type, _integral(_unwrap_secrets(obj))))
        return found

    def kubernetes_objects(self) -> list[dict[str, Any]]:
        """Every Kubernetes object as it would be applied (secret values masked)."""
        return [obj for _, obj in self.kubernetes_resources()]


def _integral(value: Any) -> Any:
    """Numbers cross the Pulumi RPC as doubles; Kubernetes integer fields read back as ints."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _integral(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integral(v) for v in value]
    return value


def _unwrap_secrets(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"__secret__"}:
            return "[secret]"
        return {k: _unwrap_secrets(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unwrap_secrets(v) for v in value]
    return value


def config_strings(config: dict[str, Any]) -> tuple[dict[str, str], list[str]]:
    """Stack-file config -> the string map Pulumi hands a program, plus its secret keys.

    Encrypted `secure:` values cannot be decrypted offline; they become placeholders.
    """
    values, secrets = {}, []
    for key, value in config.items():
        full = key if ":" in key else f"{NAMESPACE}:{key}"
        if isinstance(value, dict) and set(value) == {"secure"}:
            values[full] = "[secret]"
            secrets.append(full)
        elif isinstance(value, (dict, list)):
            values[full] = json.dumps(value)
        elif isinstance(value, bool):
            values[full] = "true" if value else "false"
        else:
            values[full] = str(value)
    return values, secrets


def run_program(config: dict[str, Any], stack: str = "dev", project_dir: Path = PROJECT_DIR,
                preview: bool = False, cluster: dict[str, Any] | None = None,
                proxy_subnets: list[dict[str, Any]] | None = None) -> Recording:
    """Evaluate `__main__.py` for a stack's config under mocks and return what it registered. `cluster` overrides
    fields of EXISTING_CLUSTER, `proxy_subnets` replaces PROXY_ONLY_SUBNETS (what the lookups answer).

    With SHARED on (the test tiers turn it on), a run with the same inputs as an earlier one in this process returns a
    copy of that run's recording: the program is a function of them (tests/program/test_program.py holds that two
    runs record the same)."""
    key = None
    if SHARED is not None:
        key = json.dumps([config, stack, str(project_dir), preview, cluster, proxy_subnets], sort_keys=True,
                         default=str)
        if key in SHARED:
            return copy.deepcopy(SHARED[key])
    recording = _in_own_thread(lambda: _run(config, stack, project_dir, preview, cluster, proxy_subnets))
    if key is not None:
        SHARED[key] = copy.deepcopy(recording)
    return recording


SHARED: dict[str, Recording] | None = None
"""Recordings by their inputs, when runs are shared (None: every call runs the program); share_recordings turns it
on."""


def share_recordings() -> None:
    """From now on in this process, runs with the same inputs share one recording (the test tiers call this)."""
    global SHARED
    if SHARED is None:
        SHARED = {}


def _in_own_thread(run: Callable[[], Recording]) -> Recording:
    """One program run on a thread of its own, with its own event loop, and the caller waits for it. Pulumi records a
    stack trace of every resource it registers (down to the thread's first frame), so a run under a test runner's
    deep stack cost 30% more (0.85 s against 0.65 s for the prod stack at 70 frames); and Pulumi's settings are
    context variables, so a run's settings, loop and leftover tasks end with its thread instead of reaching the
    next run."""
    import asyncio
    import threading

    outcome: dict[str, Any] = {}

    def target() -> None:
        loop = asyncio.new_event_loop()
        loop.set_exception_handler(_unretrieved)
        asyncio.set_event_loop(loop)
        try:
            outcome["recording"] = run()
        except BaseException as error:  # re-raised in the caller's thread
            outcome["error"] = error
        finally:
            asyncio.set_event_loop(None)
            loop.close()

    thread = threading.Thread(target=target, name="pulumi-program-under-mocks")
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["recording"]


def _run(config: dict[str, Any], stack: str, project_dir: Path, preview: bool, cluster: dict[str, Any] | None,
         proxy_subnets: list[dict[str, Any]] | None) -> Recording:
    values, secrets = config_strings(config)
    project = values.get("gcp:project", "mock-project")
    set_all_config(values, secrets)
    mocks = _Mocks(project, cluster, proxy_subnets)
    monitor = _RecordingMonitor(mocks)
    logger = logging.getLogger("vllm-gke.mocks")  # program warnings are reported by the caller
    logger.propagate = False
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
    pulumi.runtime.set_mocks(mocks, project=NAMESPACE, stack=stack, preview=preview, monitor=monitor,
                             logger=logger)
    pulumi_settings.SETTINGS.rpc_manager.clear()
    pulumi_settings.SETTINGS.outputs.clear()
    try:
        _sync_await(run_pulumi_func(lambda: runpy.run_path(str(project_dir / "__main__.py"),
                                                             run_name="__pulumi_main__")))
    except BaseException:
        # A failed program (a refusal at preview) leaves RPCs running; let them end here, or their errors would land
        # in the next run's RPC manager.
        _sync_await(_drain())
        gc.collect()  # the refusal's unretrieved tasks end here, under _unretrieved, not at random
        raise
    return Recording(stack, [r for r in monitor.recorded if r.type != "pulumi:pulumi:Stack"])


def _unretrieved(loop: Any, context: dict[str, Any]) -> None:
    """The exception handler of the loop a program runs on: the exception of a task nobody awaited is the refusal the
    caller already got, so it is dropped, not logged. asyncio's default handler logs it when the garbage collector
    finalizes the task, at any allocation; Python 3.11's traceback formatting calls ast.parse (caret anchors), and a
    parse nested inside another one (pytest's assertion rewriting) breaks the interpreter-wide AST state:
    `SystemError: AST constructor recursion depth mismatch` (python/cpython#106905 and the reports linked there)."""


async def _drain() -> None:
    import asyncio

    current = asyncio.current_task()
    for _ in range(100):
        pending = [t for t in asyncio.all_tasks() if t is not current and not t.done()]
        if not pending:
            break
        await asyncio.gather(*pending, return_exceptions=True)
    pulumi_settings.SETTINGS.rpc_manager.clear()
    pulumi_settings.SETTINGS.outputs.clear()
