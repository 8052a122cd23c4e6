package store

import (
	"github.com/leasehold/leasehold/job"

	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/store/scripts"
)

// folded is what a reaper moved out of an ended job's hash and stream into
// its folded key (internal/store/scripts/transition.lua's fold), so the hash is
// a small listpack: its long fields by name, and its events, three
// strings each (stream id, type, data) in order: packed (Packed), or as
// they are (Events) by a version before the packing.
type folded struct {
	Fields map[string]string `json:"f"`
	Events []string          `json:"e"`
	Packed []string          `json:"E"`
}

// readFolded reads the reply of a GET of a job's folded key; ok is false
// when there is none (the job is not folded). A packed job's (scripts.Pack)
// is its folded key's JSON, and p its content (nil when not packed).
func readFolded(cmd *redis.StringCmd) (f folded, p *scripts.Packed, ok bool, err error) {
	b, err := cmd.Bytes()
	if errors.Is(err, redis.Nil) {
		return folded{}, nil, false, nil
	}
	if err != nil {
		return folded{}, nil, false, err
	}
	if scripts.IsPacked(b) {
		unpacked, err := scripts.Unpack(b)
		if err != nil {
			return folded{}, nil, false, fmt.Errorf("job: folded key: %w", err)
		}
		p, b = &unpacked, unpacked.Folded
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return folded{}, nil, false, fmt.Errorf("job: folded key: %w", err)
	}
	return f, p, true, nil
}

// events returns f's events, three strings each, unpacked. held are the
// values of eventFields as the job's hash holds them (HMGET's, in that
// order), which a packed state event refers to.
func (f folded) events(held []any) ([]string, error) {
	if f.Packed == nil {
		return f.Events, nil
	}
	values := make([]string, len(scripts.EventFields))
	for k, name := range scripts.EventFields {
		if k < len(held) && held[k] != nil {
			values[k], _ = held[k].(string)
		} else if v, ok := f.Fields[name]; ok {
			values[k] = v // a long worker id left the hash
		} else {
			values[k] = scripts.Implied[name]
		}
	}
	events, err := unpackEvents(f.Packed, f.Fields["result"], values)
	if err != nil {
		return nil, fmt.Errorf("folded key: %w", err)
	}
	return events, nil
}

// unpackEvents returns the events packed as the fold packs them (its
// comment in transition.lua says how; expand there unpacks them too):
// each id after the first as "+<ms after the one before>[-<seq>]", a
// state event as type "s" and data "<state>,<attempt>,<job values>", a
// job value as the job holds it (held, in eventFields' order) as "=", and
// an output event that is a run of result's bytes as type "o" and data
// "<offset>,<length>".
func unpackEvents(packed []string, result string, held []string) ([]string, error) {
	if len(packed)%3 != 0 {
		return nil, fmt.Errorf("%d packed event strings, not three each", len(packed))
	}
	events := make([]string, len(packed))
	var ms uint64
	for i := 0; i < len(packed); i += 3 {
		id, typ, data := packed[i], packed[i+1], packed[i+2]
		if rest, ok := strings.CutPrefix(id, "+"); ok {
			d, seq, _ := strings.Cut(rest, "-")
			n, err := strconv.ParseUint(d, 10, 64)
			seq = cmp.Or(seq, "0")
			if _, errSeq := strconv.ParseUint(seq, 10, 64); err != nil || errSeq != nil || ms+n < ms {
				return nil, fmt.Errorf("packed event id %q", id)
			}
			ms += n
			id = strconv.FormatUint(ms, 10) + "-" + seq
		} else {
			sid, err := job.ParseStreamID(id)
			if err != nil {
				return nil, fmt.Errorf("packed event id %q", id)
			}
			ms = sid.Ms
		}
		switch typ {
		case "s":
			state, rest, _ := strings.Cut(data, ",")
			attempt, list, ok := strings.Cut(rest, ",")
			if !ok {
				return nil, fmt.Errorf("packed state %q", data)
			}
			values := strings.Split(list, ",")
			for k, v := range values {
				if v == "=" {
					if k >= len(held) {
						return nil, fmt.Errorf("packed state %q refers to a job value it has not", data)
					}
					values[k] = held[k]
				}
			}
			typ, data = "state", `{"state":"`+state+`","attempt":`+attempt+`,"job":["`+strings.Join(values, `","`)+`"]}`
		case "o":
			from, n, ok := outputRun(data, len(result))
			if !ok {
				return nil, fmt.Errorf("packed output %q of a result of %d bytes", data, len(result))
			}
			typ, data = "output", `{"text":"`+result[from:from+n]+`"}`
		}
		events[i], events[i+1], events[i+2] = id, typ, data
	}
	return events, nil
}

// outputRun parses a packed output's "<offset>,<length>", a run within a
// result of size bytes.
func outputRun(data string, size int) (from, n int, ok bool) {
	a, b, _ := strings.Cut(data, ",")
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	if errA != nil || errB != nil || x > uint64(size) || y > uint64(size)-x {
		return 0, 0, false
	}
	return int(x), int(y), true
}

// merge adds to h, a job's fields names (shown) as its hash holds them,
// those of them the fold moved out: the hash's own win, as the scripts'
// (record in transition.lua), since a field written after the fold goes
// to the hash. (Those it dropped for their usual value ParseRecord reads
// as that value, as it does for any job.)
func (f folded) merge(h map[string]string, names []string) {
	for _, name := range names {
		if _, ok := h[name]; !ok {
			if v, ok := f.Fields[name]; ok {
				h[name] = v
			}
		}
	}
}

// jobRead is one job's read in a pipeline: HMGET of some of its hash's
// fields and of the fold's marker, then GET of its folded key, which holds
// the whole job once it is packed (scripts.Pack). Read in one transaction
// (a job's keys share its queue's slot), the two are one step. In a plain
// pipeline they are not: a retry's expand, or an unpack, may come between
// them (torn: values), and the job must be read again in one step. A
// fold or a packing between them is harmless: the hash was read whole.
type jobRead struct {
	names  []string
	hash   *redis.SliceCmd
	folded *redis.StringCmd
}

// readJob queues the read of names of job id of queue into p.
func (s *Store) readJob(ctx context.Context, p redis.Pipeliner, queue, id string, names []string) jobRead {
	return jobRead{
		names:  names,
		hash:   p.HMGet(ctx, s.keys.Job(queue, id), append(slices.Clip(names), "folded")...),
		folded: p.Get(ctx, s.keys.JobFolded(queue, id)),
	}
}

// values returns the values of the names read, as the hash holds them (or
// held them, packed), what the fold moved out (ok false when the job was
// not folded as read), and torn when the job was folded but its folded
// key gone by the second read, or neither hash nor packed job was there:
// read apart, either may be a job expanded or unpacked between the reads,
// to be read again in one step; read in one, a folded job that lost its
// folded key (its hash shows alone), or no job.
func (r jobRead) values() (vals []any, f folded, ok, torn bool, err error) {
	all, err := r.hash.Result()
	if err != nil {
		return nil, folded{}, false, false, err
	}
	vals, marker := all[:len(all)-1], all[len(all)-1]
	if marker == nil && slices.ContainsFunc(vals, func(v any) bool { return v != nil }) {
		return vals, folded{}, false, false, nil // not folded
	}
	f, p, ok, err := readFolded(r.folded)
	switch {
	case err != nil || marker != nil:
		return vals, f, ok, !ok && err == nil, err
	case p != nil:
		for i, name := range r.names {
			if v, held := p.Hash[name]; held {
				vals[i] = v
			}
		}
		return vals, f, true, false, nil
	}
	return vals, folded{}, false, true, nil // no job, or one unpacked between the reads
}

// hashFields is HMGET of names on job id of queue, a packed job
// (scripts.Pack) of owner ("" for any tenant: the admin) written back
// first: what a caller reads of a job before a script on it, which takes
// it through KEYS or checks it. Every value is nil when there is no such
// job, or it is another tenant's, packed. A job found in neither form is
// read again after the unpack: another caller may have unpacked it
// between the reads.
func (s *Store) hashFields(ctx context.Context, owner, queue, id string, names ...string) ([]any, error) {
	hash := s.keys.Job(queue, id)
	vals, err := s.rdb.HMGet(ctx, hash, names...).Result()
	if err != nil || slices.ContainsFunc(vals, func(v any) bool { return v != nil }) {
		return vals, err
	}
	if err := s.unpackJob(ctx, owner, queue, id); err != nil {
		return vals, err
	}
	return s.rdb.HMGet(ctx, hash, names...).Result()
}

// shown returns the fields of a job read (shownFields or jobFields), as
// they were before the fold (shown; nil when the job does not exist), and
// torn (values): then h holds what the hash holds alone.
func (r jobRead) shown() (h map[string]string, torn bool, err error) {
	vals, f, ok, torn, err := r.values()
	if err != nil {
		return nil, false, err
	}
	if h = shown(r.names, vals); h != nil && ok {
		f.merge(h, r.names)
	}
	return h, torn, nil
}

// shownOf reads the fields names (shownFields or jobFields) of job id of
// queue (shown; nil when the job does not exist) in one step: a job whose
// folded key was lost shows what its hash holds.
func (s *Store) shownOf(ctx context.Context, queue, id string, names []string) (h map[string]string, err error) {
	var r jobRead
	if _, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		r = s.readJob(ctx, p, queue, id, names)
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	h, _, err = r.shown()
	return h, err
}
