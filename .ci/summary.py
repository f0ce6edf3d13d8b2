"""Print what each CI leg ran, by test folder: passed / skipped / failed, from the JUnit files
the legs wrote (``.ci/run`` passes ``--junitxml=.ci-results/<leg>.xml``).

    python .ci/summary.py .ci-results/main.xml .ci-results/oldest.xml
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path


def folder(classname: str) -> str:
    """``tests.spark.test_sql`` -> ``tests/spark``; ``connectors.redis.tests.x`` ->
    ``connectors/redis``."""
    parts = classname.split(".")
    return "/".join(parts[:2]) if parts[0] in ("tests", "connectors", "examples") else parts[0]


def outcomes(path: Path) -> dict[str, Counter[str]]:
    counts: dict[str, Counter[str]] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        if case.find("skipped") is not None:
            outcome = "skipped"
        elif case.find("failure") is not None or case.find("error") is not None:
            outcome = "failed"
        else:
            outcome = "passed"
        counts.setdefault(folder(case.get("classname", "")), Counter())[outcome] += 1
    return counts


def main(paths: list[str]) -> None:
    for name in paths:
        path = Path(name)
        if not path.exists():
            continue
        counts = outcomes(path)
        total: Counter[str] = sum(counts.values(), Counter())
        print(
            f"   {path.stem}: {total['passed']} passed, {total['skipped']} skipped, "
            f"{total['failed']} failed"
        )
        for where in sorted(counts):
            c = counts[where]
            line = f"{c['passed']:4} passed {c['skipped']:4} skipped {c['failed']:3} failed"
            print(f"      {where:22} {line}")


if __name__ == "__main__":
    main(sys.argv[1:])
