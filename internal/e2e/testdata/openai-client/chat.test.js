// The official openai package, pointed at Leasehold with baseURL: a plain
// call, a streamed call, ten at once on a model limited to two, an aborted
// call, and a call that waits past its Leasehold-Max-Wait. The Go test
// that runs this (internal/e2e/openai_test.go) checks the upstream's side.
import { test } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";

const client = new OpenAI({
  baseURL: process.env.LEASEHOLD_URL + "/v1",
  apiKey: process.env.LEASEHOLD_KEY,
  maxRetries: 0,
});
const ask = (content, extra = {}) => ({
  model: "fake",
  messages: [{ role: "user", content }],
  max_tokens: 3,
  ...extra,
});

test("a plain call", async () => {
  const c = await client.chat.completions.create(ask("plain"));
  assert.equal(c.choices[0].message.content, "token-1 token-2 token-3 ");
  assert.ok(c.usage.total_tokens > 0);
});

test("a streamed call", async () => {
  const stream = await client.chat.completions.create(ask("streamed", { stream: true }));
  let text = "";
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta?.content ?? "";
  }
  assert.equal(text, "token-1 token-2 token-3 ");
});

test("ten calls at once, in turn", async () => {
  const answers = await Promise.all(
    Array.from({ length: 10 }, (_, i) => client.chat.completions.create(ask("many-" + i))),
  );
  assert.equal(answers.length, 10);
});

test("an aborted call", async () => {
  const controller = new AbortController();
  const stream = await client.chat.completions.create(ask("aborted", { stream: true, max_tokens: 1000 }), {
    signal: controller.signal,
  });
  let chunks = 0;
  try {
    for await (const chunk of stream) {
      if (chunk.choices[0]?.delta?.content) {
        chunks++;
        controller.abort();
      }
    }
  } catch (err) {
    assert.equal(err.name, "AbortError"); // the client's versions differ: some end the loop, some throw
  }
  assert.ok(chunks < 1000, "the stream ran to its end after the abort");
});

test("a call past its maximum wait gets 429 with Retry-After", async () => {
  const hold = new AbortController();
  // Two slow streams take both slots of the model.
  const streams = await Promise.all([1, 2].map(() =>
    client.chat.completions.create(ask("hold", { stream: true, max_tokens: 1000 }), { signal: hold.signal })));
  try {
    await assert.rejects(
      client.chat.completions.create(ask("late"), { headers: { "Leasehold-Max-Wait": "200ms" } }),
      (err) => err.status === 429 && Number(err.headers["retry-after"]) >= 1,
    );
  } finally {
    hold.abort();
    for (const s of streams) s.controller.abort();
  }
});
