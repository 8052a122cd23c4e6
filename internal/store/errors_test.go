package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/testenv"
)

// Classify marks as ErrUnavailable what a stopped Redis, a replica that
// refuses writes and a Redis too slow to answer give, and leaves the
// replies of a Redis that served the call as they are.
func TestClassifyUnavailable(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	primary := testenv.StartRedis(t)
	rdb := primary.Client(t)
	replica := testenv.StartReplica(t, primary).Client(t)

	served := map[string]error{
		"a missing key":  rdb.Get(ctx, "missing").Err(),
		"a script error": redis.NewScript("return redis.error_reply('ERR refused')").Run(ctx, rdb, nil).Err(),
		"a wrong type":   errors.Join(rdb.Set(ctx, "s", "v", 0).Err(), rdb.HGet(ctx, "s", "f").Err()),
	}
	for name, err := range served {
		if err == nil || errors.Is(Classify(err), ErrUnavailable) {
			t.Errorf("%s (%v): classified unavailable", name, err)
		}
	}
	if Classify(nil) != nil {
		t.Error("Classify(nil) is not nil")
	}

	short, stop := context.WithTimeout(ctx, time.Nanosecond)
	defer stop()
	<-short.Done()
	outages := map[string]error{
		"a write to a replica": replica.Set(ctx, "k", "v", 0).Err(),
		"a deadline passed":    rdb.Get(short, "k").Err(),
	}
	primary.Kill(t)
	outages["a stopped Redis"] = rdb.Get(ctx, "k").Err()
	outages["a stopped Redis, a script"] = redis.NewScript("return 1").Run(ctx, rdb, nil).Err()
	for name, err := range outages {
		c := Classify(err)
		if !errors.Is(c, ErrUnavailable) || !errors.Is(c, err) {
			t.Errorf("%s (%v): classified %v, want ErrUnavailable wrapping it", name, err, c)
		}
		if Classify(c) != c {
			t.Errorf("%s: classified twice, wrapped twice", name)
		}
	}
}
