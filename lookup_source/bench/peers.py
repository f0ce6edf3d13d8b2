"""The same per-key HTTP enrichment written for the engines a Spark user might pick instead:
Daft (an async ``@daft.cls`` method) and Ray Data (an async ``map_batches`` class), each with
``--in-flight`` requests at once per worker, ``--workers`` workers, aiohttp as their client
and every row checked. The bench's ``http-transports`` scenario runs this file with the
interpreter that has them (``--peers-python``); it imports nothing of asynclookup's, so that
interpreter needs only the peer and aiohttp::

    python lookup_source/bench/peers.py --engine daft \\
        --url 'http://127.0.0.1:8080/users/{key}' --keys 60000 --in-flight 100 --workers 2

It prints one JSON line: ``{"engine", "version", "rows", "seconds", "checked"}`` (``seconds``:
the lookups alone, the engine started), or ``{"engine", "skipped": reason}`` when the engine is
not installed; on stderr, a line where the lookups start and one where they end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

MARK_START = "asynclookup-peer: lookups start"
MARK_END = "asynclookup-peer: lookups end"


class _Fetcher:
    """One worker's aiohttp session, made on its event loop at first use: a GET per key, at
    most ``in_flight`` at once; the user's name, or None for a 404."""

    def __init__(self, template: str, in_flight: int) -> None:
        self.template = template
        self.in_flight = in_flight
        self._session: Any = None
        self._semaphore: asyncio.Semaphore | None = None

    async def name(self, key: int) -> str | None:
        import aiohttp

        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self.in_flight)
            self._session = aiohttp.ClientSession(connector=connector)
            self._semaphore = asyncio.Semaphore(self.in_flight)
        assert self._semaphore is not None
        url = self.template.replace("{key}", str(key))
        async with self._semaphore, self._session.get(url) as answer:
            if answer.status == 404:
                return None
            answer.raise_for_status()
            return str(json.loads(await answer.read())["name"])


def run_daft(template: str, keys: int, in_flight: int, workers: int) -> tuple[int, int, float]:
    import daft

    @daft.cls(max_concurrency=workers, use_process=True)
    class Lookup:
        def __init__(self, template: str, in_flight: int) -> None:
            self.fetcher = _Fetcher(template, in_flight)

        @daft.method(return_dtype=daft.DataType.string())
        async def __call__(self, key: int) -> str | None:
            return await self.fetcher.name(key)

    lookup = Lookup(template, in_flight)
    frame = daft.from_pydict({"user_id": list(range(keys))})
    with timed() as took:
        out = frame.with_column("name", lookup(frame["user_id"])).to_pydict()
    return (*_checked(out["user_id"], out["name"]), took[0])


def run_ray(template: str, keys: int, in_flight: int, workers: int) -> tuple[int, int, float]:
    import numpy as np
    import ray

    class Lookup:
        def __init__(self, template: str, in_flight: int) -> None:
            self.fetcher = _Fetcher(template, in_flight)

        async def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
            keys = batch["user_id"].tolist()
            names = await asyncio.gather(*(self.fetcher.name(k) for k in keys))
            return {"user_id": batch["user_id"], "name": np.array(names, dtype=object)}

    # a logical CPU for the read beside the workers' actors (with as many as actors, the
    # read waits for a CPU they never give back)
    ray.init(num_cpus=workers + 1, include_dashboard=False, log_to_driver=False)
    try:
        frame = ray.data.range(keys, override_num_blocks=workers * 4).rename_columns(
            {"id": "user_id"}
        )
        with timed() as took:  # from a started Ray: its actors' start is the job's
            out = frame.map_batches(
                Lookup,
                fn_constructor_args=(template, in_flight),
                concurrency=workers,
                batch_size=1000,
            ).to_pandas()
    finally:
        ray.shutdown()
    return (*_checked(out["user_id"].tolist(), out["name"].tolist()), took[0])


@contextmanager
def timed() -> Iterator[list[float]]:
    """Times the lookups, and says on stderr where they start and end (the bench measures
    the process tree's CPU between the two lines)."""
    took = [0.0]
    print(MARK_START, file=sys.stderr, flush=True)
    started = time.monotonic()
    try:
        yield took
    finally:
        took[0] = time.monotonic() - started
        print(MARK_END, file=sys.stderr, flush=True)


def _checked(keys: list[int], names: list[str | None]) -> tuple[int, int]:
    """(rows, rows whose name is the one the service holds for their key)."""
    good = sum(1 for key, name in zip(keys, names) if name == f"user-{key}")
    return len(keys), good


ENGINES = {"daft": (run_daft, "daft"), "ray": (run_ray, "ray")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=sorted(ENGINES), required=True)
    parser.add_argument("--url", required=True, help="a URL template with {key}")
    parser.add_argument("--keys", type=int, default=60_000)
    parser.add_argument("--in-flight", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    run, module = ENGINES[args.engine]
    try:
        version = __import__(module).__version__
        import aiohttp  # noqa: F401
    except ImportError as error:
        print(json.dumps({"engine": args.engine, "skipped": f"not installed here ({error})"}))
        return 0
    rows, checked, seconds = run(args.url, args.keys, args.in_flight, args.workers)
    print(
        json.dumps(
            {
                "engine": args.engine,
                "version": version,
                "rows": rows,
                "seconds": seconds,
                "checked": checked,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
