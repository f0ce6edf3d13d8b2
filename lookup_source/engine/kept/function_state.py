"""A user's ``fetch=`` / ``fetch_many=`` function known by its state (:func:`function_state`):
what it answers with, the same in every job and process, so that the shared tier and a
worker's keepers tell two functions apart by what decides their answers, not by their id."""

from __future__ import annotations

import functools
import hashlib
import os
import types
from collections.abc import Mapping
from typing import Any

_PLAIN = (str, int, float, bool, bytes, bytearray, complex, type(None))
_MAX_DEPTH = 6
_MAX_ITEMS = 10_000
"""Items of one container a function's state takes in (its length always): a large table a
function holds is known by its size and first items, not read whole for every task."""


def function_state(function: Any) -> bytes:
    """A digest of what a ``fetch=`` / ``fetch_many=`` function answers with, the same in
    every job and process: its qualified name and code (with the code it nests), its default
    arguments, the values its closure holds, the globals its code reads (data, containers,
    the attributes it reads of a module, the functions it calls, followed the same way), the
    environment variables it names (``os.environ["TOKEN"]``, ``os.getenv("TOKEN")``), the object
    a bound method or a callable object carries (its attributes and its class's) and a
    ``functools.partial``'s arguments — ``Fetcher("https://a", "tokA")`` and
    ``Fetcher("https://b", "tokB")`` differ."""
    digest = hashlib.sha256()
    _walk(function, digest, set(), 0)
    return digest.digest()


def _walk(value: Any, digest: Any, seen: set[int], depth: int) -> None:
    update = digest.update
    if isinstance(value, _PLAIN):
        update(f"{type(value).__name__}:{value!r}\x00".encode("utf-8", "surrogateescape"))
        return
    if id(value) in seen or depth > _MAX_DEPTH:
        update(b"(seen)\x00")
        return
    seen.add(id(value))
    deeper = depth + 1
    if isinstance(value, (list, tuple)):
        update(f"{type(value).__name__}[{len(value)}]\x00".encode())
        for item in value[:_MAX_ITEMS]:
            _walk(item, digest, seen, deeper)
    elif isinstance(value, (set, frozenset)):
        update(f"set[{len(value)}]\x00".encode())
        if len(value) <= _MAX_ITEMS:
            for text in sorted(repr(item) for item in value):
                update(text.encode("utf-8", "surrogateescape") + b"\x00")
    elif isinstance(value, Mapping):
        update(f"map[{len(value)}]\x00".encode())
        keys = list(value)[:_MAX_ITEMS] if len(value) > _MAX_ITEMS else sorted(value, key=repr)
        for key in keys:
            _walk(key, digest, seen, deeper)
            _walk(value[key], digest, seen, deeper)
    elif isinstance(value, functools.partial):
        update(b"partial\x00")
        _walk(value.func, digest, seen, deeper)
        _walk(value.args, digest, seen, deeper)
        _walk(value.keywords, digest, seen, deeper)
    elif isinstance(value, types.MethodType):
        update(b"method\x00")
        _walk(value.__func__, digest, seen, deeper)
        _walk(value.__self__, digest, seen, deeper)
    elif isinstance(value, types.FunctionType):
        _walk_function(value, digest, seen, deeper)
    elif isinstance(value, (type, types.ModuleType, types.BuiltinFunctionType)):
        name = f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', '')}"
        update(f"named:{name}:{getattr(value, '__name__', '')}\x00".encode())
    else:
        kind = type(value)
        update(f"object:{kind.__module__}.{kind.__qualname__}\x00".encode())
        call = vars(kind).get("__call__") or next(
            (vars(base)["__call__"] for base in kind.__mro__ if "__call__" in vars(base)), None
        )
        if isinstance(call, types.FunctionType):
            _walk_function(call, digest, seen, deeper)
        state: dict[str, Any] = dict(getattr(value, "__dict__", {}) or {})
        for slot in getattr(kind, "__slots__", ()) or ():
            if isinstance(slot, str) and hasattr(value, slot):
                state[slot] = getattr(value, slot)
        _walk(state, digest, seen, deeper)
        _walk(_class_data(kind), digest, seen, deeper)


def _walk_function(function: types.FunctionType, digest: Any, seen: set[int], depth: int) -> None:
    update = digest.update
    update(f"function:{function.__module__}.{function.__qualname__}\x00".encode())
    _walk_code(function.__code__, digest)
    _walk(function.__defaults__, digest, seen, depth)
    _walk(function.__kwdefaults__, digest, seen, depth)
    for cell in function.__closure__ or ():
        try:
            contents = cell.cell_contents
        except ValueError:  # an empty cell
            update(b"(empty)\x00")
            continue
        _walk(contents, digest, seen, depth)
    globals_ = function.__globals__
    names = _names(function.__code__)
    for name in names:
        if name not in globals_:
            continue
        value = globals_[name]
        update(name.encode() + b"=")
        if value is os.environ:  # the variables it names count, below; not every one
            continue
        if isinstance(value, types.ModuleType):  # the attributes of it the code reads
            _walk(_module_data(value, names), digest, seen, depth)
        elif isinstance(value, type):
            update(f"class:{value.__module__}.{value.__qualname__}\x00".encode())
            _walk(_class_data(value), digest, seen, depth)
        else:
            _walk(value, digest, seen, depth)
    if {"environ", "getenv"} & set(names):  # the variables it names, as this process has them
        for variable in _strings(function.__code__):
            if variable in os.environ:
                update(b"env " + variable.encode("utf-8", "surrogateescape") + b"=")
                update(os.environ[variable].encode("utf-8", "surrogateescape") + b"\x00")


def _module_data(module: types.ModuleType, names: list[str]) -> dict[str, Any]:
    """What a function reads of a module it names: its attributes of those names that are
    data (not the module's functions, classes and submodules: those are code)."""
    found = {}
    for name in names:
        value = getattr(module, name, None)
        if name.startswith("__") or value is None or callable(value):
            continue
        if isinstance(value, (types.ModuleType, os._Environ)):
            continue
        found[name] = value
    return found


def _class_data(kind: type) -> dict[str, Any]:
    """A user class's data attributes (its bases' too): a token set on the class."""
    found: dict[str, Any] = {}
    for base in reversed(kind.__mro__):
        if base.__module__ == "builtins":
            continue
        for name, value in vars(base).items():
            if name.startswith("__") or callable(value) or isinstance(value, (property, type)):
                continue
            if isinstance(value, (staticmethod, classmethod, types.ModuleType)):
                continue
            found[f"{base.__qualname__}.{name}"] = value
    return found


def _strings(code: types.CodeType) -> list[str]:
    found = [const for const in code.co_consts if isinstance(const, str)]
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found.extend(_strings(const))
    return found


def _names(code: types.CodeType) -> list[str]:
    names = list(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names.extend(_names(const))
    return sorted(set(names))


def _walk_code(code: types.CodeType, digest: Any) -> None:
    digest.update(code.co_code)
    digest.update(repr(code.co_names).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _walk_code(const, digest)
        else:
            digest.update(repr(const).encode("utf-8", "surrogateescape"))
