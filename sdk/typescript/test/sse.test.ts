import assert from 'node:assert/strict';
import { test } from 'node:test';

import { ConnectionError, parseEvents, type ServerSentEvent } from '@leasehold/sdk';

/** body is a response body that sends chunks one by one, then ends (or breaks, given an error). */
function body(chunks: string[], error?: Error): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  return new ReadableStream({
    pull(controller) {
      const next = chunks.shift();
      if (next !== undefined) controller.enqueue(encoder.encode(next));
      else if (error) controller.error(error);
      else controller.close();
    },
  });
}

async function read(stream: ReadableStream<Uint8Array>): Promise<ServerSentEvent[]> {
  const events: ServerSentEvent[] = [];
  for await (const e of parseEvents(stream)) events.push(e);
  return events;
}

test('events split anywhere, with any line ending, read as the standard says', async () => {
  const events = await read(
    body([
      ': keep-alive\r\n\r\nid: 1\r\nevent: state\r',
      '\ndata: {"a":\ndata: 1}\n\n',
      'data: no event name\rid: 2\r\r',
      'data:x\n\nevent: output\ndata: cut short',
    ]),
  );
  assert.deepEqual(events, [
    { id: '1', event: 'state', data: '{"a":\n1}' },
    { id: '2', event: 'message', data: 'no event name' },
    { id: '2', event: 'message', data: 'x' },
  ]);
});

test('a body that breaks off is a ConnectionError', async () => {
  await assert.rejects(read(body(['id: 1\ndata: {}\n\n'], new Error('reset'))), ConnectionError);
});
