"""Hydra schema nodes mirrored from the layers' frozen dataclasses, and the way back to those dataclasses.

The layers own their settings as frozen dataclasses that check themselves in `__post_init__`
(`EvalConfig`, `PolicyConfig`, `TrainerConfig`, ...). Hydra cannot use them as schema nodes directly:
OmegaConf makes a frozen dataclass a read-only node, so no YAML file or CLI override could set a
field, and tuple fields would come back as lists. `mirror(cls)` therefore derives a plain,
mutable dataclass with the same field names, types and defaults (tuples become lists, nested
dataclasses become their mirrors); the layers' field comments stay the single documentation.
`build(cls, data)` turns a resolved container back into the layer's dataclass, so every invariant
check runs, and names the config path in the error; it is a thin wrapper over the one dict-to-config
builder, `kernelflow.config_dicts.config_from_dict` (the dataclasses themselves accept no dicts).

So a typo (`trainer.epoch=3`) or a wrong type (`trainer.epochs=four`) fails when Hydra composes,
and a bad value (`lora.r=0`) fails in `build` before anything runs. This module knows OmegaConf's
type rules, not Hydra or any particular experiment (see `config.py`).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from functools import cache
from typing import Any, Union

from kernelflow.config_dicts import config_from_dict


class ConfigError(ValueError):
    """An experiment config that cannot be used; the message names the key and what to set."""


def _is_dataclass_type(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _node_type(tp: Any) -> Any:
    """The OmegaConf-friendly form of a field type: tuple[X, ...] -> list[X], dataclass -> its mirror."""
    origin = typing.get_origin(tp)
    if _is_dataclass_type(tp):
        return mirror(tp)
    if origin is tuple:
        args = [a for a in typing.get_args(tp) if a is not Ellipsis]
        return list[_node_type(args[0])] if args else list[Any]
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        inner = [_node_type(a) for a in args if a is not type(None)]
        if len(inner) == 1 and len(args) == 2:
            return typing.Optional[inner[0]]  # noqa: UP045 - OmegaConf reads typing.Optional
        return Any
    return tp


def _node_default(f: dataclasses.Field) -> dataclasses.Field:
    if f.default is not dataclasses.MISSING:
        value = f.default
        if isinstance(value, tuple):
            return dataclasses.field(default_factory=lambda v=value: list(v))
        return dataclasses.field(default=value)
    if f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
        if dataclasses.is_dataclass(value):
            node = mirror(type(value))
            return dataclasses.field(default_factory=lambda v=value, n=node: to_node(v, n))
        if isinstance(value, (tuple, list)):
            return dataclasses.field(default_factory=lambda v=value: list(v))
        return dataclasses.field(default_factory=f.default_factory)
    return dataclasses.field()


@cache
def mirror(cls: type, exclude: tuple[str, ...] = (), extra: tuple[tuple[str, Any, Any], ...] = (),
           defaults: tuple[tuple[str, Any], ...] = ()) -> type:
    """A mutable schema dataclass with `cls`'s fields (minus `exclude`, plus `extra` (name, type, default)),
    `defaults` ((name, value) pairs of plain values) replacing those fields' defaults."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted({name for name, _ in defaults} - names)
    if unknown:
        raise ValueError(f"mirror({cls.__name__}): defaults for unknown fields {unknown}")
    replaced = dict(defaults)
    specs: list[tuple[str, Any, dataclasses.Field]] = []
    for f in dataclasses.fields(cls):
        if f.name in exclude:
            continue
        default = dataclasses.field(default=replaced[f.name]) if f.name in replaced else _node_default(f)
        specs.append((f.name, _node_type(hints[f.name]), default))
    for name, tp, default in extra:
        specs.append((name, tp, dataclasses.field(default=default)))
    suffix = "Node" if not (exclude or extra) else "SchemaNode"
    node = dataclasses.make_dataclass(f"{cls.__name__}{suffix}", specs)
    node.__doc__ = f"Hydra schema node mirroring {cls.__module__}.{cls.__qualname__} (see its field comments)."
    node.__module__ = __name__
    return node


def to_node(value: Any, node: type) -> Any:
    """An instance of the mirror `node` holding `value`'s field values (used for schema defaults)."""
    kwargs = {}
    for f in dataclasses.fields(node):
        v = getattr(value, f.name)
        if dataclasses.is_dataclass(v):
            v = to_node(v, mirror(type(v)))
        elif isinstance(v, tuple):
            v = list(v)
        kwargs[f.name] = v
    return node(**kwargs)


def build(cls: type, data: Any, path: str, **fixed: Any) -> Any:
    """`cls` from the mapping `data`, through the one dict-to-config builder (kernelflow/config_dicts.py:
    nested dataclasses and tuples rebuilt, unknown keys refused); `fixed` fields are set by the caller.

    Unknown keys and failing invariants raise `ConfigError` naming `path` (e.g. `trainer`).
    """
    try:
        return config_from_dict(cls, data, path, **fixed)
    except (ValueError, TypeError) as exc:
        raise ConfigError(str(exc)) from None
