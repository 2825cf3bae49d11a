"""Which HTTP stack for `bert-ad serve`: aiohttp, or Starlette on uvicorn (h11 or httptools).

    pip install aiohttp starlette uvicorn httptools
    python -m benchmarks.serve_stacks [--seconds 4] [--rounds 2]

Each stack serves the same endpoint in its own process: POST a small
{"instances": [...]} JSON body, parse it, hand the work to a thread (as
bert-ad serve hands tokenising and scoring to its threads) and answer JSON.
aiohttp's client sends one request at a time on each of 1 or 16 connections
for --seconds; rounds alternate the order of the stacks. No model is run: this
is the HTTP layer's own cost, which bert-ad serve adds to every request.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import socket
import statistics
import subprocess
import sys
import time

STACKS = ("aiohttp", "uvicorn-h11", "uvicorn-httptools")
PATH = "/v1/models/m:predict"
POOL = concurrent.futures.ThreadPoolExecutor(1)


def work(instances: list) -> dict:
    return {"predictions": [{"label": "1", "length": len(text)} for text in instances]}


def serve(stack: str, port: int) -> None:
    if stack == "aiohttp":
        from aiohttp import web

        async def predict(request):
            body = await request.json()
            answer = await asyncio.get_running_loop().run_in_executor(
                POOL, work, body["instances"])
            return web.json_response(answer)

        app = web.Application()
        app.router.add_post(PATH, predict)
        web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)
        return
    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def predict(request):  # noqa: F811 (the other stack's handler)
        body = await request.json()
        answer = await asyncio.get_running_loop().run_in_executor(POOL, work,
                                                                  body["instances"])
        return JSONResponse(answer)

    app = Starlette(routes=[Route(PATH, predict, methods=["POST"])])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False,
                http="h11" if stack == "uvicorn-h11" else "httptools", loop="asyncio")


async def load(port: int, clients: int, seconds: float) -> tuple:
    import aiohttp
    url = f"http://127.0.0.1:{port}{PATH}"
    body = json.dumps({"instances": ["a gorgeous, witty film."]})
    latencies = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=clients)) as session:
        end = time.perf_counter() + seconds

        async def client():
            while time.perf_counter() < end:
                started = time.perf_counter()
                async with session.post(url, data=body,
                                        headers={"Content-Type": "application/json"}) as r:
                    await r.read()
                latencies.append(time.perf_counter() - started)

        await asyncio.gather(*[client() for _ in range(clients)])
    return len(latencies) / seconds, 1000 * statistics.median(latencies)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--serve", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve, args.port)
        return 0
    results = {}
    for round_index in range(args.rounds):
        for stack in STACKS if round_index % 2 == 0 else STACKS[::-1]:
            port = free_port()
            server = subprocess.Popen([sys.executable, "-m", "benchmarks.serve_stacks",
                                       "--serve", stack, "--port", str(port)])
            for _ in range(300):
                try:
                    socket.create_connection(("127.0.0.1", port)).close()
                    break
                except OSError:
                    time.sleep(0.1)
            for clients in (1, 16):
                results.setdefault((stack, clients), []).append(
                    asyncio.run(load(port, clients, args.seconds)))
            server.terminate()
            server.wait()
    print("| stack | clients | requests/sec | p50 ms |\n|---|---:|---:|---:|")
    for (stack, clients), runs in results.items():
        print(f"| {stack} | {clients} | {statistics.median(r for r, _ in runs):,.0f} | "
              f"{statistics.median(p for _, p in runs):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
