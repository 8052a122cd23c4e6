package scripts

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/leasehold/leasehold/internal/testenv"
)

// A packed job unpacks to the hash and folded key it was packed from, but
// the hash's marker folded (job_unpack.lua writes it back); its tenant
// reads from its head alone.
func TestPackRoundTrip(t *testing.T) {
	hash := map[string]string{"folded": "1", "state": "succeeded", "tenant": "acme", "kind": "llm.chat",
		"concurrency_keys": `["model:fake-1","tenant:acme"]`, "token": "1796633390152801"}
	folded := []byte(`{"E":["1796633390148-0","state",""],"f":{"result":"{\"text\":\"hi \\\"there\\\"\"}"}}`)
	v, err := Pack(hash, folded)
	if err != nil {
		t.Fatal(err)
	}
	if !IsPacked(v) || IsPacked(folded) {
		t.Fatal("IsPacked tells a packed value from a JSON folded key wrong")
	}
	if tenant, ok := PackedTenant(v[:min(len(v), packedHead)]); !ok || tenant != "acme" {
		t.Fatalf("PackedTenant: %q, %v", tenant, ok)
	}
	p, err := Unpack(v)
	if err != nil {
		t.Fatal(err)
	}
	delete(hash, "folded")
	if !maps.Equal(p.Hash, hash) || !bytes.Equal(p.Folded, folded) {
		t.Fatalf("unpacked %v %s\nwant %v %s", p.Hash, p.Folded, hash, folded)
	}
	size := len(folded)
	for name, value := range hash {
		size += len(name) + len(value)
	}
	if len(v) >= size {
		t.Errorf("packed in %d bytes, no fewer than the %d of its fields and folded key", len(v), size)
	}
}

// A packed job unpacks to the same bytes: JSON's HTML escapes are not
// written into the folded key's JSON, and a field that is not UTF-8, which
// JSON would change, is not packed.
func TestPackIsByteExact(t *testing.T) {
	hash := map[string]string{"tenant": "acme", "result": "{\"q\":\"a<b && c>d \u2028\"}"}
	folded := []byte(`{"f":{"input":"{\"q\":\"a<b && c>d\"}"},"E":["1-0","output","{\"text\":\"<\u2028>\"}"]}`)
	v, err := Pack(hash, folded)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Unpack(v)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(p.Hash, hash) || !bytes.Equal(p.Folded, folded) {
		t.Fatalf("unpacked %q %s\nwant %q %s", p.Hash, p.Folded, hash, folded)
	}
	hash["result"] = "\"\xff\""
	if _, err := Pack(hash, folded); !errors.Is(err, ErrNotPackable) {
		t.Fatalf("a result not UTF-8 packed: %v", err)
	}
}

// Unpack refuses what Pack did not write, with an error, never a panic;
// what it reads, Pack writes again to unpack the same (the folded JSON
// compacted, as Pack writes it).
func FuzzUnpack(f *testing.F) {
	good, err := Pack(map[string]string{"tenant": "acme", "state": "failed"}, []byte(`{"f":{}}`))
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range [][]byte{good, good[:len(good)/2], {1}, {1, 0}, {1, 'a', 0, 0xff}, []byte(`{"f":{}}`), nil} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		PackedTenant(v)
		p, err := Unpack(v)
		if err != nil {
			return
		}
		if p.Hash == nil || len(p.Folded) == 0 {
			t.Fatalf("%q unpacked to %v %s", v, p.Hash, p.Folded)
		}
		again, err := Pack(p.Hash, p.Folded)
		if err != nil {
			t.Fatalf("%q unpacked to %v %s, which does not pack: %v", v, p.Hash, p.Folded, err)
		}
		q, err := Unpack(again)
		var folded bytes.Buffer
		_ = json.Compact(&folded, p.Folded)
		delete(p.Hash, "folded") // the fold's marker, which Pack leaves out
		if err != nil || !maps.Equal(q.Hash, p.Hash) || !bytes.Equal(q.Folded, folded.Bytes()) {
			t.Fatalf("%q unpacked to %v %s, packed again to %v %s (%v)", v, p.Hash, p.Folded, q.Hash, q.Folded, err)
		}
	})
}

// PackedKeys reads unpack_first's reply (transition.lua), as a Redis
// sends it, and no other.
func TestPackedKeys(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	reply := func(msg string) error {
		return rdb.Eval(t.Context(), "return redis.error_reply(ARGV[1])", nil, msg).Err()
	}
	for _, c := range []struct {
		err  error
		want [][2]int
	}{
		{reply("LEASEHOLD_PACKED 1,11"), [][2]int{{1, 11}}},
		{reply("LEASEHOLD_PACKED 6,9 10,13"), [][2]int{{6, 9}, {10, 13}}},
		{reply("LEASEHOLD_PACKED 0,1"), nil},
		{reply("LEASEHOLD_PACKED x"), nil},
		{reply("ERR LEASEHOLD_PACKED 1,2"), nil},
		{errors.New("LEASEHOLD_PACKED 1,2"), nil}, // not Redis's
		{nil, nil},
	} {
		at, ok := PackedKeys(c.err)
		if ok != (c.want != nil) || !slices.Equal(at, c.want) {
			t.Errorf("%v: %v %v, want %v", c.err, at, ok, c.want)
		}
	}
}

// BenchmarkPack packs and unpacks the job of TestMemoryPerFinishedChatJob
// (an llm.chat job that streamed 30 tokens), as a reaper and a reader do:
// the Go work a packed job costs.
func BenchmarkPack(b *testing.B) {
	hash := map[string]string{"folded": "1", "token": "1796633390152801", "exec_state": "succeeded",
		"exec_started_at": "1796633390152", "attempt": "1", "tenant": "acme", "exec_heartbeat_at": "1796633390152",
		"cost": "1038", "timeout_ms": "600000", "exec_id": "01a24fb1-ec45-7e70-8852-4c55a4722559",
		"exec_finished_at": "1796633390158", "exec_worker": "vm-20503-fb9b", "finished_at": "1796633390158",
		"started_at": "1796633390152", "created_at": "1796633390148", "kind": "llm.chat",
		"concurrency_keys": `["model:fake-1","tenant:acme"]`, "exec_attempt": "1", "max_attempts": "3", "state": "succeeded"}
	folded := []byte(`{"E":["1796633390148-0","state","","+4","s","running,1,,=,=,,=,=,=,=,=,=,","+2","o","9,171","+1","o","180,90","+3","s","succeeded,1,=,=,=,,=,=,=,=,=,=,="],"f":{"result":"{\"text\":\"token-1 token-2 token-3 token-4 token-5 token-6 token-7 token-8 token-9 token-10 token-11 token-12 token-13 token-14 token-15 token-16 token-17 token-18 token-19 token-20 token-21 token-22 token-23 token-24 token-25 token-26 token-27 token-28 token-29 token-30 \",\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":30,\"total_tokens\":34}}","input":"{\"messages\":[{\"content\":\"be brief\",\"role\":\"system\"},{\"content\":\"say hello\",\"role\":\"user\"}],\"model\":\"fake-1\"}"}}`)
	v, err := Pack(hash, folded)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("pack", func(b *testing.B) {
		for b.Loop() {
			if _, err := Pack(hash, folded); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(v)), "bytes")
	})
	b.Run("unpack", func(b *testing.B) {
		for b.Loop() {
			if _, err := Unpack(v); err != nil {
				b.Fatal(err)
			}
		}
	})
}
