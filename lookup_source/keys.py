"""Find the distinct keys of an Arrow batch, and where each row's key sits among them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from lookup_source.errors import SchemaError


@dataclass(frozen=True)
class DistinctKeys:
    """The distinct non-null keys of a batch and, per row, the index of its key.

    ``indices[i]`` is null when row ``i`` has a null key (or any null part of a composite key):
    such a key is never sent to the store.
    """

    keys: list[Any]
    indices: pa.Array


def cast_key_column(array: pa.Array, arrow_type: pa.DataType | None, column: str) -> pa.Array:
    """Cast a key column to the type the lookup schema declares, or fail naming the column."""
    if arrow_type is None or array.type == arrow_type:
        return array
    try:
        return array.cast(arrow_type, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise SchemaError(
            f"key column '{column}' holds {array.type} values that do not convert to the "
            f"lookup schema's {arrow_type}: {exc}",
            column=column,
        ) from None


def distinct_keys(columns: Sequence[pa.Array]) -> DistinctKeys:
    """Distinct keys of one (scalar keys) or several (tuple keys) key columns."""
    if len(columns) == 1:
        column = columns[0]
        try:
            encoded = column.dictionary_encode()
        except (pa.ArrowNotImplementedError, pa.ArrowTypeError):
            pass
        else:
            indices = encoded.indices
            if indices.type != pa.int32():
                indices = indices.cast(pa.int32())
            return DistinctKeys(encoded.dictionary.to_pylist(), indices)
        values: Sequence[Any] = column.to_pylist()
        return _distinct_python(values, lambda key: key is None)
    parts = [column.to_pylist() for column in columns]
    return _distinct_python(list(zip(*parts)), lambda key: any(p is None for p in key))


def _distinct_python(values: Sequence[Any], is_null: Any) -> DistinctKeys:
    positions: dict[Any, int] = {}
    indices: list[int | None] = []
    for value in values:
        if is_null(value):
            indices.append(None)
            continue
        index = positions.get(value)
        if index is None:
            index = positions[value] = len(positions)
        indices.append(index)
    return DistinctKeys(list(positions), pa.array(indices, type=pa.int32()))


def convert_keys(
    keys: Sequence[Any], key_types: Sequence[pa.DataType | None], key_columns: Sequence[str]
) -> tuple[list[Any], dict[int, str]]:
    """Keys (scalars, or tuples for composite keys) as the key columns' types: text from a scan
    or JSON numbers become the declared type. Returns the converted keys, position by position,
    and ``{position: why}`` for those that do not convert (their converted value is None)."""
    from lookup_source.arrow_values import typed_columns

    errors: dict[int, str] = {}
    columns = [
        [k[index] if isinstance(k, tuple) else k for k in keys] for index in range(len(key_columns))
    ]
    typed = typed_columns(
        [
            (pa.field(column, arrow_type), values)
            for column, arrow_type, values in zip(key_columns, key_types, columns)
            if arrow_type is not None
        ],
        keys,
        errors,
    )
    converted = iter(array.to_pylist() for array in typed)
    lists = [
        values if arrow_type is None else next(converted)
        for arrow_type, values in zip(key_types, columns)
    ]
    out = lists[0] if len(lists) == 1 else list(zip(*lists))
    return [None if position in errors else key for position, key in enumerate(out)], errors
