"""The option parser: defaults, validation and the messages users see."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lookup_source.errors import ConnectorNotFoundError, OptionError
from lookup_source.registry import FIRST_PARTY
from lookup_source.settings import CORE_OPTIONS, LookupOptions, parse_options

BASE = {"connector": "redis", "url": "redis://localhost:6379/0"}
KNOWN = {spec.name for spec in CORE_OPTIONS} | {
    "redis.key.pattern",
    "redis.value.format",
    "redis.password.env",
}


def test_defaults() -> None:
    opts = parse_options(BASE)
    assert opts.capacity == 100
    assert opts.batch_size == 500  # the redis connector's default
    assert opts.timeout_s == 10.0
    assert opts.retry.max_attempts == 3
    assert opts.retry.backoff == "exponential"
    assert opts.retry.initial_delay_s == 0.1
    assert opts.retry.max_delay_s == 5.0
    assert opts.output_mode == "ordered" and opts.ordered
    assert opts.on_error == "fail"
    assert opts.key_columns is None and opts.read.keys is None and opts.read.partitions is None
    assert opts.connector_options == {
        "redis.key.pattern": "{key}",
        "redis.password.env": None,
        "redis.value.format": "json",
        "redis.tls.ca-file": None,
        "redis.tls.cert-file": None,
        "redis.tls.key-file": None,
        "redis.tls.key-password.env": None,
        "redis.tls.check-hostname": True,
    }
    assert opts.capacity_adaptive is False and opts.capacity_latency_tolerance == 2.0
    assert opts.partition_by_key is False


def test_every_option_parses() -> None:
    opts = parse_options(
        {
            **BASE,
            "key.column": "tenant, user_id",
            "capacity": "64",
            "batch.size": "1_000",
            "timeout.ms": "250",
            "retry.max-attempts": "1",
            "retry.backoff": "FIXED",
            "retry.initial-delay.ms": "0",
            "retry.max-delay.ms": "10",
            "output.mode": "unordered",
            "on.error": "column",
            "keys": '[["a", 1], ["b", 2]]',
            "partitions": "4",
            "redis.key.pattern": "u:{tenant}:{user_id}",
            "redis.value.format": "hash",
        }
    )
    assert opts.key_columns == ("tenant", "user_id")
    assert (opts.capacity, opts.batch_size, opts.timeout_s) == (64, 1000, 0.25)
    assert opts.retry.max_attempts == 1 and opts.retry.backoff == "fixed"
    assert (opts.retry.initial_delay_s, opts.retry.max_delay_s) == (0, 0.01)
    assert not opts.ordered and opts.error_column
    assert opts.read.keys == (("a", 1), ("b", 2))
    assert opts.read.partitions == 4
    assert opts.connector_options["redis.value.format"] == "hash"


def test_names_are_case_insensitive_and_values_may_be_python_values() -> None:
    opts = parse_options({"Connector": "redis", "URL": "redis://h", "Capacity": 7, "keys": [1, 2]})
    assert opts.capacity == 7 and opts.read.keys == (1, 2)


def test_unknown_option_names_it_and_suggests_the_nearest() -> None:
    with pytest.raises(OptionError) as info:
        parse_options({**BASE, "capacitty": "10"})
    assert info.value.option == "capacitty"
    assert info.value.suggestion == "capacity"
    assert str(info.value) == (
        "option 'capacitty': is not an option of asynclookup with connector 'redis' "
        "(did you mean 'capacity'?)"
    )
    with pytest.raises(OptionError, match=r"did you mean 'redis.key.pattern'"):
        parse_options({**BASE, "redis.key.patern": "x:{key}"})


def test_option_of_another_connector_is_named() -> None:
    with pytest.raises(
        OptionError, match="belongs to the http connector, but connector is 'redis'"
    ):
        parse_options({**BASE, "http.json.path": "data"})


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("capacity", "0", "must be at least 1, got 0"),
        ("capacity", "many", "expected a whole number, got 'many'"),
        ("batch.size", "-5", "must be at least 1"),
        ("timeout.ms", "1.5", "expected a whole number"),
        ("retry.backoff", "exponentail", "did you mean 'exponential'"),
        ("output.mode", "random", "expected one of ordered, unordered"),
        ("on.error", "ignore", "expected one of fail, null, column"),
        ("keys", "1,2,3", "expected a JSON array"),
        ("keys", '{"a": 1}', "expected a JSON array, got dict"),
        ("keys", "[[1, [2]]]", "nests arrays or objects"),
        ("key.column", "a,,b", "comma-separated list"),
        ("key.column", "a,a", "lists a column twice"),
        ("redis.value.format", "xml", "expected one of json, hash, string"),
        ("retry.max-delay.ms", "10", "is smaller than retry.initial-delay.ms"),
    ],
)
def test_malformed_values_name_the_option(name: str, value: str, message: str) -> None:
    with pytest.raises(OptionError, match=message) as info:
        parse_options({**BASE, name: value})
    assert info.value.option == name
    assert str(info.value).startswith(f"option '{name}': ")


def test_connector_is_required_and_must_exist() -> None:
    with pytest.raises(OptionError, match="option 'connector': is required"):
        parse_options({"url": "redis://h"})
    with pytest.raises(ConnectorNotFoundError, match="did you mean 'redis'"):
        parse_options({"connector": "rediss"})


def test_options_pickle_and_hide_secrets_in_repr() -> None:
    opts = parse_options({**BASE, "url": "redis://app:hunter2@db:6379/0"})
    assert pickle.loads(pickle.dumps(opts)) == opts
    assert "hunter2" not in repr(opts)
    assert "redis://app:***@db:6379/0" in repr(opts)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz.-_", min_size=1, max_size=30))
def test_any_unknown_name_is_rejected_by_name(name: str) -> None:
    if name in KNOWN or name == "path" or name.startswith(tuple(f"{n}." for n in FIRST_PARTY)):
        return
    if name == "option.connector":  # a catalog table's options: the connector named there
        return
    with pytest.raises(OptionError) as info:
        parse_options({**BASE, name: "1"})
    assert info.value.option == name


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=-(10**12), max_value=10**12))
def test_integer_options_accept_exactly_the_whole_numbers_in_their_range(number: int) -> None:
    if 1 <= number <= 100_000:
        assert parse_options({**BASE, "capacity": str(number)}).capacity == number
    else:
        with pytest.raises(OptionError, match="option 'capacity': must be at"):
            parse_options({**BASE, "capacity": str(number)})


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("cache.shared.ttl.ms", "100000000000000000000", "must be at most 31,536,000,000"),
        ("cache.shared.ttl.ms", "1e20", "expected a whole number"),
        ("gc.threshold", "100000000000000000000", "must be at most 10,000,000"),
        ("gc.threshold", "1e20", "expected a whole number"),
        ("timeout.ms", "9" * 100, "expected a whole number of at most"),
        ("cache.max-rows", "4294967296", "must be at most 2,147,483,647"),
        ("retry.max-attempts", "0", "must be at least 1"),
        ("rate.limit", "1e20", "at most 1,000,000,000"),
        ("rate.limit", "inf", "at most 1,000,000,000"),
        ("hedge.after.ms", "1e20", "of at most 31,536,000,000"),
        ("capacity.latency-tolerance", "1e20", "at most 1000"),
        ("connection.max-age.ms", "-1", "must be 0 or more"),
        ("cache.shared.max-value-bytes", "10", "must be at least 64"),
    ],
)
def test_every_numeric_option_has_a_range_checked_up_front(
    name: str, value: str, message: str
) -> None:
    with pytest.raises(OptionError, match=f"option '{name}': .*{message}"):
        parse_options({**BASE, name: value})


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=20))
def test_arbitrary_text_never_crashes_the_parser(value: str) -> None:
    for name in ("capacity", "on.error", "keys", "key.column", "retry.backoff"):
        try:
            parse_options({**BASE, name: value})
        except OptionError as exc:
            assert exc.option == name


@pytest.mark.parametrize(
    "raw",
    [
        {"connector": "redis", "url": "redis://u:pw@h:6379/0", "redis.key.pattern": "u:{key}"},
        {
            "connector": "http",
            "url": "https://api/users/{key}",
            "http.json.path": "data.user",
            "http.header.Authorization.env": "API_TOKEN",
            "capacity": 7,
            "retry.on-miss": True,
            "timeout.ms": "250",
            "output.mode": "key-ordered",
            "cache.max-rows": "1000",
            "cache.ttl.ms": 60_000,
        },
        {
            "connector": "postgres",
            "url": "postgresql://u@h/db",
            "postgres.table": "users",
            "key.column": "tenant, user_id",
            "rate.limit.total": "100",
            "strategy": "auto",
        },
    ],
)
def test_parsed_options_turn_back_into_the_strings_that_parse_into_them(
    raw: dict[str, object],
) -> None:
    from lookup_source.settings import option_strings

    options = parse_options(option_strings(raw))
    text = options.to_strings()
    assert all(isinstance(v, str) for v in text.values())
    assert parse_options(text) == options
    split = options.split_over(4)  # what a surface hands on after splitting a total rate
    assert parse_options(split.to_strings()) == split
    assert "pw" not in repr(options)  # the text is kept out of repr (a URL may hold a password)


def test_options_not_made_by_parse_options_say_how_to_make_them() -> None:
    with pytest.raises(OptionError, match="build them with parse_options"):
        LookupOptions(connector="redis").to_strings()


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("u:{key:>999999999}", "is at most 1,024"),
        ("u:{key:.5000}", "is at most 1,024"),
        ("{key:0>2000}", "is at most 1,024"),
        ("u:{key:{key}}", "may not hold a placeholder"),  # a key choosing its own width
        ("u:{key:>{key}}", "may not hold a placeholder"),
        ("u:{key:x}", "is not a format for a key"),  # would fail every batch
    ],
)
def test_a_key_pattern_cannot_build_huge_keys(pattern: str, message: str) -> None:
    from lookup_source.spark.plan import LookupPlan

    options = {"connector": "redis", "url": "redis://h", "redis.key.pattern": pattern}
    with pytest.raises(OptionError, match=f"redis.key.pattern.*{message}"):
        LookupPlan.build(options, "id long, v string")
    fine = {**options, "redis.key.pattern": "u:{key:>20}"}
    assert LookupPlan.build(fine, "id long, v string").options.connector == "redis"
