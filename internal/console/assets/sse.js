// A parser of server-sent events (the WHATWG "event stream
// interpretation"), for streams read with fetch, which can send the
// Authorization header that an EventSource cannot.

// parse reads a response body and yields each dispatched event as
// {id, event, data}; id is the last event id seen so far.
export async function* parse(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  let id = '';
  let event = '';
  let data = [];
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      // A line ends at CRLF, LF or CR; a CR at the very end may be the
      // first half of a CRLF, so it waits for the next chunk.
      let m;
      while ((m = /\r\n|\n|\r(?!$)/.exec(buffer)) !== null) {
        const line = buffer.slice(0, m.index);
        buffer = buffer.slice(m.index + m[0].length);
        if (line === '') {
          if (data.length > 0) yield { id, event: event || 'message', data: data.join('\n') };
          event = '';
          data = [];
          continue;
        }
        if (line.startsWith(':')) continue; // a comment: keep-alive
        const colon = line.indexOf(':');
        const name = colon < 0 ? line : line.slice(0, colon);
        let val = colon < 0 ? '' : line.slice(colon + 1);
        if (val.startsWith(' ')) val = val.slice(1);
        if (name === 'data') data.push(val);
        else if (name === 'event') event = val;
        else if (name === 'id' && !val.includes('\0')) id = val;
      }
    }
  } finally {
    reader.releaseLock();
  }
}
