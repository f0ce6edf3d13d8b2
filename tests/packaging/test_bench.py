"""The benchmark keeps working: a tiny run of every scenario and method (no speed asserted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lookup_source.bench.proxy import LatencyProxy
from lookup_source.spark.versions import SQL_JOINS


@pytest.mark.timeout(900)  # every scenario, small: the run's own limit below holds it
def test_bench_smoke(tmp_path: Path, redis_srv: Any, postgres_srv: Any) -> None:
    command = [
        sys.executable,
        "-m",
        "lookup_source",
        "bench",
        "--scenarios",
        "http-2,http-batch-2,redis,redis-net,postgres,sweep,memory,stream,tail,plan,budget,"
        "http-transports",
        "--rows",
        "3000",
        "--http-rows",
        "1000",
        "--sample-rows",
        "40",
        "--users",
        "300",
        "--capacity",
        "20",
        "--sweep-capacities",
        "5,20",
        "--sweep-latency-ms",
        "20",
        "--memory-rows",
        "2000,4000",
        "--fanout-matches",
        "50",
        "--fanout-rows",
        "100,200",
        "--stream-batches",
        "3",
        "--stream-warm-up",
        "2",
        "--stream-trigger-ms",
        "200",
        "--plan-table-rows",
        "4000",
        "--plan-inputs",
        "400,8000",
        "--plan-point-in-time-rows",
        "600",
        "--budget-keys",
        "200",
        "--transports-keys",
        "600",
        "--out",
        str(tmp_path),
        "--redis-url",
        redis_srv.url,
        "--postgres-url",
        postgres_srv.url,
    ]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads((tmp_path / "results.json").read_text())
    results = data["results"]
    methods = {(r["scenario"], r["method"]) for r in results}
    for scenario in ("http-get-2ms", "http-batch-2ms", "redis", "redis, 0.5 ms each way"):
        for method in (
            "asynclookup ordered",
            "asynclookup SQL table function",
            "sync per-row UDF",
            "thread pool of 20 in mapInArrow",
            "Spark floor: mapInArrow, no I/O",
        ):
            assert (scenario, method) in methods, (scenario, method)
        assert any(m.startswith("raw async client") for s, m in methods if s == scenario)
    for scenario in ("redis", "postgres", "http-batch-2ms"):
        assert any(m.startswith("sync batched loop") for s, m in methods if s == scenario)
    fetched = {
        (r["scenario"], r["method"]): r["rows"]
        for r in results
        if "your own function" in r["method"]
    }
    assert fetched == {
        ("http-get-2ms", "asynclookup fetch= (your own function)"): 1000,
        ("http-batch-2ms", "asynclookup fetch_many= (your own function)"): 3000,
    }
    assert ("redis", "asynclookup scan + broadcast join") in methods
    assert ("postgres", "Spark JDBC read + broadcast join") in methods
    assert ("http-get-2ms", "Little's law bound") in methods
    ours = [r for r in results if r["method"] == "asynclookup ordered" and r["scenario"] != "sweep"]
    assert all(r["rows"] > 0 and r["rows_per_s"] > 0 and r["requests"] != 0 for r in ours)
    sweep = [r for r in results if r["scenario"].startswith("sweep")]
    assert {(r["capacity"], r["method"].split(",")[0]) for r in sweep} >= {
        (5, "asynclookup ordered"),
        (20, "Arrow UDF"),
    }
    memory = [r for r in results if r["scenario"] == "memory (redis)"]
    assert [r["rows"] for r in memory] == [2000, 4000] and all(r["peak_memory_mb"] for r in memory)
    fanned = [r for r in results if r["scenario"].startswith("memory fan-out")]
    assert [r["rows"] for r in fanned] == [100 * 50, 200 * 50]  # every match of the hot key
    assert all(r["peak_memory_mb"] for r in fanned)
    strategies = {r["method"]: r["note"] for r in results if r["scenario"] == "redis"}
    assert strategies["asynclookup strategy=broadcast"].startswith("broadcast: strategy=broadcast")
    assert strategies["asynclookup strategy=auto"].startswith("broadcast: the cheapest by estimate")
    assert "; the table ~300 rows, the input ~3,000 rows" in strategies["asynclookup strategy=auto"]
    cpu = next(r for r in results if r["method"] == "asynclookup ordered")["cpu_us_per_row"]
    assert cpu["total"] > 0 and cpu["python_workers"] > 0 and cpu["spark_jvm"] > 0
    assert "CPU per row, core-µs" in (tmp_path / "results.md").read_text()
    assert {t["scenario"] for t in data["targets"]} >= {"redis", "postgres", "memory"}
    table = (tmp_path / "results.md").read_text()
    assert "| redis | uniform | asynclookup ordered |" in table
    assert "### capacity sweep" in table and "### targets" in table
    assert "round trip" in table  # the -net scenario reports the round trip it measured
    stream = {(r["store"], r["method"]): r for r in data["stream"]}
    assert stream[("redis", "Spark floor: mapInArrow, no I/O")]["batches"] == 3
    for store in ("redis", "postgres", "redis TLS", "postgres TLS"):
        kept = stream[(store, "asynclookup, clients kept by the workers")]
        per_task = stream[(store, "asynclookup, a client per task (connection.max-idle.ms=0)")]
        assert kept["batches"] == per_task["batches"] == 3 and kept["added_ms"] is not None
        assert kept["connections_per_batch"] < per_task["connections_per_batch"]
        alone = stream[(store, "one task in process, 250 keys, a kept client")]
        assert alone["batches"] == 15 and alone["median_ms"] > 0  # 5 x --stream-batches
    assert "### stream: " in table
    assert (
        "ms, key-ordered" not in table and "| redis | uniform | asynclookup key-ordered |" in table
    )
    tails = {r["method"]: r for r in data["tail"]}
    second = tails["shared tier, second run"]
    assert tails["no hedging"]["rows"] == 1000
    # every key from the shared tier, unless a read of it timed out (cache.shared.timeout.ms,
    # 100 ms: beside another Spark job, 291 keys went to the store): those keys go to the
    # store, as documented, and the worker counts it
    assert second["requests"] == 0 or (second["shared_errors"] > 0 and second["requests"] <= 1000)
    slow, hedged = tails["slow first answers, no hedging"], tails["slow first answers, p95"]
    assert slow["hedges"] == 0 and hedged["hedges_won"] > 0
    assert all(
        t["p50_ms"] > 0 and t["p99_ms"] >= t["p50_ms"] for m, t in tails.items() if t["requests"]
    )
    assert "| slow first answers, hedge.after.ms=50 |" in table
    plans = data["plan"]
    runs = [p for p in plans if p["method"] in ("lookup", "broadcast", "scan", "auto")]
    assert {(p["input_rows"], p["method"]) for p in runs} == {
        (n, m) for n in (400, 8000) for m in ("lookup", "broadcast", "scan", "auto")
    }
    assert all(p["seconds"] > 0 and "ANSWER DIFFERS" not in p["note"] for p in runs)
    budgets = {r["method"]: r for r in data["budget"]}
    assert len(budgets) == 4 and all(r["rows"] == 200 for r in budgets.values())
    assert budgets["budget.*"]["peak_in_flight"] <= 8 and budgets["budget.*"]["answered"] == 200
    assert "### budget: a service allowing 8 in flight" in table
    jdbc = [p for p in plans if p["method"] == "Spark JDBC + join"]
    assert all(p["seconds"] > 0 or "no JDBC driver" in p["note"] for p in jdbc)
    checks = {p["checksum"] for p in runs if p["input_rows"] == 8000}
    assert len(checks) == 1  # every plan gave the same rows
    auto = {p["input_rows"]: p["note"] for p in plans if p["method"] == "auto"}
    assert all(
        note.startswith("chose ") and "the cheapest by estimate" in note for note in auto.values()
    )
    assert "## Plans: lookups, a broadcast or a scan" in table
    assert any(p["method"] == "data source scan" and p["rows_per_s"] > 0 for p in plans)
    assert (tmp_path / "plans.png").stat().st_size > 1000
    in_time = {p["method"]: p for p in plans if p["method"].startswith("point-in-time: ")}
    assert bool(in_time) == SQL_JOINS.available()  # the SQL extension's JOIN: PySpark 4.1+
    if in_time:
        assert in_time["point-in-time: SQL JOIN"]["note"] == "runs as lookups"
        assert in_time["point-in-time: SQL JOIN, rewrite off"]["note"] == "Spark's scan and join"
        assert len({p["checksum"] for p in in_time.values()}) == 1, in_time  # the same rows
        assert all(p["rows"] == 600 and p["seconds"] > 0 for p in in_time.values())
    streamed = {p["method"]: p for p in plans if p["method"].startswith("stream")}
    assert streamed["stream: lookup_join"]["rows"] > 0
    assert "busy" in streamed["stream: lookup_join"]["note"]
    assert "| a stream joined to the table |" in table
    assert (tmp_path / "throughput.png").stat().st_size > 1000
    assert (tmp_path / "capacity.png").stat().st_size > 1000
    transports = {(r["kind"], r["client"], r["loop"]): r for r in data["http_transports"]}
    ran = [r for r in transports.values() if r["kind"] in ("asynclookup", "raw", "floor")]
    assert {r["kind"] for r in ran} == {"asynclookup", "raw", "floor"}
    for r in transports.values():
        if r["kind"] == "peer":  # no --peers-python: each peer said to be skipped, never failed
            assert r["rows"] == 0 and r["note"].startswith("skipped: no --peers-python"), r
        elif not r["note"].startswith("skipped: "):  # a transport installed here
            assert r["rows"] == 600 and r["cpu_us_per_row"]["total"] > 0, r
    assert transports[("asynclookup", "aiohttp", "asyncio")]["rows"] == 600  # every Python
    assert transports[("asynclookup", "aiohttp", "asyncio")]["method"].endswith(
        "(aiohttp, asyncio)"
    )
    assert "### http-transports: per-key GET at 5 ms, 600 distinct keys" in table


def test_a_peer_that_is_not_installed_is_skipped_with_its_reason() -> None:
    """The peers script runs in an interpreter of its own; without the engine it says so."""
    import importlib.util

    script = Path(__file__).parents[2] / "lookup_source" / "bench" / "peers.py"
    for engine in ("daft", "ray"):
        if importlib.util.find_spec(engine) is not None:
            continue
        done = subprocess.run(
            [sys.executable, str(script), "--engine", engine, "--url", "http://x/{key}"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        said = json.loads(done.stdout.strip().splitlines()[-1])
        assert said["engine"] == engine and "not installed here" in said["skipped"]


def test_latency_proxy_delays_each_way_and_keeps_data_intact(redis_srv: Any) -> None:
    import time

    import redis

    direct = redis.Redis(host=redis_srv.host, port=redis_srv.port, password=redis_srv.password)
    with LatencyProxy(redis_srv.host, redis_srv.port, delay_ms=5) as proxy:
        client = redis.Redis(host="127.0.0.1", port=proxy.port, password=redis_srv.password)
        value = os.urandom(300_000)
        client.set("asynclookup:proxy:test", value)
        assert direct.get("asynclookup:proxy:test") == value
        assert client.get("asynclookup:proxy:test") == value
        round_trips = []
        for _ in range(20):
            started = time.perf_counter()
            client.ping()
            round_trips.append(time.perf_counter() - started)
        # 5 ms each way, never less; plus the proxy's own hops, which a busy machine stretches
        # for some pings (the quickest of 20 is the proxy's own cost)
        assert min(round_trips) >= 0.010
        assert min(round_trips) < 0.060, round_trips
        client.delete("asynclookup:proxy:test")
        client.close()
    direct.close()
