"""One page floods the Explorer's layer route; another user uploads: `python -m benchmarks.flood [--photos 4]`.

The app runs as a process. A flooding session, in a process of its own at the lowest CPU priority, sends
`--flood` requests for its layers at once (100 by default: a script, or a stuck page), again every `--every`
seconds, while another session uploads new 448x448 photos one after another (the upload, /analyze, then its
Tokens view). Each upload is timed alone and under the flood, alternately; it prints both medians, their ratio
(the issue's bound: 1.3x) and what the flood's requests got. `--control`: the same process at the same priority
spins on one core and sends nothing, so that what a client beside the server costs by itself is measured apart.
`--client raw` (the default) sends the flood as bytes over kept-alive connections from one asyncio loop, so that the
flooding clients, which share this machine's cores with the server, cost them as little as a client can; `--client
httpx`, a thread a connection with httpx, as the earlier figures were measured. Each upload's line gives the
server's own CPU seconds during it, and the summary the flooding process' own.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np

from tests.support.harness import photos, running_app

from .classroom import MODEL, SIZE
from .loadtest import HttpApi


def upload(api: HttpApi, path: Path) -> float:
    """Seconds from the upload to its Tokens view."""
    start = time.perf_counter()
    image = api.upload(path)
    api.call("analyze", image, MODEL, SIZE)
    api.call("tokens", image, MODEL, SIZE, False)
    return time.perf_counter() - start


def flood(url: str, meta: dict, width: int, every: float, stop, answers, client: str = "raw") -> None:
    """In a process of its own: `width` connections, each asking for one of the session's layers at the same
    moment, every `every` s until `stop`; then the answers' status codes counted, and the process' own CPU
    seconds, on `answers`. The process runs at the lowest CPU priority: a flooding page runs on its own machine,
    and here its clients would otherwise take the server's two cores from it, which is not what the server's
    defence is measured by. client "raw": one asyncio task a connection, each request written as bytes (what the
    clients cost the cores is kept as small as it can be); "httpx": a thread a connection, with httpx."""
    os.nice(19)
    if width == 0:  # the control: a busy process beside the server, no request
        while not stop.is_set():
            sum(range(10_000))
        answers.put({"cpu_s": cpu_seconds()})
        return
    if client == "raw":
        import asyncio

        got: Counter = Counter()
        try:
            got = asyncio.run(raw_flood(url, meta, width, every, stop))
        finally:  # the parent waits for an answer
            answers.put({**got, "cpu_s": cpu_seconds()})
        return
    import httpx

    got = Counter()
    burst = threading.Barrier(width)

    def one(i: int) -> None:
        with httpx.Client(timeout=60) as http:
            while not stop.is_set():
                try:
                    burst.wait()
                except threading.BrokenBarrierError:  # stopped
                    return
                query = {"session": meta["session"], "key": meta["key"], "layer": i % 12}
                token = {meta["tokenHeader"]: meta["token"]}  # the session's page token, as the page sends it
                got[http.get(f"{url}vitviz/explorer/layer", params=query, headers=token).status_code] += 1
                stop.wait(every)

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(width)]
    for t in threads:
        t.start()
    stop.wait()
    burst.abort()
    for t in threads:
        t.join(60)
    answers.put({**got, "cpu_s": cpu_seconds()})


def cpu_seconds() -> float:
    """This process' CPU time so far, user and system."""
    t = os.times()
    return round(t.user + t.system, 2)


async def raw_flood(url: str, meta: dict, width: int, every: float, stop) -> Counter:
    """`flood`'s requests over `width` kept-alive connections: every connection writes its GET at the same moment
    (one clock for all, every `every` s, as the httpx client's barrier does) and reads the answer (its status line,
    then as many bytes as Content-Length says). A connection the server closed is opened again, and counted; any
    other failure is counted by its name, never fatal."""
    import asyncio
    from urllib.parse import urlencode, urlsplit

    where = urlsplit(url)
    host, port = where.hostname, where.port or 80
    got: Counter = Counter()
    loop = asyncio.get_running_loop()
    t0 = loop.time()

    async def answer(reader) -> int:
        line = await reader.readline()
        if not line:
            raise ConnectionResetError("closed by the server")
        status, length = int(line.split()[1]), None
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
            elif name.strip().lower() == b"transfer-encoding":
                raise ValueError("a chunked answer: this client reads Content-Length only")
        if length is None:
            raise ValueError("an answer without Content-Length")
        await reader.readexactly(length)
        return status

    async def one(i: int) -> None:
        query = urlencode({"session": meta["session"], "key": meta["key"], "layer": i % 12})
        path = where.path.rstrip("/") + "/vitviz/explorer/layer"
        request = f"GET {path}?{query} HTTP/1.1\r\nHost: {where.netloc}\r\n\r\n".encode()
        reader = writer = None
        while not stop.is_set():
            try:
                if writer is None:
                    reader, writer = await asyncio.open_connection(host, port)
                writer.write(request)
                got[await answer(reader)] += 1
            except (OSError, ValueError, IndexError, asyncio.IncompleteReadError) as exc:
                got[type(exc).__name__] += 1
                if writer is not None:
                    writer.close()
                reader = writer = None
            await asyncio.sleep(every - (loop.time() - t0) % every)  # the next burst, on the shared clock

    tasks = [asyncio.create_task(one(i)) for i in range(width)]
    await asyncio.gather(*tasks)
    return got


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--photos", type=int, default=4)
    parser.add_argument("--flood", type=int, default=100)
    parser.add_argument("--every", type=float, default=2.0)
    parser.add_argument("--control", action="store_true", help="a busy process beside the server, no request")
    parser.add_argument("--client", choices=["raw", "httpx"], default="raw", help="how the flood's requests are sent")
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="vitviz-flood-"))
    images = photos(2 * args.photos + 2, folder, prefix="flood")
    print(
        f"load average before: {os.getloadavg()[0]:.2f}; {args.photos} uploads each way; {args.flood} requests at "
        f"once every {args.every:g} s"
    )
    with running_app() as (url, pid):
        flooder, victim = HttpApi(url, session="flooder"), HttpApi(url, session="victim")
        image = flooder.upload(images[0])
        meta = flooder.call("explorer", image, MODEL, SIZE, "inferno", 0.6, "log", False)[0]
        upload(victim, images[1])  # the server warm
        alone, flooded, got = [], [], Counter()
        for i in range(args.photos):
            time.sleep(3)
            alone.append(upload(victim, images[2 + 2 * i]))
            stop, answers = multiprocessing.Event(), multiprocessing.Queue()
            width = 0 if args.control else args.flood
            worker = multiprocessing.Process(
                target=flood, args=(url, meta, width, args.every, stop, answers, args.client)
            )
            worker.start()
            time.sleep(1)  # the flood is in full swing
            server_cpu = server_seconds(pid)
            flooded.append(upload(victim, images[3 + 2 * i]))
            server_cpu = server_seconds(pid) - server_cpu
            stop.set()
            got.update(answers.get(timeout=120))
            worker.join(120)
            print(
                f"  upload {i + 1}: alone {alone[-1]:.2f} s, under {'the control' if args.control else 'the flood'} "
                f"{flooded[-1]:.2f} s; the server's CPU meanwhile {server_cpu:.2f} s",
                flush=True,
            )
    client_cpu = got.pop("cpu_s", 0.0)
    a, f = np.median(alone), np.median(flooded)
    beside = "a busy process beside" if args.control else "the flood"
    print(
        f"an upload to its view: alone {a:.2f} s (max {max(alone):.2f}), under {beside} {f:.2f} s (max "
        f"{max(flooded):.2f}): {f / a:.2f}x (bound 1.3x); the flood's answers {dict(got)}, its client's CPU "
        f"{client_cpu:.1f} s ({args.client}); load "
        f"{os.getloadavg()[0]:.2f}"
    )


def server_seconds(pid: int) -> float:
    """The server process' CPU time so far (user and system, every thread), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    main()
