#!/usr/bin/env python3
"""What an awaited event costs a Python handler, natively: the Python SDK's
own Task (weir_guest/io.py) against an asyncio Task stepped with
run_until_complete, as an asyncio-based SDK would step it per gateway call.
Each iteration starts a hook's coroutine, which awaits a Future; the Future
is settled (the event arrives) and the coroutine resumes to its end. Also a
plain synchronous hook call, for scale. Best of 5 rounds.

Run: python3 benches/py-async.py
"""

import asyncio
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "guest-sdk" / "python"))

from weir_guest import io  # noqa: E402
from weir_guest.io import Future, Task  # noqa: E402

N = 50_000


class _Runtime:
    """Just what io.Future and io.Task read of the runtime."""
    ctx = None
    in_call = True
    upgrading = False


io._rt = _Runtime()


async def hook(f):
    return await f


def weir_task():
    ready = io._ready
    t0 = time.perf_counter()
    for _ in range(N):
        f = Future()
        Task(hook(f), None)
        f.set_result(1)
        while ready:
            fn, fut = ready.popleft()
            fn(fut)
    return (time.perf_counter() - t0) / N * 1e9


def asyncio_task(loop):
    t0 = time.perf_counter()
    for _ in range(N):
        f = loop.create_future()
        t = loop.create_task(hook(f))
        f.set_result(1)
        loop.run_until_complete(t)
    return (time.perf_counter() - t0) / N * 1e9


def sync_call():
    def h(x):
        return None

    t0 = time.perf_counter()
    for _ in range(N):
        if h(1) is not None:
            pass
    return (time.perf_counter() - t0) / N * 1e9


def main():
    loop = asyncio.new_event_loop()
    rows = {"sync hook call": [], "weir_guest Task": [], "asyncio Task": []}
    for _ in range(5):
        rows["sync hook call"].append(sync_call())
        rows["weir_guest Task"].append(weir_task())
        rows["asyncio Task"].append(asyncio_task(loop))
    for name, xs in rows.items():
        print(f"{name:16} {min(xs):8.0f} ns per event (best of 5)")
    print(f"asyncio / weir_guest: {min(rows['asyncio Task']) / min(rows['weir_guest Task']):.1f}x")


if __name__ == "__main__":
    main()
