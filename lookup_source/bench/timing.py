"""The timer every method runs its Spark action under (:func:`timed`), with the CPU meter the
runner sets (:data:`METER`) and the CPU it read last (:data:`LAST_CPU`)."""

from __future__ import annotations

import time
from typing import Any

from lookup_source.bench.cpu import CpuMeter, CpuSeconds

METER: CpuMeter | None = None
"""Set by the runner: :func:`timed` measures the CPU of what it times with it."""

LAST_CPU: CpuSeconds | None = None
"""The CPU seconds, by process group, of the last :func:`timed` action."""


def timed(df: Any) -> float:
    """Seconds to compute every row of ``df`` (written nowhere); its CPU by process group goes
    to :data:`LAST_CPU` when a :data:`METER` is set."""
    global LAST_CPU
    if METER is not None:
        METER.start()
    started = time.monotonic()
    df.write.format("noop").mode("overwrite").save()
    seconds = time.monotonic() - started
    if METER is not None:
        LAST_CPU = METER.stop()
    return seconds
