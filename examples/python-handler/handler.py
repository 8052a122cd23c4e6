#!/usr/bin/env python3
"""A Leasehold remote handler in Python, on the SDK (sdk/python).

Run:   python3 handler.py --port 8000 [--upstream http://127.0.0.1:8090]
Serve: LEASEHOLD_HANDLERS=demo.write=http://127.0.0.1:8000/,demo.chat=http://127.0.0.1:8000/,demo.approve=http://127.0.0.1:8000/ worker

demo.write, input {"steps": 20, "delay": 0.1}: each step streams a progress
event and an output line, then writes the step to a store that checks the
fencing token, the way a database row with a token column would. The
result is {"steps": n}. When the worker closes the call (cancel, lost
lease, timeout, shutdown) the handler is cancelled at once, with no further
side effect.

demo.chat, input {"model", "messages", "max_tokens"}, calls an OpenAI-style
upstream (--upstream). When the upstream refuses for capacity (429) it
pushes back with the upstream's Retry-After, so the job waits without
spending an attempt and an adaptive key is cut. Otherwise it streams the
answer, reports the tokens spent, and ends with {"text": answer}.

demo.approve, input {"action": "refund order 42"}, is an approval flow: it
drafts the action, saves the draft as the job's checkpoint and waits for
the signal "approval" (POST /v1/jobs/{id}/signal {"name": "approval",
"data": {"approved": true}}), holding no worker and no slot meanwhile.
Called again with the signal, it ends with {"action", "decision"}:
approved, rejected or timed out.
"""
import argparse
import asyncio
import json
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

# The SDK from this checkout; not needed once `pip install ./sdk/python`.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sdk" / "python" / "src"))
import leasehold  # noqa: E402

app = leasehold.App()
fence = leasehold.Fence()  # the store's fencing tokens, one per job
rows_lock = threading.Lock()
rows = {}  # the store: each job's steps
upstream = "http://127.0.0.1:8090"


def say(*words):
    print(*words, flush=True)


@app.handler("demo.write")
async def write(ctx):
    try:
        steps, delay = int(ctx.input.get("steps", 20)), float(ctx.input.get("delay", 0.1))
    except (ValueError, TypeError, AttributeError):
        raise leasehold.Permanent('input: want {"steps": int, "delay": seconds}')
    say("started", ctx.job_id, ctx.fencing_token)
    try:
        for step in range(1, steps + 1):
            await asyncio.sleep(delay)
            # The side effect, fenced: a stale execution writes nothing.
            try:
                fence.admit(ctx.job_id, ctx.fencing_token)
            except leasehold.StaleToken:
                say("stale", ctx.job_id, ctx.fencing_token)
                raise leasehold.Permanent("a newer execution owns the job")
            with rows_lock:
                rows.setdefault(ctx.job_id, {})[step] = ctx.fencing_token  # an upsert: a step done twice is one row
            ctx.progress({"step": step, "of": steps})
            ctx.output("line %d\n" % step)
    except asyncio.CancelledError:
        say("disconnected", ctx.job_id, ctx.fencing_token)
        raise
    say("finished", ctx.job_id, ctx.fencing_token)
    return {"steps": steps}


@app.handler("demo.chat")
def chat(ctx):  # a plain function: it runs in a thread, so its blocking call holds up no other
    try:
        spec = ctx.input
        call = {"model": spec.get("model", "fake"), "messages": list(spec["messages"]),
                "max_tokens": int(spec.get("max_tokens", 50))}
    except (ValueError, TypeError, AttributeError, KeyError):
        raise leasehold.Permanent('input: want {"model", "messages": [...], "max_tokens": int}')
    req = urllib.request.Request(upstream + "/v1/chat/completions", data=json.dumps(call).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            answer = json.load(resp)
    except urllib.error.HTTPError as e:
        if e.code != 429:
            raise  # the attempt fails and is retried
        retry = e.headers.get("Retry-After", "")
        say("pushback", ctx.job_id, retry or "-")
        ctx.pushback(retry_after=float(retry) if retry.isdigit() else None)
    text = answer["choices"][0]["message"]["content"]
    tokens = answer.get("usage", {}).get("total_tokens")
    ctx.output(text)
    if tokens is not None:
        ctx.report_usage(tokens)  # replaces the job's estimate in its keys' tpm budgets
    say("answered", ctx.job_id, tokens)
    return {"text": text}


@app.handler("demo.approve")
async def approve(ctx):
    if ctx.last_checkpoint is None:
        ctx.checkpoint({"draft": "approve: " + str(ctx.input.get("action", "nothing"))})
    # Ends this call until a person answers: the job holds nothing meanwhile.
    signal = ctx.wait_for_signal("approval", timeout="1h")
    if signal.timed_out:
        decision = "timed out"
    else:
        decision = "approved" if (signal.data or {}).get("approved") else "rejected"
    say("decided", ctx.job_id, decision.replace(" ", "_"))
    return {"action": ctx.last_checkpoint["draft"], "decision": decision}


async def main():
    global upstream
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--upstream", default=upstream, help="the OpenAI-style API demo.chat calls")
    args = p.parse_args()
    upstream = args.upstream.rstrip("/")
    async with await app.start("127.0.0.1", args.port) as server:
        say("listening", server.sockets[0].getsockname()[1])
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
