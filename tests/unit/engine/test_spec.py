"""What the engine needs besides the client (lookup_source.engine.spec): an EngineSpec takes
only the joins the engine makes, carries the value columns only for ``left`` and ``inner``,
has Spark's defaults, and is a frozen plain value that pickles into every task."""

from __future__ import annotations

import dataclasses
import pickle

import pyarrow as pa
import pytest

from lookup_source.engine.spec import DEFAULT_OUTPUT_ROWS, HOW_ALIASES, HOWS, EngineSpec
from tests.fakes import make_options, make_spec

VALUES = (("name", pa.string()), ("n", pa.int64()))


def test_the_defaults() -> None:
    spec = EngineSpec(make_options(), ("k",), (pa.field("name", pa.string()),))
    assert spec.how == "left" and spec.output_rows == DEFAULT_OUTPUT_ROWS == 10_000
    assert spec.key_types == () and spec.name == "" and spec.matched_column is None
    assert spec.match_conditions == ()


@pytest.mark.parametrize("how", HOWS)
def test_every_join_the_engine_makes_is_taken(how: str) -> None:
    assert make_spec(make_options(), how=how).how == how


@pytest.mark.parametrize("how", ["outer", "right", "LEFT", "", "left_semi"])
def test_another_join_is_refused_naming_the_ones_taken(how: str) -> None:
    with pytest.raises(ValueError, match=r"how must be one of left, inner, semi, anti, got"):
        make_spec(make_options(), how=how)


def test_sparks_names_of_semi_and_anti_joins_name_joins_the_engine_makes() -> None:
    assert set(HOW_ALIASES.values()) == {"semi", "anti"} <= set(HOWS)
    assert HOW_ALIASES["leftsemi"] == HOW_ALIASES["left_semi"] == "semi"
    assert HOW_ALIASES["leftanti"] == HOW_ALIASES["left_anti"] == "anti"


@pytest.mark.parametrize(
    ("how", "names"),
    [("left", ["name", "n"]), ("inner", ["name", "n"]), ("semi", []), ("anti", [])],
)
def test_only_left_and_inner_joins_output_the_value_columns(how: str, names: list[str]) -> None:
    spec = make_spec(make_options(), values=VALUES, how=how)
    assert [field.name for field in spec.output_fields] == names
    assert [field.name for field in spec.value_fields] == ["name", "n"]  # asked all the same


def test_a_spec_is_frozen_and_pickles_whole() -> None:
    spec = dataclasses.replace(
        make_spec(make_options(), how="inner"), name="users", matched_column="_matched"
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.how = "left"  # type: ignore[misc]
    again = pickle.loads(pickle.dumps(spec))
    assert again == spec and again.output_fields == spec.output_fields
    with pytest.raises(ValueError, match="how must be one of"):
        dataclasses.replace(spec, how="cross")  # checked however it is made
