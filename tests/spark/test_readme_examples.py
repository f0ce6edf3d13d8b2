"""Every Python and SQL example of the README and of the pages under docs/ runs as written, in
order, against the services the tests start (Redis, Postgres seeded with
docker/postgres-init.sql, the demo HTTP service).

The README's addresses are those of docker/compose.yaml; the test puts its own servers' in
their place. A block that begins with ``# continues: <heading>`` runs with what the block under
that heading defined; any other block runs alone.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.documentation import PAGES

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Example:
    heading: str
    language: str
    code: str
    line: int
    page: str = "README.md"

    @property
    def continues(self) -> str | None:
        match = re.match(r"# continues: (.+)\n", self.code)
        return match.group(1).strip() if match else None

    @property
    def needs(self) -> list[Any]:
        """The surfaces (SparkFeature) the example uses beyond lookup_join."""
        from lookup_source.spark.versions import (
            DATA_SOURCE,
            FILTER_PUSHDOWN,
            SQL_JOINS,
            TABLE_FUNCTION,
        )

        uses = {
            DATA_SOURCE: ('format("asynclookup")', "AsyncLookupDataSource", "USING asynclookup"),
            FILTER_PUSHDOWN: ("filterPushdown",),
            TABLE_FUNCTION: ("register_lookup_table(", "_lookup(TABLE("),
            SQL_JOINS: ("enable_sql_joins",),
        }
        return [feature for feature, marks in uses.items() if any(m in self.code for m in marks)]

    @property
    def id(self) -> str:
        heading = re.sub(r"[^a-z0-9]+", "-", self.heading.lower()).strip("-")
        page = "" if self.page == "README.md" else self.page.removeprefix("docs/")[:-3] + "-"
        return f"{page}line{self.line}-{heading}"


def examples() -> list[Example]:
    return [example for page in PAGES for example in page_examples(page)]


def page_examples(page: Path) -> list[Example]:
    found: list[Example] = []
    heading = ""
    name = str(page.relative_to(ROOT))
    lines = page.read_text().splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        fence = re.match(r"```(\w+)?$", line)
        if fence:
            language = fence.group(1) or ""
            end = index + 1
            while not lines[end].startswith("```"):
                end += 1
            if language in ("python", "sql"):
                code = "\n".join(lines[index + 1 : end]) + "\n"
                found.append(Example(heading, language, code, index + 1, name))
            index = end + 1
            continue
        if line.startswith("#"):
            heading = line.lstrip("#").strip().replace("`", "")
        index += 1
    return found


EXAMPLES = examples()


@pytest.fixture(scope="module")
def services(redis_srv: Any, postgres_srv: Any) -> Iterator[dict[str, str]]:
    from lookup_source.service import UserService

    async def seed() -> None:
        import asyncpg

        connection = await asyncpg.connect(postgres_srv.url)
        try:
            await connection.execute((ROOT / "docker" / "postgres-init.sql").read_text())
        finally:
            await connection.close()

    asyncio.run(seed())
    with UserService(users=10_000, latency_ms=1) as service:
        yield {
            "redis://localhost:6379/0": redis_srv.url,
            "postgresql://postgres@localhost:5432/postgres": postgres_srv.url,
            "http://localhost:8080": service.base_url,
        }


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("readme"))


NAMESPACES: dict[str, dict[str, Any]] = {}


def _localised(code: str, services: dict[str, str], workspace: str) -> str:
    for address, ours in {**services, "/tmp/asynclookup-example": workspace}.items():
        code = code.replace(address, ours)
    return code


def _namespace(example: Example) -> dict[str, Any]:
    if example.continues is None:
        return {"__name__": "readme_example"}
    for heading, namespace in NAMESPACES.items():
        if heading.startswith(example.continues):
            return dict(namespace)
    raise AssertionError(
        f"{example.page} line {example.line}: '# continues: {example.continues}' names no "
        "earlier example's heading"
    )


def _recording(spark: Any, original: Any) -> Any:
    """``RuntimeConfig.set`` that also restores the setting when the test ends."""

    def record(self: Any, key: str, value: Any) -> Any:
        _RESTORE.setdefault(key, spark.conf.get(key, None))
        return original(self, key, value)

    return record


_RESTORE: dict[str, Any] = {}


@pytest.fixture(autouse=True)
def _restore_settings(spark: Any) -> Iterator[None]:
    yield
    for key, value in _RESTORE.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)
    _RESTORE.clear()


def _statements(sql: str) -> list[str]:
    text = "\n".join(line.split("--", 1)[0] for line in sql.splitlines())
    return [statement.strip() for statement in text.split(";") if statement.strip()]


def test_the_first_example_needs_no_service(spark: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """The README's first example runs as written, with nothing but Spark."""
    first = next(e for e in EXAMPLES if e.language == "python")
    assert first.heading.startswith("A first lookup join") and first.continues is None
    namespace: dict[str, Any] = {"__name__": "readme_example"}
    exec(compile(first.code, "README.md", "exec"), namespace)
    rows = namespace["enriched"].orderBy("user_id").collect()
    assert len(rows) == 1_000 and rows[1].name == "user-1" and rows[1].tier == 1
    assert rows[950].name is None  # a missing key keeps its row, with nulls
    assert "user-0" in capsys.readouterr().out


def test_the_readme_has_examples_of_every_surface() -> None:
    code = "".join(example.code for example in EXAMPLES)
    surfaces = ("lookup_join(", "readStream", 'format("asynclookup")', "_lookup(TABLE(", "fetch=")
    for surface in surfaces:
        assert surface in code


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.id for e in EXAMPLES])
def test_the_example_runs_as_written(
    example: Example,
    spark: Any,
    services: dict[str, str],
    workspace: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for feature in example.needs:
        if not feature.available():
            pytest.skip(feature.message())
    monkeypatch.setenv("PGPASSWORD", "asynclookup")  # the tests' Postgres trusts anyone
    # the session is shared with other tests: leave its settings as they were
    monkeypatch.setattr(type(spark.conf), "set", _recording(spark, type(spark.conf).set))
    code = _localised(example.code, services, workspace)
    if example.language == "sql":
        for statement in _statements(code):
            spark.sql(statement).collect()
        return
    namespace = _namespace(example)
    exec(compile(code, f"{example.page}:{example.line}", "exec"), namespace)
    NAMESPACES.setdefault(example.heading, namespace)
    out = capsys.readouterr().out
    for heading, check in CHECKS.items():  # what the examples show is what the stores hold
        if example.heading.startswith(heading):
            check(namespace, out, workspace)


def _names(df: Any, key: str = "event_id") -> list[Any]:
    return [row.name for row in df.orderBy(key).collect()]


def _check_lookup_join(namespace: dict[str, Any], out: str, workspace: str) -> None:
    assert _names(namespace["enriched"]) == ["Ada", "Grace", None, None]


def _check_streaming(namespace: dict[str, Any], out: str, workspace: str) -> None:
    spark = namespace["spark"]
    assert _names(spark.read.parquet(f"{workspace}/enriched")) == ["Ada", "Grace"]


def _check_metrics(namespace: dict[str, Any], out: str, workspace: str) -> None:
    m = namespace["m"]
    assert m.rows == 4 and m.missing_keys == 1 and m.failed_keys == 0 and m.requests >= 1


def _check_function(namespace: dict[str, Any], out: str, workspace: str) -> None:
    assert _names(namespace["enriched"]) == ["user-10", "user-11", None, "user-99"]
    assert "user-10" in out and "user-99" in out  # fetch_many printed them too


def _check_columns(namespace: dict[str, Any], out: str, workspace: str) -> None:
    assert _names(namespace["enriched"]) == ["Ada", "Grace", None, None]  # from Redis


def _check_strategy(namespace: dict[str, Any], out: str, workspace: str) -> None:
    assert _names(namespace["enriched"]) == ["Ada", "Grace", None, None]
    from lookup_source.spark.versions import BROADCAST

    if not BROADCAST.available():  # PySpark 3.5: no data source to scan with
        assert (
            "lookup - strategy=broadcast and scan (a scan of the table through the data source, "
            "joined) needs" in out
        )
        return
    assert "broadcast - the table (~2 rows) fits strategy.broadcast.max-rows" in out, out
    assert "and the input's size is unknown" in out  # Spark cannot size a local DataFrame


def _check_sql_join(namespace: dict[str, Any], out: str, workspace: str) -> None:
    # the Postgres users of docker/postgres-init.sql: 10 and 11 exist, 99 too; a null key
    assert "user-10" in out and "user-11" in out and "user-99" in out, out
    join = namespace["spark"].sql(
        "SELECT e.event_id, u.name FROM events e LEFT JOIN users u ON e.user_id = u.user_id"
    )
    assert "ArrowEvalPythonUDTF" in join._jdf.queryExecution().executedPlan().toString()
    assert sorted(join.collect()) == [(1, "user-10"), (2, "user-11"), (3, None), (4, "user-99")]


def _check_semi_anti(namespace: dict[str, Any], out: str, workspace: str) -> None:
    spark = namespace["spark"]
    exists = spark.sql(
        "SELECT v.event_id FROM visits v WHERE EXISTS "
        "(SELECT 1 FROM users u WHERE u.user_id = v.user_id)"
    )
    anti = spark.sql(
        "SELECT v.event_id FROM visits v LEFT ANTI JOIN users u ON v.user_id = u.user_id"
    )
    tiers = spark.sql(
        "SELECT v.event_id, t.tier FROM visits v LEFT JOIN user_tiers t "
        "ON v.user_id = t.user_id AND v.ts >= t.valid_from AND v.ts < t.valid_to"
    )
    assert sorted(r[0] for r in exists.collect()) == [1, 2, 3]
    assert [r[0] for r in anti.collect()] == [4]  # the null key
    assert sorted(tuple(r) for r in tiers.collect()) == [
        (1, "free"),
        (2, "plus"),
        (3, "pro"),
        (4, None),
    ]
    from lookup_source.spark.sql_extension import extension_active

    if extension_active(spark):
        for frame in (exists, anti, tiers):
            assert "ArrowEvalPythonUDTF" in frame._jdf.queryExecution().executedPlan().toString()
    assert "plus" in out and "pro" in out


def _check_data_source(namespace: dict[str, Any], out: str, workspace: str) -> None:
    if "users" in namespace:
        assert _names(namespace["users"], "user_id") == ["Ada", "Grace"]


def _check_sql(namespace: dict[str, Any], out: str, workspace: str) -> None:
    assert "user-10" in out and "user-11" in out  # from Postgres' public.users


def _check_http(namespace: dict[str, Any], out: str, workspace: str) -> None:
    assert "user-10" in out and "user-99" in out  # from the demo service


def _check_listener(namespace: dict[str, Any], out: str, workspace: str) -> None:
    """The listener's Prometheus counters hold the micro-batch's figures (4 rows: 3 keys, one
    missing), once its progress event has reached it."""
    import time

    spark, registry = namespace["spark"], namespace["registry"]
    assert "'rows': 4" in out and "'missing_keys': 1" in out, out
    try:
        deadline = time.monotonic() + 30
        while registry.get_sample_value("asynclookup_rows_total", {"lookup": "users"}) != 4:
            assert time.monotonic() < deadline, "the listener saw no progress of the lookup"
            time.sleep(0.1)
        assert registry.get_sample_value("asynclookup_missing_keys_total", {"lookup": "users"}) == 1
        assert registry.get_sample_value("asynclookup_failed_keys_total", {"lookup": "users"}) == 0
        assert registry.get_sample_value("asynclookup_requests_total", {"lookup": "users"}) >= 1
        text = namespace["generate_latest"](registry).decode()
        assert 'asynclookup_rows_total{lookup="users"} 4.0' in text
    finally:
        spark.streams.removeListener(namespace["listener"])
    table = spark.sql("SELECT * FROM clicks_enriched").orderBy("event_id")
    names = [row.name for row in table.collect()]
    assert names == ["Ada", "Grace", "Ada", None]


CHECKS = {
    "Each micro-batch's metrics, in a listener": _check_listener,
    "Enrich a DataFrame": _check_lookup_join,
    "Streaming": _check_streaming,
    "Metrics": _check_metrics,
    "Your own async function": _check_function,
    "Answers in columns": _check_columns,
    "Lookups, a broadcast or a scan": _check_strategy,
    "Read a dimension table by key": _check_data_source,
    "SQL": _check_sql,
    "A SQL JOIN is the lookup": _check_sql_join,
    "Semi, anti and point-in-time joins": _check_semi_anti,
    "HTTP connector": _check_http,
}
