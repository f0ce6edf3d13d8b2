"""The ceiling: the raw async client alone, outside Spark, in as many processes as tasks,
asking the keys asynclookup asks, its CPU its own count of the lookups alone."""

from __future__ import annotations

import multiprocessing
import time
from typing import Any

from lookup_source.bench import timing
from lookup_source.bench.clients import RawClient
from lookup_source.bench.context import Context, Result
from lookup_source.bench.stores import Store


def _raw_process(
    store: Store,
    keys: list[int],
    capacity: int,
    ready: Any,
    go: Any,
    measured: Any,
    http_client: str = "aiohttp",
    loop: str = "asyncio",
) -> None:
    """One raw client process: opens its client, says it is ready, waits for the go, looks its
    keys up, hands back the wall and CPU seconds of the lookups alone, and closes its client
    once the measure is taken (a Postgres backend's exit is the server's work, not a lookup's:
    closing 10 connections in the measured stretch added about 0.5 core-µs per row)."""
    import asyncio

    async def main() -> None:
        client = RawClient(store, capacity, http_client)
        await client.open()
        try:
            ready.put(None)
            go.wait()
            started, cpu = time.monotonic(), time.process_time()
            await client.lookup(keys)
            ready.put((time.monotonic() - started, time.process_time() - cpu))
            measured.wait(600)
        finally:
            await client.close()

    try:
        if loop == "uvloop":
            import uvloop

            uvloop.run(main())
        else:
            asyncio.run(main())
    except BaseException as error:  # said to the parent, which would otherwise wait for it
        ready.put(f"the raw client failed: {error!r}")
        raise


def _raw_answer(ready: Any) -> Any:
    answer = ready.get(timeout=600)
    if isinstance(answer, str):
        raise RuntimeError(answer)
    return answer


def ceiling(
    ctx: Context,
    keys_per_task: list[list[int]],
    rows: int,
    *,
    http_client: str = "aiohttp",
    loop: str = "asyncio",
) -> Result:
    """The raw async client alone, outside Spark, in as many processes as tasks, asking the
    keys asynclookup asks (each batch's distinct keys). Each process opens its client and
    connections before it is measured (asynclookup's live as long as the worker); its CPU is
    what it spends on the lookups (its own count: the meter would see its start too).
    ``http_client`` and ``loop``: which client (per-key HTTP: aiohttp or pyreqwest) on which
    event loop."""
    context = multiprocessing.get_context("fork")
    ready, go, measured = context.Queue(), context.Event(), context.Event()
    processes = [
        context.Process(
            target=_raw_process,
            args=(ctx.store, keys, ctx.capacity, ready, go, measured, http_client, loop),
        )
        for keys in keys_per_task
    ]
    for process in processes:
        process.start()
    try:
        for _ in processes:
            _raw_answer(ready)
        if timing.METER is not None:
            timing.METER.start()
        started = time.monotonic()
        go.set()
        done = [_raw_answer(ready) for _ in processes]
        seconds = time.monotonic() - started
        if timing.METER is not None:
            timing.LAST_CPU = timing.METER.stop()
            timing.LAST_CPU.seconds["raw_client"] = sum(cpu for _, cpu in done)
    finally:  # no process left waiting, whatever happened here
        go.set()
        measured.set()
        for process in processes:
            process.join()
    requests = sum(len(k) for k in keys_per_task)
    decode = "" if ctx.store.kind == "postgres" else " + msgspec decode"
    which = f" ({http_client}, {loop})" if ctx.store.kind == "http" and not ctx.store.batch else ""
    return ctx.result(
        f"raw async client alone{which}{decode}, {len(processes)} processes",
        rows,
        seconds,
        note=f"{requests:,} keys, as asynclookup sends them; connections opened before",
    )
