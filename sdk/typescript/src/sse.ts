import { ConnectionError } from './errors.js';
import { message } from './http.js';

/** One server-sent event, as the HTML standard's parsing rules read it. */
export interface ServerSentEvent {
  /** The last `id:` seen on the stream so far (ids carry over to later events). */
  id: string | undefined;
  /** The `event:` field; `message` when absent. */
  event: string;
  /** The `data:` lines, joined by newlines. */
  data: string;
}

/**
 * parseEvents reads a text/event-stream body and yields its events as
 * they complete. A body that breaks off throws a ConnectionError; an event
 * left unfinished by the end of the body is dropped, as the standard says.
 * Returning early cancels the body, which closes the connection.
 */
export async function* parseEvents(body: ReadableStream<Uint8Array>): AsyncGenerator<ServerSentEvent> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  let id: string | undefined;
  let event = '';
  let data: string[] = [];
  try {
    for (;;) {
      let chunk: Awaited<ReturnType<typeof reader.read>>;
      try {
        chunk = await reader.read();
      } catch (err) {
        throw new ConnectionError(`event stream broke off: ${message(err)}`, { cause: err });
      }
      buffer += chunk.done ? decoder.decode() : decoder.decode(chunk.value, { stream: true });
      // Lines end with CRLF, LF or CR. A CR last in the buffer may be half of
      // a CRLF whose LF is in the next chunk, so it waits for that chunk.
      let start = 0;
      for (;;) {
        const end = lineEnd(buffer, start, chunk.done);
        if (end < 0) break;
        const line = buffer.slice(start, end);
        start = end + (buffer.startsWith('\r\n', end) ? 2 : 1);
        if (line === '') {
          if (data.length > 0) yield { id, event: event || 'message', data: data.join('\n') };
          event = '';
          data = [];
          continue;
        }
        if (line.startsWith(':')) continue; // a comment: keep-alive
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? '' : line.slice(colon + 1);
        if (value.startsWith(' ')) value = value.slice(1);
        switch (field) {
          case 'event':
            event = value;
            break;
          case 'data':
            data.push(value);
            break;
          case 'id':
            if (!value.includes('\0')) id = value;
            break;
        }
      }
      buffer = buffer.slice(start);
      if (chunk.done) return;
    }
  } finally {
    await reader.cancel().catch(() => {});
  }
}

/** lineEnd is the index of the first line terminator at or after start, or -1. */
function lineEnd(buffer: string, start: number, done: boolean): number {
  for (let i = start; i < buffer.length; i++) {
    const c = buffer[i];
    if (c === '\n') return i;
    if (c === '\r') return i + 1 < buffer.length || done ? i : -1;
  }
  return -1;
}
