"""Build frozen config dataclasses from nested dicts (YAML) and `a.b.c=value` overrides.

Errors name the dotted key, the bad value and the allowed values; unknown keys get a did-you-mean.
Nothing here knows the training config itself: it works for any tree of frozen dataclasses.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, Union

import yaml


class ConfigError(ValueError):
    """A bad config key or value; the message names the dotted key and the fix."""


def parse_override(text: str) -> tuple[list[str], Any]:
    """Split `a.b.c=value` into (["a", "b", "c"], value), the value parsed as YAML.

    Raises:
        ConfigError: when there is no `=` or the key is empty.
    """
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override {text!r} must look like key=value with a dotted key, "
                          "e.g. train.steps=50 or algo=stare-o1")
    value = yaml.safe_load(raw) if raw.strip() else ""
    return key.split("."), value


def set_dotted(tree: dict[str, Any], path: list[str], value: Any) -> None:
    """Set `tree[path[0]][path[1]]... = value`, creating dicts on the way (in place).

    Raises:
        ConfigError: when a parent key holds a plain value instead of a section.
    """
    node = tree
    for depth, part in enumerate(path[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{'.'.join(path[:depth + 1])} holds {child!r}, not a section; "
                              f"cannot set {'.'.join(path)}")
        node = child
    node[path[-1]] = value


def deep_merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """Recursive dict merge; values in `extra` win. Returns a new dict."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def did_you_mean(word: str, options: list[str], *, prefix: str = "") -> str:
    """' Did you mean X?' for the closest option (shown with `prefix.`), or '' when none is close."""
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return f" Did you mean {_join(prefix, close[0])!r}?" if close else ""


def build(cls: type, data: Mapping[str, Any] | None, *, where: str = "", base: Any = None) -> Any:
    """Make a `cls` instance from a (possibly partial) dict.

    Args:
        cls: a dataclass type.
        data: field name -> value; nested dataclass fields take nested dicts.
        where: dotted prefix of this section, for error messages ("" at the root).
        base: an existing instance to start from (fields not in `data` keep its values);
            default: the dataclass defaults.

    Raises:
        ConfigError: unknown key (with did-you-mean), value of the wrong type or outside a Literal.
    """
    data = dict(data or {})
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key not in fields:
            hint = did_you_mean(key, list(fields), prefix=where)
            raise ConfigError(f"unknown config key {_join(where, key)!r}.{hint} "
                              f"Valid keys under {where or 'the root'}: {', '.join(sorted(fields))}")
        current = getattr(base, key) if base is not None else None
        kwargs[key] = coerce(hints[key], value, where=_join(where, key), current=current)
    try:
        return dataclasses.replace(base, **kwargs) if base is not None else cls(**kwargs)
    except ConfigError:
        raise
    except (ValueError, TypeError) as err:
        text = str(err)
        raise ConfigError(text if where and where in text else f"{where or 'config'}: {text}") from err


def coerce(tp: Any, value: Any, *, where: str, current: Any = None) -> Any:
    """Convert a YAML/CLI value to the annotated type `tp`, or raise `ConfigError` naming `where`."""
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where} is a section; set its keys, e.g. {where}.<key>=value "
                              f"(got {value!r})")
        return build(tp, value, where=where, base=current)
    if origin is Literal:
        allowed = typing.get_args(tp)
        if isinstance(value, str):   # case-insensitive for string choices ("o1" -> "O1")
            value = next((a for a in allowed if isinstance(a, str) and a.lower() == value.lower()), value)
        if value not in allowed:
            raise ConfigError(f"{where}={value!r} is not allowed; choose one of {list(allowed)}")
        return value
    if origin in (Union, types.UnionType):
        return _coerce_union(tp, value, where=where, current=current)
    if origin in (tuple, list):
        return _coerce_sequence(tp, value, where=where)
    if origin in (dict, Mapping) or tp in (dict, Mapping):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where} must be a mapping of key: value, got {value!r}")
        return dict(value)
    return _coerce_scalar(tp, value, where=where)


def _coerce_union(tp: Any, value: Any, *, where: str, current: Any) -> Any:
    args = typing.get_args(tp)
    if value is None and type(None) in args:
        return None
    errors = []
    for arg in args:
        if arg is type(None):
            continue
        try:
            return coerce(arg, value, where=where, current=current)
        except ConfigError as err:
            errors.append(str(err))
    raise ConfigError(f"{where}={value!r} fits none of the allowed forms: " + "; ".join(errors))


def _coerce_sequence(tp: Any, value: Any, *, where: str) -> Any:
    args = typing.get_args(tp)
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"{where} must be a list, got {value!r}")
    if len(args) == 2 and args[1] is Ellipsis:
        items = [coerce(args[0], v, where=f"{where}[{i}]") for i, v in enumerate(value)]
    elif args:
        if len(args) != len(value):
            raise ConfigError(f"{where} must have {len(args)} items, got {value!r}")
        pairs = enumerate(zip(args, value, strict=True))
        items = [coerce(a, v, where=f"{where}[{i}]") for i, (a, v) in pairs]
    else:
        items = list(value)
    return tuple(items) if typing.get_origin(tp) is tuple else items


_TRUE, _FALSE = {"true", "yes", "on", "1"}, {"false", "no", "off", "0"}


def _coerce_scalar(tp: Any, value: Any, *, where: str) -> Any:
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in _TRUE | _FALSE:
            return value.lower() in _TRUE
        raise ConfigError(f"{where} must be true or false, got {value!r}")
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ConfigError(f"{where} must be an integer, got {value!r}")
        try:
            return int(value)
        except ValueError:
            raise ConfigError(f"{where} must be an integer, got {value!r}") from None
    if tp is float:
        if isinstance(value, bool):
            raise ConfigError(f"{where} must be a number, got {value!r}")
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{where} must be a number, got {value!r}") from None
    if tp is str:
        if isinstance(value, (dict, list)):
            raise ConfigError(f"{where} must be a string, got {value!r}")
        return str(value)
    return value


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def to_dict(cfg: Any) -> dict[str, Any]:
    """Nested plain-dict form of a config tree (tuples become lists), for YAML/JSON dumps."""
    def plain(value: Any) -> Any:
        if dataclasses.is_dataclass(value):
            return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        if isinstance(value, Mapping):
            return {k: plain(v) for k, v in value.items()}
        return value
    return plain(cfg)
