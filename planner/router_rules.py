"""What a real cluster does with the routing objects (serving.routing epp / gke-gateway), checked without one.

Each rule names the component that acts on the objects at run time and its source; each returns one line per
violation. Pure Python over plain dicts; the facts come from planner/routing.py, never from the builders:
- awaits:     Pulumi waits for a Deployment to be Available (pulumi-kubernetes' Deployment await), and an endpoint
              picker in pool mode is ready only once it has read its InferencePool (llm-d-router
              cmd/epp/runner/health.go, pkg/epp/datastore): the pool must be created before the picker, never after.
- reach:      Google's health checkers probe from HEALTH_CHECK_RANGES (Cloud Load Balancing "Firewall rules"): the
              NetworkPolicies of the leaders an InferencePool selects and of its endpoint picker must admit them,
              or every backend stays UNHEALTHY and requests get 503.
- rbac:       the picker's ServiceAccount may list and watch what it reads in its mode (routing.EPP_POOL_READS:
              llm-d-router pkg/epp/server/controller_config.go; without list/watch its cache never syncs).
- envoy:      the router's bootstrap raises every cluster's circuit breakers to ENVOY_MAX_REQUESTS (Envoy's default
              1,024 answers 503 above that), removes a client's own destination header before the picker runs
              (Envoy's ORIGINAL_DST does not sanitize it), and the pod drains before SIGTERM (Envoy "Draining":
              listeners close at once on shutdown): a preStop of at least the endpoint removal plus the shorter of
              the route timeout and the leaders' drain, a grace period past it, no Recreate rollout.
- selection:  an InferencePool and a standalone picker select exactly a LeaderWorkerSet's leaders, the pool's ports
              and references resolve, and one picker runs the approximate prefix scorer (its index is per pod).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from planner import routing as rt
from planner.commands import DRAIN_SECONDS, flag_value
from planner.labels import LWS_NAME_LABEL, LWS_WORKER_INDEX_LABEL
from planner.scheduling_rules import _where as where_of
from planner.scheduling_rules import pod_templates
from planner.versions import ENVOY_IMAGE, EPP_IMAGE, unmirrored

ObjectKey = tuple[str, str, str]
"""(kind, namespace, name) of a rendered object."""
SKIP_AWAIT = "pulumi.com/skipAwait"


def object_key(obj: Mapping[str, Any]) -> ObjectKey:
    meta = obj.get("metadata") or {}
    return str(obj.get("kind", "")), str(meta.get("namespace", "") or ""), str(meta.get("name", ""))


def _where(key: ObjectKey) -> str:
    kind, ns, name = key
    return f"{kind} {ns}/{name}" if ns else f"{kind} {name}"


def _deployments(objects: Iterable[dict[str, Any]]) -> Iterable[tuple[dict[str, Any], dict[str, Any]]]:
    """(Deployment, its pod spec) of every Deployment (scheduling_rules.pod_templates)."""
    return ((t.owner, t.spec) for t in pod_templates(objects) if t.owner.get("kind") == "Deployment")


def _is(container: dict[str, Any], image: str) -> bool:
    return unmirrored(container.get("image", "")) == unmirrored(image)


# ---------------------------------------------------------------------------------------------- awaits

def awaits(objects: list[dict[str, Any]], waits: Mapping[ObjectKey, set[ObjectKey]]) -> list[str]:
    """A picker Deployment in pool mode that Pulumi awaits must wait for its InferencePool, and the pool must not
    wait for it (`waits`: each object -> every object it waits for, transitively, from the program's dependencies)."""
    problems = []
    for owner, spec in _deployments(objects):
        annotations = (owner.get("metadata") or {}).get("annotations") or {}
        if str(annotations.get(SKIP_AWAIT, "")).lower() == "true":
            continue
        key = object_key(owner)
        for container in spec.get("containers") or []:
            pool = flag_value(container.get("args") or [], "--pool-name") if _is(container, EPP_IMAGE) else None
            if pool is None:
                continue
            pool_key = ("InferencePool", key[1], pool)
            if key in waits.get(pool_key, set()):
                problems.append(f"awaits: {_where(pool_key)} waits for {_where(key)}, which Pulumi awaits until its "
                                "picker is ready, and the picker is ready only once it has read that pool: `pulumi "
                                "up` deadlocks until its timeout")
            elif pool_key not in waits.get(key, set()):
                problems.append(f"awaits: {_where(key)} does not wait for {_where(pool_key)}: its picker reports "
                                "not ready (and fails liveness) until the pool exists")
    return problems


# ---------------------------------------------------------------------------------------------- reach

def _selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A Kubernetes label selector (matchLabels, matchExpressions) against a pod's labels; {} selects all."""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if (op == "In" and labels.get(key) not in values) or (op == "NotIn" and labels.get(key) in values) or \
                (op == "Exists" and key not in labels) or (op == "DoesNotExist" and key in labels):
            return False
    return True


def _peer_admits(peer: dict[str, Any], source: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bool:
    block = peer.get("ipBlock")
    if not block:
        return False  # pod and namespace selectors match pods, not a load balancer's probes
    try:
        cidr = ipaddress.ip_network(block.get("cidr", ""), strict=False)
        excluded = [ipaddress.ip_network(e, strict=False) for e in block.get("except") or []]
    except ValueError:
        return False
    return source.version == cidr.version and source.subnet_of(cidr) and not any(source.overlaps(e)
                                                                                 for e in excluded)


def admits(objects: list[dict[str, Any]], namespace: str, labels: Mapping[str, str], ports: set[Any],
           source: str) -> bool:
    """Whether the NetworkPolicies of `namespace` let `source` (a CIDR) reach a pod with `labels` on one of `ports`
    (its number and name). With no Ingress policy selecting the pod, everything is admitted (Kubernetes
    NetworkPolicy semantics: policies are allow-lists, unioned)."""
    network = ipaddress.ip_network(source, strict=False)
    selecting = [p for p in objects if p.get("kind") == "NetworkPolicy"
                 and (p.get("metadata") or {}).get("namespace", "") == namespace
                 and "Ingress" in ((p.get("spec") or {}).get("policyTypes") or ["Ingress"])
                 and _selects((p.get("spec") or {}).get("podSelector"), labels)]
    if not selecting:
        return True
    for policy in selecting:
        for rule in (policy.get("spec") or {}).get("ingress") or []:
            rule_ports = rule.get("ports") or []
            if rule_ports and not any(p.get("port") in ports or p.get("port") is None for p in rule_ports):
                continue
            peers = rule.get("from") or []
            if not peers or any(_peer_admits(peer, network) for peer in peers):
                return True
    return False


def _pods(objects: list[dict[str, Any]], namespace: str, selector: Mapping[str, str]) -> list[tuple[dict, dict]]:
    """(labels as the pod runs with them, pod spec) of every template in `namespace` a Service or pool selector
    picks: Deployment pods, and LeaderWorkerSet leaders with the labels the LWS controller adds."""
    found = []
    for obj in objects:
        meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
        if meta.get("namespace", "") != namespace:
            continue
        if obj.get("kind") == "Deployment":
            template = spec.get("template") or {}
            labels = (template.get("metadata") or {}).get("labels") or {}
        elif obj.get("kind") == "LeaderWorkerSet":
            lwt = spec.get("leaderWorkerTemplate") or {}
            template = lwt.get("leaderTemplate") or lwt.get("workerTemplate") or {}
            labels = {**((template.get("metadata") or {}).get("labels") or {}), LWS_NAME_LABEL: meta.get("name", ""),
                      LWS_WORKER_INDEX_LABEL: "0"}
        else:
            continue
        if _selects({"matchLabels": dict(selector)}, labels):
            found.append((labels, template.get("spec") or {}))
    return found


def _port_names(spec: dict[str, Any], number: Any) -> set[Any]:
    """A container port's number with its name (policies may name either)."""
    names = {number}
    for container in spec.get("containers") or []:
        for port in container.get("ports") or []:
            if number in (port.get("containerPort"), port.get("name")):
                names |= {port.get("containerPort"), port.get("name")}
    return names - {None}


def reach(objects: list[dict[str, Any]]) -> list[str]:
    """Google's health checkers reach every backend of an InferencePool on its health-check port, and its endpoint
    picker on the ext_proc and gRPC health ports (routing.HEALTH_CHECK_RANGES)."""
    problems = []
    checks = {(o["metadata"].get("namespace", ""), ((o.get("spec") or {}).get("targetRef") or {}).get("name")): o
              for o in objects if o.get("kind") == "HealthCheckPolicy"}
    services = {(o["metadata"].get("namespace", ""), o["metadata"].get("name")): o for o in objects
                if o.get("kind") == "Service"}
    for pool in (o for o in objects if o.get("kind") == "InferencePool"):
        ns, name, spec = pool["metadata"].get("namespace", ""), pool["metadata"].get("name"), pool.get("spec") or {}
        config = (((checks.get((ns, name)) or {}).get("spec") or {}).get("default") or {}).get("config") or {}
        fixed = (config.get("httpHealthCheck") or {})
        port = fixed.get("port") if fixed.get("portSpecification") == "USE_FIXED_PORT" else \
            ((spec.get("targetPorts") or [{}])[0]).get("number")
        targets = [("leader", labels, pod, port) for labels, pod in
                   _pods(objects, ns, (spec.get("selector") or {}).get("matchLabels") or {})]
        ref = spec.get("endpointPickerRef") or {}
        service = (services.get((ns, ref.get("name"))) or {}).get("spec") or {}
        number = (ref.get("port") or {}).get("number")
        target = next((p.get("targetPort", p.get("port")) for p in service.get("ports") or []
                       if p.get("port") == number), number)
        for labels, pod in _pods(objects, ns, service.get("selector") or {}) if service else []:
            targets += [("endpoint picker", labels, pod, p) for p in (target, rt.EPP_HEALTH_PORT)]
        for what, labels, pod, number in targets:
            ports = _port_names(pod, number)
            blocked = [cidr for cidr in rt.HEALTH_CHECK_RANGES if not admits(objects, ns, labels, ports, cidr)]
            if blocked:
                problems.append(f"reach: {what} pods of InferencePool {ns}/{name} do not admit Google's health "
                                f"checkers ({', '.join(blocked)}) on port {number}: the load balancer marks them "
                                "UNHEALTHY and answers 503")
    return problems


# ---------------------------------------------------------------------------------------------- rbac

def _granted(objects: list[dict[str, Any]], namespace: str, account: str) -> set[tuple[str, str, str]]:
    """(group, resource, verb) the ServiceAccount's Roles and ClusterRoles grant in `namespace`."""
    roles = {(o.get("kind"), (o.get("metadata") or {}).get("namespace", "") if o.get("kind") == "Role" else "",
              (o.get("metadata") or {}).get("name")): o for o in objects if o.get("kind") in ("Role", "ClusterRole")}
    granted: set[tuple[str, str, str]] = set()
    for binding in objects:
        kind = binding.get("kind")
        if kind not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        bound_ns = (binding.get("metadata") or {}).get("namespace", "")
        if kind == "RoleBinding" and bound_ns != namespace:
            continue
        if not any(s.get("kind") == "ServiceAccount" and s.get("name") == account
                   and s.get("namespace", bound_ns) == namespace for s in binding.get("subjects") or []):
            continue
        ref = binding.get("roleRef") or {}
        role = roles.get((ref.get("kind"), bound_ns if ref.get("kind") == "Role" else "", ref.get("name"))) or {}
        for rule in role.get("rules") or []:
            for group in rule.get("apiGroups") or []:
                for resource in rule.get("resources") or []:
                    for verb in rule.get("verbs") or []:
                        granted.add((group, resource, verb))
    return granted


def _allows(granted: set[tuple[str, str, str]], group: str, resource: str, verb: str) -> bool:
    return any((g in (group, "*")) and (r in (resource, "*")) and (v in (verb, "*")) for g, r, v in granted)


def rbac(objects: list[dict[str, Any]]) -> list[str]:
    """Every endpoint picker's ServiceAccount reads what the picker reads in its mode."""
    problems = []
    for owner, spec in _deployments(objects):
        ns = (owner.get("metadata") or {}).get("namespace", "")
        for container in spec.get("containers") or []:
            if not _is(container, EPP_IMAGE):
                continue
            pool = flag_value(container.get("args") or [], "--pool-name") is not None
            account = spec.get("serviceAccountName") or "default"
            granted = _granted(objects, ns, account)
            missing = [f"{resource}.{group or 'core'}" for group, resource in
                       (rt.EPP_POOL_READS if pool else rt.EPP_SELECTOR_READS)
                       if not all(_allows(granted, group, resource, verb) for verb in rt.READ_VERBS)]
            if missing:
                problems.append(f"rbac: {_where(object_key(owner))} endpoint picker ({'pool' if pool else 'selector'} "
                                f"mode) runs as {ns}/{account}, which may not get, list and watch "
                                f"{', '.join(missing)}: its informers never sync and it crash-loops")
    return problems


# ---------------------------------------------------------------------------------------------- envoy

def _bootstrap(objects: list[dict[str, Any]], namespace: str, spec: dict[str, Any],
               container: dict[str, Any]) -> dict[str, Any] | None:
    """The Envoy bootstrap the container reads (`-c PATH` from a mounted ConfigMap), None when not rendered."""
    path = flag_value(container.get("args") or [], "-c") or flag_value(container.get("args") or [], "--config-path")
    if not path:
        return None
    volumes = {v.get("name"): (v.get("configMap") or {}).get("name") for v in spec.get("volumes") or []}
    for mount in container.get("volumeMounts") or []:
        directory = mount.get("mountPath", "").rstrip("/")
        if path.startswith(f"{directory}/"):
            config = volumes.get(mount.get("name"))
            for obj in objects:
                meta = obj.get("metadata") or {}
                if obj.get("kind") == "ConfigMap" and (meta.get("namespace", ""), meta.get("name")) == (namespace,
                                                                                                          config):
                    text = (obj.get("data") or {}).get(path[len(directory) + 1:])
                    return yaml.safe_load(text) if text else None
    return None


def _seconds(duration: Any) -> float:
    text = str(duration or "0s")
    return float(text[:-1]) if text.endswith("s") else float(text)


def _managers(bootstrap: dict[str, Any]) -> Iterable[dict[str, Any]]:
    for listener in (bootstrap.get("static_resources") or {}).get("listeners") or []:
        for chain in listener.get("filter_chains") or []:
            for network_filter in chain.get("filters") or []:
                config = network_filter.get("typed_config") or {}
                if str(config.get("@type", "")).endswith("HttpConnectionManager"):
                    yield config


def _routes(manager: dict[str, Any]) -> list[dict[str, Any]]:
    return [route for host in ((manager.get("route_config") or {}).get("virtual_hosts") or [])
            for route in host.get("routes") or []]


def _strips_destination(filters: list[dict[str, Any]]) -> bool:
    """A header_mutation filter before ext_proc removes routing.DESTINATION_HEADER from the request."""
    for http_filter in filters:
        config = http_filter.get("typed_config") or {}
        kind = str(config.get("@type", ""))
        if kind.endswith("ExternalProcessor"):
            return False
        if kind.endswith("header_mutation.v3.HeaderMutation"):
            removed = [m.get("remove") for m in ((config.get("mutations") or {}).get("request_mutations") or [])]
            if rt.DESTINATION_HEADER in removed:
                return True
    return False


def _sleep(container: dict[str, Any]) -> int:
    return int((((container.get("lifecycle") or {}).get("preStop") or {}).get("sleep") or {}).get("seconds", 0))


def envoy(objects: list[dict[str, Any]]) -> list[str]:
    """The router pods' Envoy bootstrap and shutdown, as Envoy and the kubelet act on them."""
    problems = []
    for owner, spec in _deployments(objects):
        ns, where = (owner.get("metadata") or {}).get("namespace", ""), _where(object_key(owner))
        containers = spec.get("containers") or []
        proxies = [c for c in containers if _is(c, ENVOY_IMAGE)]
        for container in proxies:
            bootstrap = _bootstrap(objects, ns, spec, container)
            if bootstrap is None:
                problems.append(f"envoy: {where} container {container.get('name')}: no rendered bootstrap to check")
                continue
            for cluster in (bootstrap.get("static_resources") or {}).get("clusters") or []:
                thresholds = ((cluster.get("circuit_breakers") or {}).get("thresholds") or [{}])[0]
                low = [f"{k} {thresholds.get(k, 1024):,}" for k in ("max_connections", "max_pending_requests",
                                                                     "max_requests")
                       if int(thresholds.get(k, 1024)) < rt.ENVOY_MAX_REQUESTS]
                if low:
                    problems.append(f"envoy: {where} cluster {cluster.get('name')} circuit breakers {', '.join(low)} "
                                    f"(Envoy's default is 1,024): above that many concurrent requests Envoy answers "
                                    f"503; set {rt.ENVOY_MAX_REQUESTS:,}")
            timeouts = [0.0]
            for manager in _managers(bootstrap):
                routes = _routes(manager)
                timeouts += [_seconds((r.get("route") or {}).get("timeout")) for r in routes]
                picked = any(h.get("name") == rt.DESTINATION_HEADER for r in routes
                             for h in (r.get("match") or {}).get("headers") or [])
                if picked and not _strips_destination(manager.get("http_filters") or []):
                    problems.append(f"envoy: {where}: a client's own {rt.DESTINATION_HEADER} header reaches the "
                                    "ORIGINAL_DST route whenever the picker fails open (Envoy does not sanitize it): "
                                    "remove it in a header_mutation filter before ext_proc")
            need = rt.ENDPOINT_REMOVAL_SECONDS + min(max(timeouts), DRAIN_SECONDS)
            if _sleep(container) < need:
                problems.append(f"envoy: {where} container {container.get('name')} drains {_sleep(container)} s "
                                f"before SIGTERM, when Envoy closes its listeners at once; running requests need "
                                f"{need} s (endpoint removal {rt.ENDPOINT_REMOVAL_SECONDS} s + the shorter of the "
                                f"route timeout and the leaders' {DRAIN_SECONDS} s drain)")
        pickers = [c for c in containers if _is(c, EPP_IMAGE)]
        if proxies and pickers and min(map(_sleep, pickers)) < max(map(_sleep, proxies)):
            problems.append(f"envoy: {where}: the endpoint picker stops before Envoy has drained: the ext_proc "
                            "streams of running requests break")
        drains = [_sleep(c) for c in [*proxies, *pickers]]
        if not drains:
            continue
        grace = int(spec.get("terminationGracePeriodSeconds", 30))
        if grace <= max(drains):
            problems.append(f"envoy: {where} terminationGracePeriodSeconds {grace} does not outlast its "
                            f"{max(drains)} s preStop drain: the kubelet kills the router mid-drain")
        if max(drains) and ((owner.get("spec") or {}).get("strategy") or {}).get("type") == "Recreate":
            problems.append(f"envoy: {where} rolls out with Recreate: there is no router for the whole "
                            f"{max(drains)} s drain; use RollingUpdate with maxUnavailable 0")
    return problems


def check(objects: list[dict[str, Any]], waits: Mapping[ObjectKey, set[ObjectKey]] | None = None) -> list[str]:
    """Every rule above; `awaits` only where the program's dependencies are known."""
    return [*(awaits(objects, waits) if waits is not None else []), *reach(objects), *rbac(objects),
            *envoy(objects)]


# ---------------------------------------------------------------------------------------------- selection

def _leader_selectors(objects: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """namespace/LWS name -> the labels that select exactly that LeaderWorkerSet's leader pods."""
    return {f"{(o.get('metadata') or {}).get('namespace', '')}/{(o.get('metadata') or {}).get('name')}":
            {LWS_NAME_LABEL: (o.get("metadata") or {}).get("name", ""), LWS_WORKER_INDEX_LABEL: "0"}
            for o in objects if o.get("kind") == "LeaderWorkerSet"}


def _leader_ports(objects: list[dict[str, Any]], namespace: str, lws_name: str) -> set[Any]:
    """Port numbers and names of the leader container(s) of a LeaderWorkerSet (its leaderTemplate, or the
    workerTemplate of a one-pod group, whose only pod is the leader)."""
    found: set[Any] = set()
    for obj in objects:
        meta = obj.get("metadata") or {}
        if obj.get("kind") != "LeaderWorkerSet" or (meta.get("namespace", ""), meta.get("name")) != \
                (namespace, lws_name):
            continue
        lwt = (obj.get("spec") or {}).get("leaderWorkerTemplate") or {}
        leader = lwt.get("leaderTemplate") or lwt.get("workerTemplate") or {}
        for container in (leader.get("spec") or {}).get("containers") or []:
            for port in container.get("ports") or []:
                found |= {port.get("containerPort"), port.get("name")}
    return found - {None}


def selection(objects: list[dict[str, Any]]) -> list[str]:
    """Inference-aware routing objects (serving.routing epp / gke-gateway) point where they must:
    - an InferencePool and a standalone EPP (`--endpoint-selector`) select exactly a LeaderWorkerSet's leaders
      (`leaderworkerset.sigs.k8s.io/worker-index: "0"`): a multi-node group's workers run Ray, not the API, and a
      request sent there fails (llm-d/llm-d-router issue #220; KServe's multi-node LLMInferenceService selects
      leaders the same way); the pool's target port is a port of the leader container;
    - the pool's endpointPickerRef names a Service of this namespace with that port; HTTPRoute backends and the
      HealthCheckPolicy / GCPBackendPolicy targets name an InferencePool that exists (GKE ignores a policy whose
      target is missing, and the load balancer then health-checks `/`, where vLLM answers 404);
    - more than one EPP replica never runs the approximate prefix scorer (its index lives in each pod: llm-d's
      guidance is one active replica for it).
    Pure checks over the rendered objects; planner/routing.py has the sources of the values."""
    problems: list[str] = []
    leaders = _leader_selectors(objects)
    pools = {(o["metadata"].get("namespace", ""), o["metadata"].get("name")): o for o in objects
             if o.get("kind") == "InferencePool"}
    services = {(o["metadata"].get("namespace", ""), o["metadata"].get("name")): o for o in objects
                if o.get("kind") == "Service"}
    for (ns, _name), pool in pools.items():
        spec = pool.get("spec") or {}
        selector = (spec.get("selector") or {}).get("matchLabels") or {}
        if selector not in leaders.values():
            problems.append(f"routing: {where_of(pool)} selects {selector}, not the leaders of a LeaderWorkerSet "
                            f"({', '.join(str(v) for v in leaders.values()) or 'none rendered'})")
            continue
        ports = _leader_ports(objects, ns, selector[LWS_NAME_LABEL])
        for target in spec.get("targetPorts") or []:
            if target.get("number") not in ports:
                problems.append(f"routing: {where_of(pool)} targets port {target.get('number')}, which the leader "
                                "container does not declare")
        ref = spec.get("endpointPickerRef") or {}
        service = services.get((ns, ref.get("name")))
        number = (ref.get("port") or {}).get("number")
        if service is None or number not in {p.get("port") for p in (service.get("spec") or {}).get("ports") or []}:
            problems.append(f"routing: {where_of(pool)} endpointPickerRef {ref.get('name')}:{number} is no Service "
                            "port of its namespace")
    for obj in objects:
        kind, ns = obj.get("kind"), (obj.get("metadata") or {}).get("namespace", "")
        refs = []
        if kind == "HTTPRoute":
            refs = [b for rule in (obj.get("spec") or {}).get("rules") or [] for b in rule.get("backendRefs") or []
                    if b.get("kind") == "InferencePool"]
        elif kind in ("HealthCheckPolicy", "GCPBackendPolicy"):
            refs = [(obj.get("spec") or {}).get("targetRef") or {}]
        for ref in refs:
            if (ref.get("namespace", ns), ref.get("name")) not in pools:
                problems.append(f"routing: {where_of(obj)} refers to InferencePool {ref.get('name')}, which is not "
                                "rendered")
    configs = {(o["metadata"].get("namespace", ""), o["metadata"].get("name")): o.get("data") or {}
               for o in objects if o.get("kind") == "ConfigMap"}
    for template in pod_templates(objects):
        owner = template.owner
        ns = (owner.get("metadata") or {}).get("namespace", "")
        for container in template.spec.get("containers") or []:
            if unmirrored(container.get("image", "")) != unmirrored(EPP_IMAGE):
                continue
            args = container.get("args") or []
            selector = rt.selector_flag(args)
            if selector is not None and selector not in leaders.values():
                problems.append(f"routing: {template.where} endpoint picker selects {selector}, not the leaders of "
                                "a LeaderWorkerSet")
            volumes = {v.get("name"): (v.get("configMap") or {}).get("name") for v in template.spec.get("volumes")
                       or []}
            mounted = [volumes.get(m.get("name")) for m in container.get("volumeMounts") or []
                       if m.get("mountPath") == "/config"]
            text = "".join((configs.get((ns, cm)) or {}).get(rt.CONFIG_FILE, "") for cm in mounted)
            replicas = int((owner.get("spec") or {}).get("replicas", 1))
            if replicas > 1 and "prefix-cache-scorer" in text:
                problems.append(f"routing: {template.where} runs {replicas} endpoint pickers with the approximate "
                                "prefix scorer, whose index is per pod")
    return problems
