package scripts

import (
	"bytes"
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
	if tenant, ok := PackedTenant(v[:min(len(v), PackedHead)]); !ok || tenant != "acme" {
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

// Unpack refuses what Pack did not write, with an error, never a panic.
func FuzzUnpack(f *testing.F) {
	good, err := Pack(map[string]string{"tenant": "acme", "state": "failed"}, []byte(`{"f":{}}`))
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range [][]byte{good, good[:len(good)/2], {1}, {1, 0}, {1, 'a', 0, 0xff}, []byte(`{"f":{}}`), nil} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		p, err := Unpack(v)
		if err == nil && (p.Hash == nil || len(p.Folded) == 0) {
			t.Fatalf("%q unpacked to %v %s", v, p.Hash, p.Folded)
		}
		PackedTenant(v)
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
