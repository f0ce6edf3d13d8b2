"""What a run has measured so far (:class:`Collected`), and the results files written from it:
``results.md`` (every scenario's report, then what failed) and ``results.json``."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from lookup_source.bench.budget import BudgetResult, budget_report
from lookup_source.bench.budget import as_json as budget_json
from lookup_source.bench.context import Result
from lookup_source.bench.journal import Journal
from lookup_source.bench.plan_report import as_json as plan_json
from lookup_source.bench.plan_report import plan_report
from lookup_source.bench.plan_result import PlanResult
from lookup_source.bench.report import report, targets
from lookup_source.bench.stream import StreamResult, stream_report
from lookup_source.bench.tail import TailResult, tail_report
from lookup_source.bench.tail import as_json as tail_json
from lookup_source.bench.transports import TransportRun
from lookup_source.bench.transports_report import as_json as transports_json
from lookup_source.bench.transports_report import transports_report


@dataclass
class Collected:
    """Everything a run has measured so far, by scenario."""

    machine: str = ""
    results: list[Result] = field(default_factory=list)
    streams: list[StreamResult] = field(default_factory=list)
    tails: list[TailResult] = field(default_factory=list)
    transports: list[TransportRun] = field(default_factory=list)
    plans: list[PlanResult] = field(default_factory=list)
    budgets: list[BudgetResult] = field(default_factory=list)


def write_results(got: Collected, args: Any, journal: Journal) -> str:
    """The results files, from what is measured so far; the Markdown text."""
    text = report(got.results, args, got.machine)
    if got.streams:
        text += "\n".join(["", *stream_report(got.streams, args)])
    if got.tails:
        text += "\n".join(["", *tail_report(got.tails, args)])
    if got.transports:
        text += "\n".join(["", *transports_report(got.transports, args)])
    if got.plans:
        text += "\n".join(["", *plan_report(got.plans, args)])
    if got.budgets:
        text += "\n".join(["", *budget_report(got.budgets, args)])
    text += "\n".join(journal.report())
    with open(os.path.join(args.out, "results.md"), "w") as handle:
        handle.write(text)
    with open(os.path.join(args.out, "results.json"), "w") as handle:
        json.dump(
            {
                "machine": got.machine,
                "arguments": vars(args),
                "results": [{**asdict(r), "rows_per_s": r.rows_per_s} for r in got.results],
                "stream": [asdict(r) for r in got.streams],
                "tail": tail_json(got.tails),
                "http_transports": transports_json(got.transports),
                "plan": plan_json(got.plans),
                "budget": budget_json(got.budgets),
                "failed": [{"what": w, "reason": r} for w, r in journal.failures],
                "targets": [
                    {"scenario": s, "target": t, "ratio": r, "met": ok}
                    for s, t, r, ok in targets(got.results)
                ],
            },
            handle,
            indent=2,
        )
    return text
