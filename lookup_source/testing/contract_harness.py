"""How the contract drives a connector: through the engine as one Spark task of
``lookup_join`` would (:func:`lookup_rows`), or its client alone (``_config``, ``_ask``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from lookup_source.connector_api import (
    ConnectorConfig,
    LookupClient,
    Matches,
    python_keys,
    records_from_matches,
)
from lookup_source.engine.metrics import LookupMetrics
from lookup_source.engine.runner import run_lookups
from lookup_source.spark.plan import LookupPlan


def lookup_rows(
    options: Mapping[str, str],
    schema: str,
    keys: Sequence[Any],
    *,
    how: str = "left",
    key_type: pa.DataType | None = None,
    stats: list[LookupMetrics] | None = None,
    client_factory: Any = None,
) -> list[dict[str, Any]]:
    """Look ``keys`` up as one Spark task of ``lookup_join`` would (one batch, no JVM); return
    the output rows as dicts. Composite keys are tuples."""
    plan = LookupPlan.build(dict(options), schema)
    names = plan.key_names
    if len(names) == 1:
        arrays = [pa.array(list(keys), type=key_type or plan.key_arrow_types()[0])]
    else:
        types = plan.key_arrow_types()
        arrays = [
            pa.array([None if k is None else k[i] for k in keys], type=types[i])
            for i in range(len(names))
        ]
    batch = pa.RecordBatch.from_arrays(arrays, names=list(names))
    out = run_lookups(
        [batch],
        plan.engine_spec(names, how=how),
        plan.connector_config(),
        client_factory=client_factory,
        on_metrics=stats.append if stats is not None else None,
    )
    return [row for b in out for row in b.to_pylist()]


def _config(options: Mapping[str, str], schema: str) -> tuple[type[LookupClient], ConnectorConfig]:
    plan = LookupPlan.build(dict(options), schema)
    return plan.options.connector_class(), plan.connector_config()


async def _ask(client: LookupClient, keys: pa.RecordBatch) -> dict[Any, Any]:
    """The client's answer for ``keys`` in the record form, whichever form it gives."""
    if client.columnar:
        answer = await client.lookup_arrow(keys)
        assert isinstance(answer, Matches), f"lookup_arrow returned {type(answer).__name__}"
        return records_from_matches(python_keys(keys), answer)
    return dict(await client.lookup(python_keys(keys)))
