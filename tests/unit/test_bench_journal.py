"""A bench run keeps its results: each method's line as it ends, the results files written
after each, and a method or a scenario that fails kept as failed with its reason, the rest of
the run going on (no Spark here: the run's Spark parts are stand-ins)."""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lookup_source.bench import journal, plan, run
from lookup_source.bench.arguments import add_arguments
from lookup_source.bench.methods import Result


def arguments(tmp_path: Path, scenarios: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(["--scenarios", scenarios, "--out", str(tmp_path), "--no-plot"])


@pytest.fixture
def no_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    @contextlib.contextmanager
    def session(args: Any, *, reuse_workers: bool) -> Iterator[Any]:
        yield object()

    monkeypatch.setattr(run, "spark_session", session)
    monkeypatch.setattr(run, "_machine", lambda spark: "a test machine")
    monkeypatch.setattr(run, "_warm_up", lambda spark, args: None)


def test_a_failing_scenario_keeps_every_other_result(
    tmp_path: Path, no_spark: None, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    def scenario(spark: Any, name: str, distribution: str, args: Any) -> list[Result]:
        if name == "redis":
            raise ConnectionError("redis went away\nwith a second line")
        journal.JOURNAL.done(f"{name}: measured")
        return [Result(name, distribution, "asynclookup (ordered)", 1_000, 0.5)]

    def failing_plan(spark: Any, args: Any, results: list[Any]) -> list[Any]:
        results.append(plan.PlanResult(400, 100, "lookup", 0.25, 400))
        raise RuntimeError("the stream part: fewer than 50 micro-batches")

    monkeypatch.setattr(run, "run_scenario", scenario)
    monkeypatch.setattr(run, "run_plan", failing_plan)
    code = run.run_bench(arguments(tmp_path, "http-5,redis,postgres,plan"))
    assert code == 1  # something failed: said by the exit code, after every result
    out = capsys.readouterr().out
    assert "    = http-5: measured" in out and "    = postgres: measured" in out
    assert "    ! scenario redis (uniform) FAILED: ConnectionError: redis went away" in out
    text = (tmp_path / "results.md").read_text()
    assert "http-5" in text and "postgres" in text and "| 400 | 100 | lookup | 0.25 |" in text
    assert "## What failed (the rest of the run went on)" in text
    assert "- scenario plan: RuntimeError: the stream part: fewer than 50 micro-batches" in text
    saved = json.loads((tmp_path / "results.json").read_text())
    assert [r["scenario"] for r in saved["results"]] == ["http-5", "postgres"]
    assert [f["what"] for f in saved["failed"]] == ["scenario redis (uniform)", "scenario plan"]
    assert saved["plan"][0]["method"] == "lookup"


def test_results_are_written_as_each_method_ends(
    tmp_path: Path, no_spark: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []

    def scenario(spark: Any, name: str, distribution: str, args: Any) -> list[Result]:
        journal.JOURNAL.done(f"{name}: one method")  # the results file is written now
        seen.append((tmp_path / "results.md").read_text())
        return []

    monkeypatch.setattr(run, "run_scenario", scenario)
    assert run.run_bench(arguments(tmp_path, "http-5,http-20")) == 0
    assert len(seen) == 2 and all(text.startswith("Machine: a test machine") for text in seen)


def test_a_failing_plan_method_is_kept_and_the_next_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    results: list[plan.PlanResult] = []
    measure = plan.Measure(results, 400, 100)
    monkeypatch.setattr(plan, "best_of", lambda frame: 0.5)
    monkeypatch.setattr(plan, "checksum", lambda frame: (400, 7))

    def broken() -> Any:
        raise ValueError("no such table")

    measure("Spark JDBC + join", lambda: "frame", reference=True)
    measure("scan", broken)
    measure("lookup", lambda: "frame")
    assert [(r.method, r.seconds, r.note) for r in results] == [
        ("Spark JDBC + join", 0.5, ""),
        ("scan", 0.0, "FAILED: ValueError: no such table"),
        ("lookup", 0.5, ""),
    ]
