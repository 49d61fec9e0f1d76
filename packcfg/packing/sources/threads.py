"""Work side by side while keeping order: `ordered_map` (a thread pool) and `prefetched` (one worker ahead)."""

from __future__ import annotations

import collections
import os
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor
from typing import Any, TypeVar

T = TypeVar("T")
U = TypeVar("U")

# threads that read a source (Parquet row groups, JSONL blocks) side by side
READ_WORKERS = min(2, os.cpu_count() or 1)


def ordered_map(
    fn: Callable[[U], T],
    items: Iterable[U],
    workers: int,
    ahead: int | None = None,
    pool: Executor | None = None,
) -> Iterator[T]:
    """fn(item) for each item, computed in `workers` threads (or in `pool`, which this then shuts down),
    yielded in the order of `items`: at most `ahead` (default `workers`) results wait beyond the one being
    consumed. An exception of fn is raised here, in its place in the sequence; when the consumer stops early
    the pending work is cancelled."""
    from concurrent.futures import Future, ThreadPoolExecutor

    ahead = workers if ahead is None else ahead
    it = iter(items)
    if pool is None:
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="packcfg-worker")
    try:
        pending: collections.deque[Future[T]] = collections.deque()
        for item in it:
            pending.append(pool.submit(fn, item))
            if len(pending) > ahead:
                break
        while pending:
            result = pending.popleft().result()
            nxt = next(it, _DONE)
            if nxt is not _DONE:
                pending.append(pool.submit(fn, nxt))
            yield result
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


_DONE = object()


def prefetched(items: Iterator[T], depth: int = 2) -> Iterator[T]:
    """What `items` yields, in order, computed up to `depth` items ahead in a worker thread.

    For readers whose work releases the GIL (pyarrow decoding, numpy): on two cores the next batch is read
    while this one is written. An exception of `items` is raised here, in its place in the sequence; when
    the consumer stops early the worker stops at its next item and closes `items`.
    """
    q: queue.Queue[tuple[bool, Any]] = queue.Queue(depth)
    stop = threading.Event()

    def put(entry: tuple[bool, Any]) -> bool:
        while not stop.is_set():
            try:
                q.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def work() -> None:
        try:
            for x in items:
                if not put((False, x)):
                    return
            put((True, None))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
            put((True, exc))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    worker = threading.Thread(target=work, name="packcfg-prefetch", daemon=True)
    worker.start()
    try:
        while True:
            last, value = q.get()
            if last:
                if value is not None:
                    raise value
                return
            yield value
    finally:
        stop.set()
        worker.join()
