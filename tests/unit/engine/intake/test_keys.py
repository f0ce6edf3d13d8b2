"""A batch's key columns reduced to distinct keys (:func:`distinct_keys`): one row per distinct
non-null key, each input row pointing back to its key (null for a null key, or a null part of a
composite key); key columns cast to the declared key types (:func:`cast_key_column`), failing
with a :class:`SchemaError` that names the column; and keys as Python values converted to the
key types (:func:`convert_keys`), those that do not convert reported by position."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lookup_source.engine.intake.keys import (
    DistinctKeys,
    cast_key_column,
    convert_keys,
    distinct_keys,
)
from lookup_source.errors import SchemaError


def rows_back(distinct: DistinctKeys) -> list[object]:
    """Each input row's key, read back through its index (None for a null key)."""
    keys = [
        tuple(column[i] for column in distinct.keys.to_pydict().values())
        for i in range(distinct.keys.num_rows)
    ]
    return [None if i is None else keys[i] for i in distinct.indices.to_pylist()]


def test_one_key_column_gives_its_distinct_values_in_first_seen_order() -> None:
    distinct = distinct_keys([pa.array(["b", "a", None, "b", "c", "a"])], ["k"])
    assert distinct.keys.to_pydict() == {"k": ["b", "a", "c"]}
    assert distinct.indices.to_pylist() == [0, 1, None, 0, 2, 1]
    assert distinct.indices.type == pa.int32()
    assert len(distinct) == 3


def test_duplicate_keys_share_one_distinct_key() -> None:
    distinct = distinct_keys([pa.array([7, 7, 7, 7], pa.int64())], ["k"])
    assert distinct.keys.to_pydict() == {"k": [7]}
    assert distinct.indices.to_pylist() == [0, 0, 0, 0]


def test_null_keys_are_not_distinct_keys() -> None:
    distinct = distinct_keys([pa.array([None, None], pa.int64())], ["k"])
    assert len(distinct) == 0
    assert distinct.keys.schema == pa.schema([pa.field("k", pa.int64())])
    assert distinct.indices.to_pylist() == [None, None]
    assert distinct.indices.null_count == 2


def test_an_empty_column_gives_no_key() -> None:
    distinct = distinct_keys([pa.array([], pa.int64())], ["key"])
    assert len(distinct) == 0
    assert distinct.keys.schema.names == ["key"]
    assert distinct.indices.to_pylist() == []
    assert distinct.indices.type == pa.int32()


def test_a_chunked_column_is_combined() -> None:
    distinct = distinct_keys([pa.chunked_array([[1, 2], [2, 3]], pa.int64())], ["k"])
    assert distinct.keys.to_pydict() == {"k": [1, 2, 3]}
    assert distinct.indices.to_pylist() == [0, 1, 1, 2]


def test_the_keys_are_named_as_asked() -> None:
    distinct = distinct_keys([pa.array([1], pa.int64())], ["renamed"])
    assert distinct.keys.schema.names == ["renamed"]


def test_composite_keys_are_distinct_as_tuples() -> None:
    t = pa.array(["a", "b", "a", "a", "b"])
    u = pa.array([1, 1, 2, 1, 1], pa.int64())
    distinct = distinct_keys([t, u], ["t", "u"])
    assert len(distinct) == 3
    assert distinct.keys.schema.names == ["t", "u"]
    assert sorted(zip(*distinct.keys.to_pydict().values())) == [("a", 1), ("a", 2), ("b", 1)]
    assert rows_back(distinct) == [("a", 1), ("b", 1), ("a", 2), ("a", 1), ("b", 1)]
    assert distinct.indices.type == pa.int32()


def test_a_null_part_of_a_composite_key_makes_the_row_keyless() -> None:
    t = pa.array(["a", None, "a", "b"])
    u = pa.array([1, 1, None, 2], pa.int64())
    distinct = distinct_keys([t, u], ["t", "u"])
    assert sorted(zip(*distinct.keys.to_pydict().values())) == [("a", 1), ("b", 2)]
    assert rows_back(distinct) == [("a", 1), None, None, ("b", 2)]
    assert distinct.indices.null_count == 2


def test_empty_composite_columns_give_no_key() -> None:
    distinct = distinct_keys([pa.array([], pa.int64()), pa.array([], pa.string())], ["t", "u"])
    assert len(distinct) == 0
    assert distinct.keys.schema == pa.schema([("t", pa.int64()), ("u", pa.string())])
    assert distinct.indices.to_pylist() == []


def test_a_column_already_of_the_declared_type_is_kept_as_it_is() -> None:
    array = pa.array([1, 2], pa.int64())
    assert cast_key_column(array, pa.int64(), "k") is array
    assert cast_key_column(array, None, "k") is array  # no declared type


def test_a_column_is_cast_to_the_declared_type() -> None:
    cast = cast_key_column(pa.array([1, None, 3], pa.int32()), pa.int64(), "k")
    assert cast.type == pa.int64()
    assert cast.to_pylist() == [1, None, 3]
    assert cast_key_column(pa.array(["10", "20"]), pa.int64(), "k").to_pylist() == [10, 20]


def test_text_that_is_no_number_fails_naming_the_column() -> None:
    with pytest.raises(SchemaError) as raised:
        cast_key_column(pa.array(["1", "x"]), pa.int64(), "customer_id")
    assert raised.value.column == "customer_id"
    message = str(raised.value)
    assert message.startswith(
        "key column 'customer_id' holds string values that do not convert to the lookup "
        "schema's int64: "
    )
    assert "'x'" in message


def test_a_value_out_of_range_fails_rather_than_wrap() -> None:
    with pytest.raises(SchemaError, match="key column 'small' holds int64 values") as raised:
        cast_key_column(pa.array([300], pa.int64()), pa.int8(), "small")
    assert raised.value.column == "small"
    assert "not in range" in str(raised.value)


def test_a_type_with_no_cast_fails_naming_the_column() -> None:
    with pytest.raises(SchemaError, match="key column 'tags' holds list<item: int64>") as raised:
        cast_key_column(pa.array([[1]]), pa.int8(), "tags")
    assert raised.value.column == "tags"


def test_convert_keys_to_the_declared_types_reports_those_that_do_not_convert() -> None:
    converted, errors = convert_keys(["1", "x", None], [pa.int64()], ["k"])
    assert converted == [1, None, None]
    assert list(errors) == [1]
    assert errors[1].startswith("key 'x': column 'k' expects bigint")


def test_convert_composite_keys_leaves_an_undeclared_part_as_it_is() -> None:
    converted, errors = convert_keys(
        [("1", "a"), ("y", "b"), ("3", 4)], [pa.int64(), None], ["k", "j"]
    )
    assert converted == [(1, "a"), None, (3, 4)]
    assert list(errors) == [1]
    assert errors[1].startswith("key ('y', 'b'): column 'k' expects bigint")


def test_convert_no_keys() -> None:
    assert convert_keys([], [pa.int64()], ["k"]) == ([], {})


def test_a_column_of_the_null_type_has_no_key_to_send() -> None:
    distinct = distinct_keys([pa.nulls(3)], ["k"])
    assert len(distinct) == 0 and distinct.keys.schema.names == ["k"]
    assert distinct.indices.to_pylist() == [None, None, None]
    assert distinct.indices.type == pa.int32()
