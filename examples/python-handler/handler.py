#!/usr/bin/env python3
"""A Leasehold remote handler in Python, standard library only.

Run:   python3 handler.py --port 8000 [--upstream http://127.0.0.1:8090]
Serve: LEASEHOLD_HANDLERS=demo.write=http://127.0.0.1:8000/,demo.chat=http://127.0.0.1:8000/chat,demo.approve=http://127.0.0.1:8000/approve worker

Input: {"steps": 20, "delay": 0.1}. Each step streams a progress event and
an output line, then writes the step to a store that checks the fencing
token, the way a database row with a token column would. The result is
{"steps": n}. When the worker closes the request (cancel, lost lease,
timeout, shutdown) the handler stops at once, with no further side effect.

POST /chat (demo.chat) calls an OpenAI-style upstream (--upstream) with
the input {"model", "messages", "max_tokens"}. When the upstream refuses
for capacity (429) it passes the 429 on with its Retry-After: pushback, so
the job waits without spending an attempt and an adaptive key is cut.
Otherwise it streams the answer, reports the tokens spent with a usage
line, and ends with {"text": answer}.

POST /approve (demo.approve) is an approval flow: it drafts an action
from the input {"action": "refund order 42"}, saves the draft as the
job's checkpoint, and waits for the signal "approval" (a person sends
POST /v1/jobs/{id}/signal {"name": "approval", "data": {"approved":
true}}). The job then holds no worker and no slot. Leasehold calls again
with the checkpoint and the signal in an envelope (header
Leasehold-Resume), and the handler ends with {"action", "decision"}:
approved, rejected or timed out.
"""
import argparse
import json
import select
import socket
import sys
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FencedStore:
    """Keeps each job's highest fencing token and refuses older writers."""

    def __init__(self):
        self.lock = threading.Lock()
        self.tokens = {}
        self.rows = {}

    def write(self, job_id, token, value):
        with self.lock:
            if token < self.tokens.get(job_id, 0):
                return False  # a newer execution owns the job: refuse
            self.tokens[job_id] = token
            self.rows.setdefault(job_id, []).append(value)
            return True


STORE = FencedStore()
UPSTREAM = "http://127.0.0.1:8090"


def say(*words):
    print(*words, flush=True)


class Handler(BaseHTTPRequestHandler):
    # HTTP/1.0: the stream ends when the connection closes, no chunking.
    protocol_version = "HTTP/1.0"

    def log_message(self, *args):
        pass

    def gone(self, wait):
        """Waits up to wait seconds; True if the worker closed the request."""
        readable, _, _ = select.select([self.connection], [], [], wait)
        if not readable:
            return False
        try:
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def line(self, obj):
        self.wfile.write(json.dumps(obj).encode() + b"\n")
        self.wfile.flush()

    def reply(self, status, text, headers=()):
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(text.encode())

    def chat(self, job_id, body):
        try:
            spec = json.loads(body or b"{}")
            call = {"model": spec.get("model", "fake"), "messages": list(spec["messages"]),
                    "max_tokens": int(spec.get("max_tokens", 50))}
        except (ValueError, TypeError, AttributeError, KeyError):
            return self.reply(400, 'input: want {"model", "messages": [...], "max_tokens": int}')
        req = urllib.request.Request(UPSTREAM + "/v1/chat/completions", data=json.dumps(call).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                answer = json.load(resp)
        except urllib.error.HTTPError as e:
            if e.code == 429:
                # Pushback: pass the upstream's refusal and its Retry-After on.
                say("pushback", job_id, e.headers.get("Retry-After", "-"))
                retry = e.headers.get("Retry-After")
                return self.reply(429, "upstream: 429", [("Retry-After", retry)] if retry else [])
            return self.reply(502, "upstream: %d" % e.code)  # 5xx: the attempt is retried
        except (OSError, ValueError) as e:
            return self.reply(502, "upstream: %s" % e)
        text = answer["choices"][0]["message"]["content"]
        tokens = answer.get("usage", {}).get("total_tokens")
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.end_headers()
        self.line({"event": "output", "data": {"text": text}})
        if tokens is not None:
            # The tokens spent replace the job's estimate in the key's tpm budget.
            self.line({"usage": {"tokens": tokens}})
        self.line({"result": {"text": text}})
        say("answered", job_id, tokens)

    def approve(self, job_id, body):
        msg = json.loads(body or b"{}")
        if self.headers.get("Leasehold-Resume"):
            # A resumed call: the body is {"input", "checkpoint", "signal"}.
            draft, signal = (msg.get("checkpoint") or {}).get("draft"), msg.get("signal")
        else:
            draft, signal = "approve: " + str(msg.get("action", "nothing")), None
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.end_headers()
        if signal is None:
            # Ask, save what the next call needs, and wait: the execution
            # ends here, and nothing is held while a person decides.
            self.line({"checkpoint": {"draft": draft}})
            self.line({"wait": {"for": "approval", "timeout": "1h"}})
            say("waiting", job_id)
            return
        if signal["timed_out"]:
            decision = "timed out"
        else:
            decision = "approved" if (signal.get("data") or {}).get("approved") else "rejected"
        self.line({"result": {"action": draft, "decision": decision}})
        say("decided", job_id, decision.replace(" ", "_"))

    def do_POST(self):
        job_id = self.headers["Leasehold-Job-Id"]
        token = int(self.headers["Fencing-Token"])
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path == "/chat":
            return self.chat(job_id, body)
        if self.path == "/approve":
            return self.approve(job_id, body)
        try:
            spec = json.loads(body or b"{}")
            steps, delay = int(spec.get("steps", 20)), float(spec.get("delay", 0.1))
        except (ValueError, TypeError, AttributeError):
            # 400: the job fails at once, no retry would fix its input.
            self.send_response(400)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(b"input: want {\"steps\": int, \"delay\": seconds}")
            return
        say("started", job_id, token)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.end_headers()
        try:
            for step in range(1, steps + 1):
                if self.gone(delay):
                    say("disconnected", job_id, token)
                    return
                # The side effect, fenced: a stale execution writes nothing.
                if not STORE.write(job_id, token, step):
                    say("stale", job_id, token)
                    self.line({"error": {"message": "a newer execution owns the job", "retryable": False}})
                    return
                self.line({"event": "progress", "data": {"step": step, "of": steps}})
                self.line({"event": "output", "data": {"text": "line %d\n" % step}})
            self.line({"result": {"steps": steps}})
            say("finished", job_id, token)
        except (BrokenPipeError, ConnectionResetError):
            say("disconnected", job_id, token)


def main():
    global UPSTREAM
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--upstream", default=UPSTREAM, help="the OpenAI-style API demo.chat calls")
    args = p.parse_args()
    UPSTREAM = args.upstream.rstrip("/")
    srv = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    srv.daemon_threads = True
    say("listening", srv.server_address[1])
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
