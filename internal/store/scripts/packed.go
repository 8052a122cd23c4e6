package scripts

import (
	"bytes"
	"compress/flate"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
)

// A packed job is an ended job, folded (transition.lua's fold), whose hash
// and folded key a reaper has put into its folded key alone, compressed:
// one key instead of two, and a third of their bytes (docs/architecture.md,
// *Executions*). Lua cannot decompress, so only Go reads one; a script
// that finds one where it needs the job's fields fails with
// unpack_first's reply (transition.lua; PackedKeys reads it), and Go
// writes the job back as it was (job_unpack.lua) and runs the script
// again.
//
// The value is the byte packedV1, the job's tenant and a NUL byte, then
// the raw DEFLATE stream, with packDict as its preset dictionary, of the
// JSON {"h": the hash's fields but its marker folded, "j": the folded
// key's JSON as it was}. A JSON folded key starts with '{', so the first
// byte tells the two apart. The tenant is read without the rest
// (ReadTenant): its index's entry goes with the job.
const packedV1 = 0x01

// packedHead is how many bytes of a packed value hold its tenant: the
// first byte, a tenant of at most 64 bytes, and the NUL after it
// (transition.lua's packed reads as many).
const packedHead = 66

// packDict is what most packed jobs hold, so that DEFLATE refers to it
// rather than spelling it out: the hash's field names in the order JSON
// sorts them, their usual values, and the folded key's shape. Changing it
// changes what every packed value decodes to: a new one needs a new first
// byte, beside this one.
const packDict = `{"h":{"attempt":"1","cancel_requested":"1","concurrency_keys":"[\"model:","cost":"",` +
	`"created_at":"17","error":"{\"code\":\"","exec_attempt":"1","exec_finished_at":"17",` +
	`"exec_heartbeat_at":"17","exec_id":"","exec_started_at":"17","exec_state":"failed",` +
	`"exec_trace":"00-","exec_worker":"","finished_at":"17","kind":"llm.chat","max_attempts":"3",` +
	`"metadata":"{","nonce":"","retries":"","started_at":"17","state":"cancelled","tenant":"",` +
	`"timeout_ms":"600000","token":"17","trace":"00-","webhook":"https://","webhook_attempts":"1",` +
	`"webhook_first_at":"17","webhook_id":"msg_","webhook_state":"delivered","webhook_tries":"[{\"at\":"},` +
	`"j":{"E":["17","state","","+","s","running,1,,=,=,,=,=,=,=,=,=,","o","succeeded,1,=,=,=,,=,=,=,=,=,=,="],` +
	`"f":{"input":"{\"messages\":[{\"content\":\"\",\"role\":\"system\"},{\"content\":\"\",\"role\":\"user\"}],` +
	`\"model\":\"","result":"{\"text\":\"","usage\":{\"prompt_tokens\":,\"completion_tokens\":,\"total_tokens\":}}"}}}`

// Packed is a packed job's content: its hash's fields but the marker
// folded, and its folded key's JSON.
type Packed struct {
	Hash   map[string]string `json:"h"`
	Folded json.RawMessage   `json:"j"`
}

// IsPacked says whether v, a job's folded key, is a packed job.
func IsPacked(v []byte) bool { return len(v) > 0 && v[0] == packedV1 }

// writers and readers keep DEFLATE's writers and readers: a writer holds
// about a megabyte of state, a reader about 40 KB, which a reader of a
// page of packed jobs would make anew for each.
var writers, readers sync.Pool

// ErrNotPackable is a job Pack cannot write so that Unpack gives its bytes
// back: a field that is not UTF-8 (JSON would replace its bytes; a
// handler's raw result may be such), or more than Unpack reads.
var ErrNotPackable = errors.New("pack: the job would not unpack to the same bytes")

// Pack is the packed value of a job whose hash holds hash (as HGETALL
// reads it; its marker folded is left out) and whose folded key holds
// folded, the compact JSON a fold writes.
func Pack(hash map[string]string, folded []byte) ([]byte, error) {
	fields := make(map[string]string, len(hash))
	for name, value := range hash {
		if !utf8.ValidString(name) || !utf8.ValidString(value) {
			return nil, ErrNotPackable
		}
		if name != "folded" {
			fields[name] = value
		}
	}
	var text bytes.Buffer
	enc := json.NewEncoder(&text)
	enc.SetEscapeHTML(false) // which would change folded's bytes
	if err := enc.Encode(Packed{Hash: fields, Folded: folded}); err != nil {
		return nil, fmt.Errorf("pack: %w", err)
	}
	if text.Len() > maxUnpacked {
		return nil, ErrNotPackable
	}
	out := bytes.NewBuffer(append(append([]byte{packedV1}, hash["tenant"]...), 0))
	w, _ := writers.Get().(*flate.Writer)
	if w == nil {
		w, _ = flate.NewWriterDict(out, flate.BestCompression, []byte(packDict)) // the level is valid
	} else {
		w.Reset(out)
	}
	defer writers.Put(w)
	if _, err := w.Write(text.Bytes()); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// maxUnpacked bounds what a packed value may inflate to: a fold moves at
// most 16 KB of events and long fields, and a job's other fields are
// short, so no value Pack wrote comes near it.
const maxUnpacked = 1 << 20

// PackedTenant returns the tenant of a packed job from the first
// packedHead bytes of its value or more; ok is false for a value that is
// not a packed job.
func PackedTenant(head []byte) (tenant string, ok bool) {
	if !IsPacked(head) {
		return "", false
	}
	tenant, _, ok = strings.Cut(string(head[1:]), "\x00")
	return tenant, ok
}

// TenantRead is the read of a job's tenant in a pipeline: from its hash,
// or, once the job is packed, from its folded key's head.
type TenantRead struct{ hash, head *redis.StringCmd }

// ReadTenant queues into p the read of the tenant of the job whose hash
// and folded key are hash and folded. In a transaction (a job's keys share
// its queue's slot) the two reads are one step: an unpack between them
// would leave neither.
func ReadTenant(ctx context.Context, p redis.Pipeliner, hash, folded string) TenantRead {
	return TenantRead{hash: p.HGet(ctx, hash, "tenant"), head: p.GetRange(ctx, folded, 0, packedHead-1)}
}

// Tenant is the tenant r read; "" when there is no such job.
func (r TenantRead) Tenant() string {
	if tenant := r.hash.Val(); tenant != "" {
		return tenant
	}
	tenant, _ := PackedTenant([]byte(r.head.Val()))
	return tenant
}

// Unpack reads a packed value (IsPacked).
func Unpack(v []byte) (Packed, error) {
	if !IsPacked(v) {
		return Packed{}, errors.New("unpack: not a packed job")
	}
	end := bytes.IndexByte(v, 0)
	if end < 0 {
		return Packed{}, errors.New("unpack: no end to the tenant")
	}
	src := bytes.NewReader(v[end+1:])
	r, _ := readers.Get().(io.ReadCloser)
	if r == nil {
		r = flate.NewReaderDict(src, []byte(packDict))
	} else if err := r.(flate.Resetter).Reset(src, []byte(packDict)); err != nil {
		return Packed{}, fmt.Errorf("unpack: %w", err)
	}
	defer readers.Put(r)
	text, err := io.ReadAll(io.LimitReader(r, maxUnpacked+1))
	if err == nil && len(text) > maxUnpacked {
		err = errors.New("larger than a packed job can be")
	}
	var p Packed
	if err == nil {
		err = json.Unmarshal(text, &p)
	}
	if err == nil && (p.Hash == nil || len(p.Folded) == 0) {
		err = errors.New("no hash or no folded key")
	}
	if err != nil {
		return Packed{}, fmt.Errorf("unpack: %w", err)
	}
	return p, nil
}

// PackedKeys reads the error reply of a script that found packed jobs
// where it needs their fields (transition.lua's unpack_first): for each,
// the places in its KEYS (from 1) of the job's hash and folded key. ok is
// false for any other error, or none.
func PackedKeys(err error) (at [][2]int, ok bool) {
	var reply redis.Error
	if !errors.As(err, &reply) {
		return nil, false
	}
	list, ok := strings.CutPrefix(reply.Error(), "LEASEHOLD_PACKED ")
	if !ok {
		return nil, false
	}
	for pair := range strings.FieldsSeq(list) {
		h, f, _ := strings.Cut(pair, ",")
		hash, errH := strconv.Atoi(h)
		fold, errF := strconv.Atoi(f)
		if errH != nil || errF != nil || hash < 1 || fold < 1 {
			return nil, false
		}
		at = append(at, [2]int{hash, fold})
	}
	return at, len(at) > 0
}
