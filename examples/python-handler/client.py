#!/usr/bin/env python3
"""Submits a demo.write job, follows its event stream, and cancels it after
a few output lines, with the SDK's client (sdk/python).

Run: python3 client.py --api http://127.0.0.1:8080 --key <api key> [--cancel-after 3]
"""
import argparse
import sys
from pathlib import Path

# The SDK from this checkout; not needed once `pip install ./sdk/python`.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sdk" / "python" / "src"))
import leasehold  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--api", default="http://127.0.0.1:8080")
    p.add_argument("--key", required=True)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--cancel-after", type=int, default=3, help="output lines before cancelling; 0: never")
    args = p.parse_args()
    client = leasehold.Client(args.api, args.key)
    job = client.submit("demo.write", {"steps": args.steps, "delay": 0.1})
    print("submitted", job["id"], flush=True)
    outputs = 0
    for event in client.watch(job["id"]):  # resumes after a dropped connection
        if event.event == "output":
            outputs += 1
            print("output", event.data["text"].strip(), flush=True)
            if outputs == args.cancel_after:
                client.cancel(job["id"])
                print("cancel requested", flush=True)
        elif event.event == "state":
            print("state", event.data["state"], flush=True)


if __name__ == "__main__":
    main()
