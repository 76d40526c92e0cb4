"""How a stack-config validation error becomes one line: pydantic's error location rendered as the camelCase key
path (`accelerator.fallbacks[0].type`), the value at that path, and a reason that names what is accepted, with every
bound of a number field. planner/config.py reads each `vllm-gke:` section through `section`."""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from planner.errors import ConfigError
from planner.stack_schema import (
    Section,
)


def _field(model: type[BaseModel], loc: tuple[Any, ...]) -> tuple[str, Any]:
    """(camelCase dotted name, FieldInfo or None) of an error location inside `model`."""
    info = model.model_fields.get(str(loc[0])) if loc else None
    if info is None:  # located by alias
        info = next((f for f in model.model_fields.values() if f.alias == loc[0]), None) if loc else None
    name = (info.alias if info is not None and info.alias else str(loc[0])) if loc else ""
    return name, info


def _bounds(info: Any) -> dict[str, float]:
    found: dict[str, float] = {}
    for item in getattr(info, "metadata", []) or []:
        for attr in ("gt", "ge", "lt", "le"):
            if getattr(item, attr, None) is not None:
                found[attr] = getattr(item, attr)
    return found


def _base_type(annotation: Any) -> Any:
    """int for `Int`, `Int | None` and the like: the type under Optional and Annotated."""
    if typing.get_origin(annotation) is typing.Annotated:
        return _base_type(typing.get_args(annotation)[0])
    options = [t for t in typing.get_args(annotation) if t is not type(None)]
    if options and typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return _base_type(options[0])
    return annotation


def interval(bounds: dict[str, float], integer: bool) -> str:
    """A field's bounds, both of them where it has two: `from 1 to 5`, `>= 1`, `(0.1, 0.99]`."""
    low = bounds.get("ge", bounds.get("gt"))
    high = bounds.get("le", bounds.get("lt"))
    if integer and "ge" in bounds and "le" in bounds:
        return f"from {int(bounds['ge'])} to {int(bounds['le'])}"
    if low is not None and high is not None:
        return f"in {'[' if 'ge' in bounds else '('}{low:g}, {high:g}{']' if 'le' in bounds else ')'}"
    if low is not None:
        return f"{'>=' if 'ge' in bounds else '>'} {low:g}"
    return f"{'<=' if 'le' in bounds else '<'} {high:g}"


def _reason(error: dict[str, Any], info: Any, model: type[BaseModel]) -> str:
    """The one-line reason for a pydantic error, in the words this project has always used; a number field's
    message gives every bound it has, so a value above the upper one is not told only the lower."""
    kind, bounds = error["type"], _bounds(info)
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        accepted = sorted(f.alias or n for n, f in model.model_fields.items())
        return f"unknown key; accepted keys: {', '.join(accepted)}"
    if kind == "literal_error":
        choices = re.findall(r"'([^']*)'", error["ctx"]["expected"])
        return f"accepted: {', '.join(choices)}"
    base = _base_type(info.annotation) if info is not None else None
    # Any wrong value of a number field, a non-number too; strings must be ASCII digits (stack_schema.ASCII_INT).
    if base is int and bounds:
        return f"expected an integer {interval(bounds, True)} in ASCII digits 0-9"
    if base is float and bounds:
        return f"expected a number {interval(bounds, False)} in ASCII digits 0-9"
    if kind == "value_error":
        return str(error["ctx"]["error"])
    return error["msg"].removeprefix("Value error, ")


def _nested(info: Any) -> type[BaseModel] | None:
    """The model a field holds (itself, optional, or as the items of a tuple or list), None for plain values."""
    annotation = info.annotation if info is not None else None
    while True:
        if typing.get_origin(annotation) is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
            continue
        options = [t for t in typing.get_args(annotation) if t is not type(None) and t is not Ellipsis]
        if typing.get_origin(annotation) in (typing.Union, types.UnionType, tuple, list) and len(options) == 1:
            annotation = options[0]
            continue
        break
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _located(model: type[BaseModel], loc: tuple[Any, ...], value: Any) -> tuple[str, Any, type[BaseModel], Any]:
    """(key path in camelCase, e.g. `fallbacks[0].type`; the field's info; the model the field is in; the value at
    that path) of a pydantic error location. Parts past a plain field (pydantic's union member tags) are dropped,
    list positions kept."""
    path, info, owner, current, shown = "", None, model, model, value
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
            shown = shown[part] if isinstance(shown, (list, tuple)) and 0 <= part < len(shown) else None
            continue
        if current is None:
            continue
        name, info = _field(current, (part,))
        owner = current
        path += f"{'.' if path else ''}{name}"
        shown = shown.get(name, shown.get(part)) if isinstance(shown, Mapping) else None
        current = _nested(info)
    return path, info, owner, shown


def section(key: str, model: type[Section], value: Any) -> Any:
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        raise ConfigError(key, value, "expected an object (a YAML mapping)")
    try:
        return model.model_validate(dict(value))
    except ValidationError as exc:
        error = exc.errors()[0]
        path, info, owner, shown = _located(model, error["loc"], dict(value))
        if error["type"] == "missing":
            shown = None
        elif shown is None and error["type"] != "extra_forbidden":
            shown = error.get("input")
        raise ConfigError(f"{key}.{path}", shown, _reason(error, info, owner)) from None
