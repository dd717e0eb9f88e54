"""Configs from dicts: the one place where a mapping (JSON, YAML, a flow's parameters) becomes a config.

The layers' settings are frozen dataclasses (`EvalConfig`, `EnvServerConfig`, `TrainerConfig`, ...)
that are strict: a nested field holds its dataclass, never a dict, and `__post_init__` says so. Code
that has a mapping calls `config_from_dict(cls, data, path)`, which builds the dataclass recursively:

- an unknown key is an error naming `path`, the class and the known keys (a typo fails loudly);
- a nested dataclass field given as a mapping is built the same way over that field's default
  instance, so a partial mapping keeps the defaults the outer class chose (`EnvServerConfig`'s
  `{"eval": {"shape": "full"}}` keeps `EvalConfig.served()`'s pre-warmed pool);
- a list for a tuple field becomes a tuple;
- `fixed` fields are set by the caller, as values (e.g. the trainer's already-built policy);
- a failing invariant (`__post_init__`) or a wrong argument is raised as ValueError prefixed by `path`.

Callers: `EnvServerConfig.from_dict` (the `--config` JSON of `kernelflow serve`), `flows.schema.build`
(Hydra's composed config), benchmarks that read stored configs. This module imports only the standard
library and knows no particular config.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, Union


def _is_dataclass_type(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _default_instance(f: dataclasses.Field) -> Any:
    """The field's default value (calling its factory), or None when it has none."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def _wants_tuple(tp: Any) -> bool:
    if typing.get_origin(tp) is tuple:
        return True
    return typing.get_origin(tp) in (Union, types.UnionType) and any(typing.get_origin(a) is tuple
                                                                     for a in typing.get_args(tp))


def config_from_dict(cls: type, data: Any, path: str = "", **fixed: Any) -> Any:
    """`cls` built from the mapping `data` (see the module docstring); `path` names it in errors (e.g. `trainer`)."""
    where = f"{path}: " if path else ""
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        data = {f.name: getattr(data, f.name) for f in dataclasses.fields(data) if f.init}
    if not isinstance(data, Mapping):
        raise ValueError(f"{where}expected a mapping of {cls.__name__} fields, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ValueError(f"{where}unknown key(s) {unknown} for {cls.__name__}; known keys: {sorted(fields)}")
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        tp = hints[name]
        if _is_dataclass_type(tp) and isinstance(value, Mapping):
            default = _default_instance(fields[name])
            if isinstance(default, tp):  # a partial mapping keeps the outer class's default for the rest
                value = {**{f.name: getattr(default, f.name) for f in dataclasses.fields(default) if f.init}, **value}
            value = config_from_dict(tp, value, f"{path}.{name}" if path else name)
        elif isinstance(value, list) and _wants_tuple(tp):
            value = tuple(value)
        kwargs[name] = value
    kwargs.update(fixed)
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{where}{exc}") from None


def check_nested(owner: Any, **expected: type) -> None:
    """For a config's `__post_init__`: a TypeError naming each nested field of `owner` that does not hold
    its dataclass (a dict included: mappings are built by `config_from_dict`, not by the dataclass)."""
    name = type(owner).__name__
    bad = [f"{field}={getattr(owner, field)!r} (must be a {tp.__name__}; build from a mapping with "
           f"kernelflow.config_dicts.config_from_dict({name}, data))"
           for field, tp in expected.items() if not isinstance(getattr(owner, field), tp)]
    if bad:
        raise TypeError(f"invalid {name}: " + "; ".join(bad))
