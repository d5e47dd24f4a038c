"""Finding environments: our `stare/` ids, third-party `stare.envs` entry points, `make`, `list_envs`.

Registration is importing (no distributed state): `import envs` registers our ids and reads the
`stare.envs` entry-point group, so every worker process that imports `envs` sees the same catalogue.
An entry point is either an env id mapped to its class (registered without importing the package):

    [project.entry-points."stare.envs"]
    "acme/Echo-v0" = "acme_envs.echo:EchoEnv"

or any other name mapped to a function that registers envs itself (`acme = "acme_envs:register"`).
"""

from __future__ import annotations

import difflib
import warnings
from importlib.metadata import entry_points
from typing import Any

import gymnasium
from gymnasium.envs.registration import load_env_creator

from envs.errors import UnknownEnvError

ENTRY_POINT_GROUP = "stare.envs"
NAMESPACE = "stare"
REMOTE_PREFIXES = {"openenv/": "envs.openenv.client:OpenEnvTextEnv"}
"""Id prefix -> the class that turns the rest of the id (a server URL) into an env (loaded on use)."""
_extra_ids: set[str] = set()
"""Ids registered through `register` or entry points (outside the `stare/` namespace)."""
_seen_entry_points: set[tuple[str, str]] = set()


def register(env_id: str, entry_point: Any, **kwargs: Any) -> None:
    """`gymnasium.register`, plus listing in `envs.list_envs()`; re-registering the same id is a no-op.

    Args:
        env_id: A versioned Gymnasium id such as "acme/Echo-v0".
        entry_point: "module:Class" string (keeps imports lazy) or a class / factory.
        **kwargs: Passed to `gymnasium.register` (e.g. `kwargs={...}` defaults).
    """
    if env_id not in gymnasium.registry:
        gymnasium.register(id=env_id, entry_point=entry_point, **kwargs)
    if not env_id.startswith(f"{NAMESPACE}/"):
        _extra_ids.add(env_id)


def discover() -> list[str]:
    """Register the envs of every installed `stare.envs` entry point not seen yet; returns new ids.

    A failing third-party hook is reported as a warning, never an exception: one broken plugin must not
    stop the others (or our own envs) from loading.
    """
    found: list[str] = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if (ep.name, ep.value) in _seen_entry_points:
            continue
        _seen_entry_points.add((ep.name, ep.value))
        if "/" in ep.name or "-v" in ep.name:  # an env id: register the "module:Class" string, import nothing
            register(ep.name, ep.value)
            found.append(ep.name)
            continue
        before = set(gymnasium.registry)
        try:
            ep.load()()
        except Exception as err:  # a third-party bug; report it and keep going
            warnings.warn(f"stare.envs entry point {ep.name!r} ({ep.value}) failed: "
                          f"{type(err).__name__}: {err}", stacklevel=2)
            continue
        new = sorted(set(gymnasium.registry) - before)
        _extra_ids.update(new)
        found.extend(new)
    return found


def env_ids() -> list[str]:
    """Sorted ids of our envs and of every env registered through `register` or entry points."""
    discover()
    ours = {i for i in gymnasium.registry if i.startswith(f"{NAMESPACE}/")}
    return sorted(ours | {i for i in _extra_ids if i in gymnasium.registry})


def card_summary(env_id: str) -> str:
    """First line of the env card (the class docstring) of a registered id."""
    spec = gymnasium.spec(env_id)
    try:
        creator = spec.entry_point
        if isinstance(creator, str):
            creator = load_env_creator(creator)
    except Exception as err:  # a plugin that cannot be imported is still listed, with the reason
        return f"(cannot import {spec.entry_point}: {type(err).__name__}: {err})"
    doc = (creator.__doc__ or "").strip()
    return doc.splitlines()[0] if doc else "(no env card)"


def list_envs() -> list[tuple[str, str]]:
    """`(id, first line of its env card)` for every env of `env_ids()`."""
    return [(env_id, card_summary(env_id)) for env_id in env_ids()]


def suggest(env_id: str, n: int = 3) -> list[str]:
    """The registered ids closest to `env_id` (case-insensitive), best first."""
    ours = env_ids()  # scans the plugins once (it used to run once per registered id)
    seen = set(ours)
    known = ours + [i for i in gymnasium.registry if i not in seen]
    by_lower = {i.lower(): i for i in reversed(known)}
    return [by_lower[m] for m in difflib.get_close_matches(env_id.lower(), list(by_lower), n=n, cutoff=0.5)]


def make(env_id: str, **kwargs: Any) -> gymnasium.Env:
    """`gymnasium.make(env_id, **kwargs)` after plugin discovery, with "did you mean" on a wrong id.

    An id "openenv/<url>" makes `envs.openenv.client.OpenEnvTextEnv(<url>, **kwargs)`: the OpenEnv server
    at that URL as a text env (needs the `openenv` package).

    Raises:
        UnknownEnvError: No env has that id; the message lists the closest registered ids.
    """
    for prefix, entry_point in REMOTE_PREFIXES.items():
        if env_id.startswith(prefix):  # a URL is no Gymnasium id: build the client env directly
            return load_env_creator(entry_point)(env_id[len(prefix):], **kwargs)
    if env_id not in gymnasium.registry:  # scanning entry points costs ~3 ms: only for ids not known yet
        discover()
    if env_id not in gymnasium.registry:
        close = suggest(env_id)
        hint = f"did you mean {', '.join(repr(c) for c in close)}?" if close else f"known: {env_ids()}"
        raise UnknownEnvError(f"no environment {env_id!r}; {hint} (`stare envs list` shows all)")
    return gymnasium.make(env_id, **kwargs)
