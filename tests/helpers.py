"""Helpers shared by the connector tests."""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa
import pytest

from lookup_source.engine.metrics import LookupMetrics
from lookup_source.engine.runner import run_lookups
from lookup_source.spark.plan import LookupPlan

INT64 = pa.int64()


def clean_environment(*also: str) -> dict[str, str]:
    """This process's environment without what points into the clone or its Spark (the Spark
    fixture puts the clone on PYTHONPATH for its executors, where pip would find asynclookup
    installed), and without the variables ``also`` names."""
    dropped = {"PYTHONPATH", "VIRTUAL_ENV", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", *also}
    return {k: v for k, v in os.environ.items() if k not in dropped}


def wheelhouse() -> list[str]:
    """The folders pip installs from alone when told so (``PIP_NO_INDEX`` with
    ``PIP_FIND_LINKS``, as .ci/run sets them for its wheelhouse), or [] when it uses an index."""
    if os.environ.get("PIP_NO_INDEX", "").lower() not in ("1", "true", "yes", "on"):
        return []
    links = os.environ.get("PIP_FIND_LINKS", "").split()
    return [link for link in links if os.path.isdir(link)]


def index_reachable(timeout: float = 3.0) -> bool:
    """Whether pip can install packages: from a wheelhouse (:func:`wheelhouse`), or from the
    package index it uses (PIP_INDEX_URL, else PyPI) when that answers."""
    import socket
    from urllib.parse import urlsplit

    if wheelhouse():
        return True
    url = os.environ.get("PIP_INDEX_URL") or "https://pypi.org/simple"
    parts = urlsplit(url)
    try:
        with socket.create_connection(
            (parts.hostname or "pypi.org", parts.port or (443 if parts.scheme == "https" else 80)),
            timeout=timeout,
        ):
            return True
    except OSError:
        return False


needs_index = pytest.mark.skipif(
    not index_reachable(),
    reason="no wheelhouse and no package index answers: this test installs packages as a user "
    "would (set PIP_INDEX_URL to a mirror, or PIP_NO_INDEX=1 PIP_FIND_LINKS=<wheelhouse>)",
)


def needs(feature: Any) -> pytest.MarkDecorator:
    """Skip a test on a PySpark older than ``feature`` needs (a ``SparkFeature`` of
    lookup_source.spark.versions); tests/spark/test_versions.py checks the error it gives there.
    """
    return pytest.mark.skipif(not feature.available(), reason=feature.message())


def run_keys(
    options: dict[str, str],
    schema: str,
    keys: list[Any],
    *,
    key_type: pa.DataType = INT64,
    stats: list[LookupMetrics] | None = None,
    client_factory: Any = None,
) -> list[dict[str, Any]]:
    """Look ``keys`` up through the engine and a real connector (one batch, left join)."""
    plan = LookupPlan.build(options, schema)
    names = plan.key_names
    if len(names) == 1:
        arrays = [pa.array(keys, type=key_type)]
    else:
        arrays = [pa.array([k[i] for k in keys]) for i in range(len(names))]
    batch = pa.RecordBatch.from_arrays(arrays, names=list(names))
    out = run_lookups(
        [batch],
        plan.engine_spec(names, how="left"),
        plan.connector_config(),
        client_factory=client_factory,
        on_metrics=stats.append if stats is not None else None,
    )
    return [row for b in out for row in b.to_pylist()]


def finished(query: Any, timeout_s: float = 540) -> Any:
    """``query`` (a streaming query with a trigger that ends, such as ``availableNow``) awaited
    to its end and checked: it ended within ``timeout_s`` (a busy machine may take minutes,
    the suite's own limit per test is 600 s) and raised nothing. Returns the query."""
    assert query.awaitTermination(timeout_s), f"the stream did not end within {timeout_s} s"
    assert query.exception() is None, query.exception()
    return query


def waited_for(condition: Any, seconds: float, every_s: float = 0.1) -> None:
    """Until ``condition()`` holds or ``seconds`` have passed (the caller asserts what it
    needs after: a busy machine is late, a defect never gets there)."""
    import time

    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(every_s)


def raised(make: Any) -> Exception:
    """What ``make()`` (a coroutine function) raises, run to its end on a new event loop; an
    AssertionError if it raises nothing."""
    import asyncio

    async def run() -> Exception:
        try:
            await make()
        except Exception as error:
            return error
        raise AssertionError("no exception")

    return asyncio.run(run())


def assert_meanings(cases: list[tuple[str, Any, Any, bool]], library: str, classify: Any) -> None:
    """For each case ``(what, make, library_class, retried)``: ``make()`` raises an instance of
    ``library_class`` (the real library's exception), which the connector's boundary translates
    into a TransientError (``retried``) or a PermanentError that the one rule of what is retried
    agrees with, keeping the original as its cause and naming the library."""
    from lookup_source.connector_api import (
        PermanentError,
        TransientError,
        is_retryable,
        translate_error,
    )

    for what, make, library_class, retried in cases:
        error = raised(make)
        assert isinstance(error, library_class), (what, error)
        translated = translate_error(library, classify, error, tls=TLS_NAMES.get(library))
        assert isinstance(translated, TransientError if retried else PermanentError), what
        assert is_retryable(translated) is retried, what
        cause = translated.__cause__  # the original, its text redacted, its traceback kept
        assert type(cause).__name__ == "LibraryError", what
        assert type(error).__qualname__ in str(cause), what
        assert cause.__traceback__ is error.__traceback__, what
        assert str(translated).startswith(f"{library} ") or "TLS" in str(translated), what


TLS_NAMES = {"redis": "redis", "asyncpg": "postgres", "aiohttp": "http"}
"""The ``<name>.tls.*`` options of each library's connector."""


def run_postgres(url: str, *statements: str) -> None:
    """Run ``statements`` on the Postgres at ``url``, in order, on one connection (for a
    module's fixture, where the per-test ``pg`` fixture is not available)."""
    import asyncio

    import asyncpg

    async def run() -> None:
        connection = await asyncpg.connect(url)
        try:
            for statement in statements:
                await connection.execute(statement)
        finally:
            await connection.close()

    asyncio.run(run())
