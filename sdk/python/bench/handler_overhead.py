#!/usr/bin/env python3
"""The handler framework's overhead per execution, against a handler that
speaks the remote handler protocol by hand (as the examples did before the
SDK), in one run: each answers a call with a progress line and a result,
and a client sends the calls a worker would, one after another.

Run: PYTHONPATH=sdk/python/src python3 sdk/python/bench/handler_overhead.py [--calls 2000]
"""
import argparse
import asyncio
import http.client
import json
import statistics
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import leasehold


class Raw(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.end_headers()
        self.wfile.write(json.dumps({"event": "progress", "data": {"step": 1}}).encode() + b"\n")
        self.wfile.write(json.dumps({"result": body}).encode() + b"\n")


app = leasehold.App()


@app.handler("bench")
async def bench(ctx):
    ctx.progress({"step": 1})
    return ctx.input


def serve_sdk():
    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(app.start("127.0.0.1", 0))
    threading.Thread(target=loop.run_forever, daemon=True).start()
    return server.sockets[0].getsockname()[1]


def serve_raw():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Raw)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv.server_address[1]


def call(port):
    conn = http.client.HTTPConnection("127.0.0.1", port)
    conn.request("POST", "/", body=b'{"n": 1}', headers={
        "Content-Type": "application/json", "Leasehold-Job-Id": "j", "Leasehold-Execution-Id": "e",
        "Leasehold-Attempt": "1", "Leasehold-Kind": "bench", "Leasehold-Tenant": "t", "Fencing-Token": "7",
        "Leasehold-Deadline": "2099-01-01T00:00:00.000Z"})
    resp = conn.getresponse()
    lines = resp.read().splitlines()
    conn.close()
    assert resp.status == 200 and json.loads(lines[-1]) == {"result": {"n": 1}}, lines


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--calls", type=int, default=2000)
    args = p.parse_args()
    ports = {"raw": serve_raw(), "sdk": serve_sdk()}
    times = {name: [] for name in ports}
    for _ in range(args.calls):  # interleaved, so both see the same machine
        for name, port in ports.items():
            start = time.perf_counter()
            call(port)
            times[name].append(time.perf_counter() - start)
    for name, ts in times.items():
        ts.sort()
        print(f"{name}: p50 {ts[len(ts) // 2] * 1e6:.0f} µs, p99 {ts[len(ts) * 99 // 100] * 1e6:.0f} µs, "
              f"mean {statistics.fmean(ts) * 1e6:.0f} µs over {len(ts)} calls")


if __name__ == "__main__":
    main()
