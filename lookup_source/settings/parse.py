"""Options as given (strings, from Spark or Python) parsed once into :class:`LookupOptions`:
each name checked against the core options and the connector's own, each value parsed by its
declaration, and what options say together checked (:func:`parse_options`)."""

from __future__ import annotations

import dataclasses
import difflib
import json
from collections.abc import Mapping
from typing import Any

from lookup_source.connector_api.options import OptionSpec, find_spec, parse_required_text
from lookup_source.errors import OptionError
from lookup_source.registry import (
    available_connectors,
    first_party_names,
    resolve_connector,
    resolve_shared_cache,
)
from lookup_source.settings.budget import check_budget
from lookup_source.settings.declare import CoreOption, build, declared
from lookup_source.settings.lookup import LookupOptions

DECLARED: tuple[CoreOption, ...] = tuple(declared(LookupOptions))
"""Every core option, in the order of its declaration."""

CORE_OPTIONS: tuple[OptionSpec, ...] = tuple(core.spec for core in DECLARED)
"""The specs of the core options (how each is named, parsed, defaulted and documented)."""

# Options Spark itself may add to a data source's options; they mean nothing to us.
_SPARK_ADDED_OPTIONS = frozenset({"path"})


def _suggest(name: str, names: list[str]) -> str | None:
    near = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    return near[0] if near else None


def parse_options(raw: Mapping[str, str]) -> LookupOptions:
    """Parse and validate string options into :class:`LookupOptions`.

    Raises :class:`~lookup_source.errors.OptionError` naming the first unknown, missing or
    malformed option, with the nearest valid name when one is close.
    """
    values = _option_texts(raw)
    if "connector" not in values:
        choices = first_party_names(last=", ")
        raise OptionError("connector", f"is required: {choices} or package.module:Class")
    connector_name = parse_required_text(values["connector"]).strip()
    client_class = resolve_connector(connector_name)
    connector_specs = tuple(client_class.option_specs)
    all_specs = CORE_OPTIONS + connector_specs

    parsed: dict[str, Any] = {}
    connector_values: dict[str, Any] = {}
    for name, value in values.items():
        spec = find_spec(name, all_specs)
        if spec is None:
            raise _unknown_option(name, connector_name, all_specs)
        try:
            result = spec.parse(value)
        except ValueError as exc:
            raise OptionError(name, str(exc)) from None
        if spec in connector_specs:
            connector_values[name] = result
        else:
            parsed[name] = result

    for spec in connector_specs:
        if not spec.prefix and spec.name not in connector_values:
            connector_values[spec.name] = spec.default

    parsed["connector"] = connector_name
    if "batch.size" not in parsed:
        parsed["batch.size"] = client_class.batch_size_default(connector_values)
    options: LookupOptions = build(LookupOptions, parsed)
    options = dataclasses.replace(options, connector_options=connector_values, given=values)
    _check_together(options, values)
    client_class.validate_options(options.for_connector())
    return options


def _option_texts(raw: Mapping[str, str]) -> dict[str, str]:
    """The options as lower-case names and texts. A catalog table (CREATE TABLE ... USING
    asynclookup OPTIONS (...)) hands its options over as "option.<name>", beside table
    properties (provider, owner...) that are not ours; its connector is always among them.
    (Any other "option.x" is an unknown option, named.)"""
    values: dict[str, str] = {}
    from_catalog = any(str(key).strip().lower() == "option.connector" for key in raw)
    for key, value in raw.items():
        name = str(key).strip().lower()
        if from_catalog:
            if not name.startswith("option."):
                continue
            name = name[len("option.") :]
        if name in _SPARK_ADDED_OPTIONS:
            continue
        if value is None:
            raise OptionError(name, "has no value")
        values[name] = value if isinstance(value, str) else option_text(value)
    return values


def _check_together(options: LookupOptions, values: Mapping[str, str]) -> None:
    """What options say together: retry delays in order, a shared tier only beside a partial
    cache (and its store's scheme known), a budget's options consistent."""
    retry = options.retry
    if retry.max_delay_s < retry.initial_delay_s:
        raise OptionError(
            "retry.max-delay.ms",
            f"({round(retry.max_delay_s * 1000)}) is smaller than retry.initial-delay.ms "
            f"({round(retry.initial_delay_s * 1000)})",
        )
    shared = options.cache.shared
    if shared.url is not None:
        resolve_shared_cache(shared.url)
        if options.cache.mode == "full":
            raise OptionError(
                "cache.shared.url",
                "is set with cache.mode=full, which answers every key from the worker's copy "
                "of the table: drop one of them",
            )
    check_budget(options.budget, values)


def _unknown_option(name: str, connector: str, specs: tuple[OptionSpec, ...]) -> OptionError:
    prefix = name.split(".", 1)[0]
    if prefix in available_connectors() and prefix != connector.lower():
        return OptionError(
            name, f"belongs to the {prefix} connector, but connector is '{connector}'"
        )
    known = [spec.name for spec in specs if not spec.prefix]
    return OptionError(
        name,
        f"is not an option of asynclookup with connector '{connector}'",
        suggestion=_suggest(name, known),
    )


def option_strings(options: Mapping[Any, Any]) -> dict[str, str]:
    """A mapping of options given from Python (values may be ints, bools, lists) as the strings
    every option is (``True`` -> ``true``, a list -> JSON); strings as they are."""
    return {str(k): v if isinstance(v, str) else option_text(v) for k, v in options.items()}


def option_text(value: object) -> str:
    """A Python option value as the string every option is given as (``True`` -> ``true``, a
    list -> JSON)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return json.dumps(list(value))
    return str(value)
