"""What asynclookup reads of a DataFrame that PySpark offers no public API for: the one place.

Everything else in the package uses public PySpark only. Here:

- :func:`plan_text`: a DataFrame's plan as text, through the public ``DataFrame.explain``
  (which prints it; captured here), on classic sessions and over Spark Connect alike;
- :func:`summed_over_actions`: a Spark Connect ``Observation`` whose result adds up the
  values of every action (the client replaces them with each action's otherwise);
- :func:`builder_options`: the settings a ``SparkSession.builder`` holds so far (to add the SQL
  extension after the extensions and jars already set);
- :func:`jvm_decisions`: what the SQL extension decided lately in a session, read from the
  driver's JVM (:func:`clear_decisions` forgets them).

``tests/spark/test_internals.py`` checks both on every supported PySpark.
"""

from __future__ import annotations

import contextlib
import io
import threading
from typing import Any

_PRINTING = threading.Lock()  # redirect_stdout swaps sys.stdout for the whole process


def plan_text(df: Any, mode: str = "extended") -> str:
    """``df``'s plan as ``df.explain(mode=...)`` prints it (``extended``: the parsed, analyzed,
    optimized and physical plans; ``cost``: the optimized plan with its statistics)."""
    buffer = io.StringIO()
    with _PRINTING, contextlib.redirect_stdout(buffer):
        df.explain(mode=mode)
    return buffer.getvalue()


class _SummedResult(dict[str, Any]):
    """An observation's result that adds up every action's values, as an accumulator does:
    text values are joined line by line, numbers added."""

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in dict(*args, **kwargs).items():
            before = self.get(key)
            if isinstance(before, str) and before and isinstance(value, str):
                self[key] = f"{before}\n{value}" if value else before
            elif isinstance(before, (int, float)) and isinstance(value, (int, float)):
                self[key] = before + value
            else:
                self[key] = value


def summed_over_actions(observation: Any) -> Any:
    """``observation`` (a Spark Connect ``Observation``, already passed to ``observe``), its
    result from now on the sum over every action run with it. Without the attribute this
    relies on (a PySpark that changed it), the result is the last action's, as PySpark's own."""
    if isinstance(getattr(observation, "_result", None), dict):
        observation._result = _SummedResult(observation._result)
    return observation


def observed_result(observation: Any) -> dict[str, Any]:
    """What ``observation`` collected so far (empty before the first action)."""
    try:
        return dict(observation.get)
    except Exception:  # no action yet
        return {}


def builder_options(builder: Any) -> dict[str, Any] | None:
    """The settings ``builder`` (a ``SparkSession.builder``, classic or Connect) holds so far,
    or None when it is not one."""
    options = getattr(builder, "_options", None)
    if not isinstance(options, dict) or not callable(getattr(builder, "config", None)):
        return None
    return options


def jvm_decisions(spark: Any) -> list[tuple[str, str, str, str]]:
    """The SQL extension's recent decisions in this session (outcome, table, function,
    reason), oldest first; empty over Spark Connect or without the extension."""
    try:
        lines = list(spark._jvm.asynclookup.sql.Decisions.recent(spark._jsparkSession))
    except Exception:
        return []
    decisions = []
    for line in lines:  # outcome, table, function, reason
        parts = [*str(line).split("\t"), "", "", "", ""][:4]
        decisions.append((parts[0], parts[1], parts[2], parts[3]))
    return decisions


def clear_decisions(spark: Any) -> None:
    """Forget the SQL extension's decisions in this session (tests)."""
    with contextlib.suppress(Exception):
        spark._jvm.asynclookup.sql.Decisions.clear(spark._jsparkSession)


def session_key(spark: Any) -> str:
    """What tells a Spark session from the others of its driver (a classic session's UUID, a
    Spark Connect session's id); empty for none."""
    if spark is None:
        return ""
    for read in (
        lambda: spark._jsparkSession.sessionUUID(),
        lambda: spark.session_id,
        lambda: spark._session_id,
    ):
        with contextlib.suppress(Exception):
            value = read()
            if value:
                return str(value)
    return str(id(spark))
