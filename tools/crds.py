"""Custom resources checked offline against vendored upstream schemas, their CEL rules included.

A plain JSON-Schema validator ignores `x-kubernetes-validations`; the API server evaluates them after defaulting.
This module does both steps the way the API server does for a create: the schema's defaults are filled in, the
object is validated against the schema (jsonschema), then every CEL rule on the path of a value present in the
object is evaluated with `self` bound to that value (cel-python). Transition rules (`oldSelf`) only apply to updates
and are skipped. CEL functions the Kubernetes library adds that cel-python lacks (`split`) are provided here.
The schemas, with their provenance, are in tools/crds/.
"""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path
from typing import Any

import celpy
import celpy.celtypes as celtypes
import jsonschema
import yaml

HERE = Path(__file__).resolve().parent / "crds"
SCHEMAS: dict[tuple[str, str], tuple[str, ...]] = {
    ("cloud.google.com/v1", "ComputeClass"): ("gke-computeclass-v1-gke1.33.json", "gke-computeclass-v1.json"),
    ("inference.networking.k8s.io/v1", "InferencePool"): ("gie-inferencepools.yaml",),
    ("gateway.networking.k8s.io/v1", "Gateway"): ("gateway-api-gateways.yaml",),
    ("gateway.networking.k8s.io/v1", "HTTPRoute"): ("gateway-api-httproutes.yaml",),
    ("networking.gke.io/v1", "HealthCheckPolicy"): ("gke-healthcheckpolicies.yaml",),
    ("networking.gke.io/v1", "GCPBackendPolicy"): ("gke-gcpbackendpolicies.yaml",),
}
"""(apiVersion, kind) -> schema files under tools/crds/ the object must satisfy, each."""


def _split(text: Any, separator: Any) -> celtypes.ListType:
    """Kubernetes' CEL string library: `'a-b'.split('-')` is ['a', 'b']."""
    return celtypes.ListType([celtypes.StringType(part) for part in str(text).split(str(separator))])


FUNCTIONS = {"split": _split}


@cache
def _schema(name: str, api_version: str = "") -> dict[str, Any]:
    """A JSON Schema file as it is, or a CRD's `openAPIV3Schema` for the version `api_version` names."""
    text = (HERE / name).read_text()
    if name.endswith(".json"):
        return json.loads(text)
    crd = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # libyaml's safe loader where built
    version = api_version.rsplit("/", 1)[-1]
    for served in crd["spec"]["versions"]:
        if served["name"] == version:
            return served["schema"]["openAPIV3Schema"]
    raise KeyError(f"{name} serves no version {version}")


@cache
def _program(rule: str) -> Any:
    env = celpy.Environment()
    return env.program(env.compile(rule), functions=FUNCTIONS)


def with_defaults(schema: dict[str, Any], value: Any) -> Any:
    """`value` with the schema's defaults filled in where a field is absent (structural defaulting)."""
    if isinstance(value, dict):
        out = dict(value)
        for key, sub in (schema.get("properties") or {}).items():
            if key not in out and "default" in sub:
                out[key] = copy.deepcopy(sub["default"])
            if key in out:
                out[key] = with_defaults(sub, out[key])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key in out:
                if key not in (schema.get("properties") or {}):
                    out[key] = with_defaults(extra, out[key])
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [with_defaults(schema["items"], item) for item in value]
    return value


def cel_problems(schema: dict[str, Any], value: Any, path: str = "") -> list[str]:
    """One line per CEL rule on `schema` (and below it) that `value` breaks."""
    problems = []
    for check in schema.get("x-kubernetes-validations") or []:
        rule = check["rule"]
        if "oldSelf" in rule:
            continue  # a transition rule: only evaluated on update
        try:
            result = _program(rule).evaluate({"self": celpy.json_to_cel(value)})
        except celpy.CELEvalError as exc:
            result = exc
        if isinstance(result, celpy.CELEvalError):
            problems.append(f"{path or '.'}: CEL rule could not be evaluated ({rule}): {result.args[0]}")
        elif not bool(result):
            problems.append(f"{path or '.'}: {check.get('message') or 'failed'} ({rule})")
    if isinstance(value, dict):
        for key, sub in (schema.get("properties") or {}).items():
            if key in value:
                problems += cel_problems(sub, value[key], f"{path}.{key}")
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key, item in value.items():
                if key not in (schema.get("properties") or {}):
                    problems += cel_problems(extra, item, f"{path}.{key}")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            problems += cel_problems(schema["items"], item, f"{path}[{index}]")
    return problems


def problems(obj: dict[str, Any]) -> list[str]:
    """Why the API server would refuse `obj` (a custom resource of a kind in SCHEMAS); [] when it would take it.
    Each line names the schema file, the path and the upstream message."""
    files = SCHEMAS.get((obj.get("apiVersion", ""), obj.get("kind", "")))
    if files is None:
        raise KeyError(f"no vendored schema for {obj.get('apiVersion')} {obj.get('kind')}")
    name = (obj.get("metadata") or {}).get("name", "?")
    found = []
    for file in files:
        schema = _schema(file, obj.get("apiVersion", ""))
        defaulted = with_defaults(schema, obj)
        validator = jsonschema.Draft7Validator(schema)
        for error in sorted(validator.iter_errors(defaulted), key=lambda e: list(e.absolute_path)):
            where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path) or "."
            found.append(f"{obj['kind']} {name} ({file}): {where}: {error.message}")
        found += [f"{obj['kind']} {name} ({file}): {line}" for line in cel_problems(schema, defaulted)]
    return found


def checked_kinds() -> set[tuple[str, str]]:
    return set(SCHEMAS)
