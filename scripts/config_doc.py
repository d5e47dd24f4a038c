"""docs/config.md from the config dataclasses: every key, its type, default and field docstring.

A development script, not part of the installed package. The field docstrings are the single
source; `python scripts/config_doc.py > docs/config.md` regenerates the page (`--readme` rewrites
the README's table) and a test fails when either is stale.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import pathlib
import sys
import textwrap
import typing
from typing import Any

import stare
from training.config import TrainConfig

HEADER = """# Config reference

Generated from the field docstrings of `training/config_sections.py` and `stare/config.py` by
`python scripts/config_doc.py > docs/config.md` (a test checks it is current). Set keys in a YAML
file or on the command line as dotted `key=value` overrides:

    stare train configs/cpu-tiny.yaml algo=stare-o1 seed=1 train.steps=50 algo.stare.w=1.5

`algo=<preset>` picks one of the algorithm presets ({presets}; see `stare algo list`); the `algo.*`
defaults below are the dataclass defaults, which every preset overrides in part.
"""


def field_docs(cls: type) -> dict[str, str]:
    """Field name -> the string literal directly below its annotation in the class body."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body
    docs = {}
    for node, following in zip(body, body[1:], strict=False):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)):
            docs[node.target.id] = " ".join(following.value.value.split())
    return docs


def rows(cls: type, prefix: str = "", instance: Any = None) -> list[tuple[str, str, str, str]]:
    """(key, type, default, description) for every leaf field under `cls`, depth first."""
    docs, hints = field_docs(cls), typing.get_type_hints(cls)
    instance = instance if instance is not None else cls()
    out = []
    for f in dataclasses.fields(cls):
        key, value = f"{prefix}{f.name}", getattr(instance, f.name)
        if dataclasses.is_dataclass(hints[f.name]):
            out.append((key, "section", "", docs.get(f.name, "")))
            out += rows(hints[f.name], f"{key}.", value if prefix or f.name != "algo" else stare.AlgoConfig())
        else:
            out.append((key, _type_name(hints[f.name]), _default(value), docs.get(f.name, "")))
    return out


def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) is typing.Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    name = getattr(tp, "__name__", None) or str(tp)
    return str(tp).replace("typing.", "") if typing.get_args(tp) else name


def _default(value: Any) -> str:
    if isinstance(value, tuple):
        value = list(value)
    return f"`{value!r}`" if not isinstance(value, str) else f"`{value!r}`"


def markdown() -> str:
    """The whole docs/config.md page."""
    lines = [HEADER.format(presets=", ".join(stare.PRESETS)), "| key | type | default | description |",
             "|---|---|---|---|"]
    for key, type_name, default, doc in rows(TrainConfig):
        if type_name == "section":
            lines.append(f"| **{key}** | section | | {doc} |")
        else:
            lines.append(f"| `{key}` | {type_name.replace('|', chr(92) + '|')} | {default} | {doc} |")
    return "\n".join(lines) + "\n"


def update_readme(path: str = "README.md") -> None:
    """Rewrite the config table at the end of the README (everything from its `| key |` header on)."""
    readme = pathlib.Path(path)
    text = readme.read_text()
    table = markdown()
    readme.write_text(text[: text.index("| key |")] + table[table.index("| key |"):])


if __name__ == "__main__":
    if sys.argv[1:] == ["--readme"]:
        update_readme()
    else:
        print(markdown(), end="")
