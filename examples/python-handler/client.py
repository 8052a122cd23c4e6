#!/usr/bin/env python3
"""Submits a demo.write job, follows its event stream, and cancels it after
a few output lines. Standard library only.

Run: python3 client.py --api http://127.0.0.1:8080 --key <api key> [--cancel-after 3]
"""
import argparse
import json
import urllib.request


def call(api, key, method, path, body=None):
    req = urllib.request.Request(api + path, method=method, data=None if body is None else json.dumps(body).encode())
    req.add_header("Authorization", "Bearer " + key)
    if body is not None:
        req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req) as resp:
        return json.load(resp)


def events(api, key, job_id):
    """Yields (event, data) from GET /v1/jobs/{id}/events until it ends."""
    req = urllib.request.Request(api + "/v1/jobs/%s/events" % job_id)
    req.add_header("Authorization", "Bearer " + key)
    with urllib.request.urlopen(req) as resp:
        event, data = None, []
        for raw in resp:
            line = raw.decode().rstrip("\r\n")
            if line == "":
                if data:
                    yield event, json.loads("\n".join(data))
                event, data = None, []
            elif line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--api", default="http://127.0.0.1:8080")
    p.add_argument("--key", required=True)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--cancel-after", type=int, default=3, help="output lines before cancelling; 0: never")
    args = p.parse_args()
    job = call(args.api, args.key, "POST", "/v1/jobs", {"kind": "demo.write", "input": {"steps": args.steps, "delay": 0.1}})
    print("submitted", job["id"], flush=True)
    outputs = 0
    for event, data in events(args.api, args.key, job["id"]):
        if event == "output":
            outputs += 1
            print("output", data["text"].strip(), flush=True)
            if outputs == args.cancel_after:
                call(args.api, args.key, "POST", "/v1/jobs/%s/cancel" % job["id"])
                print("cancel requested", flush=True)
        elif event == "state":
            print("state", data["state"], flush=True)


if __name__ == "__main__":
    main()
