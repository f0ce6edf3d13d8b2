"""Find a connector class by name: installed entry points, or ``package.module:Class``.

Every connector, the built-in ones included, is a distribution that registers its client class
under the ``asynclookup.connectors`` entry-point group::

    [project.entry-points."asynclookup.connectors"]
    redis = "asynclookup_redis:RedisLookupClient"

The first-party connectors are also found by their module when their distribution's metadata is
not visible (a package shipped to executors as a zip with ``--py-files``), and a missing one
names the extra that installs it.
"""

from __future__ import annotations

import difflib
import importlib
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib.metadata import entry_points

from lookup_source.connector_api import LookupClient
from lookup_source.connector_api.budget import BUDGET_COORDINATOR_GROUP, BudgetCoordinator
from lookup_source.connector_api.shared_cache import SHARED_CACHE_GROUP, SharedCacheStore
from lookup_source.errors import ConnectorNotFoundError, OptionError

ENTRY_POINT_GROUP = "asynclookup.connectors"
"""The entry-point group through which connector distributions register their client class."""


@dataclass(frozen=True)
class FirstParty:
    """A connector maintained in this repository (``connectors/<name>``)."""

    name: str
    target: str  # module:Class
    distribution: str

    @property
    def install(self) -> str:
        return install_hint(self.name)


def install_hint(extras: str) -> str:
    """How to install the connectors of ``extras`` (``redis``, ``http,redis``, ``bench``...):
    from a clone, since no index has asynclookup yet."""
    names = [e.strip() for e in extras.split(",") if e.strip()]
    connectors = list(FIRST_PARTY) if "bench" in names else [n for n in names if n in FIRST_PARTY]
    folders = [f"./connectors/{n}" for n in connectors]
    if "bench" in names:
        folders.append("matplotlib")
    wanted = " ".join(folders) or "."
    return (
        f"pip install {wanted} from a clone of asynclookup (once it is published: "
        f"pip install 'asynclookup[{','.join(names)}]')"
    )


FIRST_PARTY: dict[str, FirstParty] = {
    c.name: c
    for c in (
        FirstParty("redis", "asynclookup_redis:RedisLookupClient", "asynclookup-redis"),
        FirstParty("http", "asynclookup_http:HttpLookupClient", "asynclookup-http"),
        FirstParty("postgres", "asynclookup_postgres:PostgresLookupClient", "asynclookup-postgres"),
    )
}


def first_party_names(joined: str = ", ", last: str = " or ") -> str:
    """The first-party connectors' names as text: ``redis, http or postgres``."""
    names = list(FIRST_PARTY)
    return names[0] if len(names) == 1 else joined.join(names[:-1]) + last + names[-1]


def first_party_module(name: str) -> str:
    """The module of first-party connector ``name`` (``asynclookup_redis``)."""
    return FIRST_PARTY[name].target.partition(":")[0]


FUNCTION_CLIENT = "lookup_source.functions:FunctionLookupClient"
"""``connector=function``: your own async function (``lookup_join(..., fetch=...)``)."""


def _load(target: str, *, what: str, first_party: FirstParty | None = None) -> type[LookupClient]:
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise ConnectorNotFoundError(f"'{target}' is not of the form package.module:Class")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        hint = ""
        if first_party is not None:
            hint = f"; install it with {first_party.install}"
        raise ConnectorNotFoundError(f"cannot load {what}: {exc}{hint}") from exc
    try:
        obj = module
        for part in attribute.split("."):
            obj = getattr(obj, part)
    except AttributeError:
        raise ConnectorNotFoundError(
            f"cannot load {what}: module '{module_name}' has no attribute '{attribute}'"
        ) from None
    if not (isinstance(obj, type) and issubclass(obj, LookupClient)):
        raise ConnectorNotFoundError(
            f"{what} ('{target}') is not a subclass of lookup_source.connector_api.LookupClient"
        )
    return obj


@lru_cache(maxsize=1)
def _installed() -> dict[str, str]:
    """name -> module:Class of the connectors registered by installed distributions."""
    return {ep.name.lower(): ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}


def installed_connectors() -> list[str]:
    """Names of the connectors whose distributions are installed."""
    return sorted(_installed())


def available_connectors() -> list[str]:
    """Names the ``connector`` option accepts: installed ones and the first-party ones."""
    return sorted(set(FIRST_PARTY) | set(_installed()))


def resolve_connector(name: str) -> type[LookupClient]:
    """Return the connector class that ``name`` selects.

    >>> resolve_connector("redis").__name__
    'RedisLookupClient'
    """
    if ":" in name:
        return _load(name, what=f"connector class '{name}'")
    key = name.lower()
    if key == "function":
        return _load(FUNCTION_CLIENT, what="the function connector")
    first_party = FIRST_PARTY.get(key)
    installed = _installed()
    if key in installed:
        return _load(
            installed[key],
            what=f"connector '{key}' (entry point {ENTRY_POINT_GROUP})",
            first_party=first_party,
        )
    if first_party is not None:
        return _load(first_party.target, what=f"the {key} connector", first_party=first_party)
    names = available_connectors()
    near = difflib.get_close_matches(key, names, n=1)
    raise ConnectorNotFoundError(
        f"unknown connector '{name}': use one of {', '.join(names)}, an entry point of group "
        f"'{ENTRY_POINT_GROUP}', or package.module:Class",
        suggestion=near[0] if near else None,
    )


@cache
def _installed_by_scheme(group: str) -> dict[str, str]:
    """scheme -> module:Class of the plugins of an entry-point ``group`` (read once per group:
    every task resolves its plugin)."""
    return {ep.name.lower(): ep.value for ep in entry_points(group=group)}


FIRST_PARTY_SHARED_CACHES = {
    "redis": "asynclookup_redis.shared:RedisSharedCache",
    "rediss": "asynclookup_redis.shared:RedisSharedCache",
    "unix": "asynclookup_redis.shared:RedisSharedCache",
}
"""The shared cache stores of this repository, by URL scheme (``cache.shared.url``)."""

FIRST_PARTY_BUDGET_COORDINATORS = {
    "redis": "asynclookup_redis.budget:RedisBudgetCoordinator",
    "rediss": "asynclookup_redis.budget:RedisBudgetCoordinator",
    "unix": "asynclookup_redis.budget:RedisBudgetCoordinator",
}
"""The budget coordinators of this repository, by URL scheme (``budget.url``)."""


def _resolve_by_scheme(
    url: str,
    *,
    option: str,
    group: str,
    first_party: dict[str, str],
    base: type[LookupClient],
    what: str,
) -> type[LookupClient]:
    """The plugin class of the URL given as ``option``, by its scheme: an installed entry
    point of ``group``, or a first-party one; an OptionError naming the option otherwise."""
    scheme = url.partition("://")[0].strip().lower() if "://" in url else ""
    installed = _installed_by_scheme(group)
    target = installed.get(scheme) or first_party.get(scheme)
    if target is None:
        schemes = sorted(set(installed) | set(first_party))
        raise OptionError(
            option,
            f"must be a URL of a {what} ({', '.join(s + '://' for s in schemes)}); "
            f"its scheme {scheme!r} has none"
            if scheme
            else "must be a URL such as redis://host:6379/0",
        )
    try:
        found = _load(target, what=f"the {what} for {scheme}://")
    except ConnectorNotFoundError as exc:
        raise OptionError(option, f"{exc}; install it with {install_hint('redis')}") from None
    if not issubclass(found, base):
        raise OptionError(option, f"{target} is not a {base.__name__}")
    return found


def resolve_shared_cache(url: str) -> type[SharedCacheStore]:
    """The store class of a ``cache.shared.url``, by its scheme (entry points of
    ``asynclookup.shared_caches``, or a first-party one)."""
    found = _resolve_by_scheme(
        url,
        option="cache.shared.url",
        group=SHARED_CACHE_GROUP,
        first_party=FIRST_PARTY_SHARED_CACHES,
        base=SharedCacheStore,
        what="shared cache store",
    )
    assert issubclass(found, SharedCacheStore)
    return found


def resolve_budget_coordinator(url: str) -> type[BudgetCoordinator]:
    """The coordinator class of a ``budget.url``, by its scheme (entry points of
    ``asynclookup.budget_coordinators``, or a first-party one)."""
    found = _resolve_by_scheme(
        url,
        option="budget.url",
        group=BUDGET_COORDINATOR_GROUP,
        first_party=FIRST_PARTY_BUDGET_COORDINATORS,
        base=BudgetCoordinator,
        what="budget coordinator",
    )
    assert issubclass(found, BudgetCoordinator)
    return found
