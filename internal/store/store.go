// Package store owns Leasehold's data in Redis: every key (package keys),
// every Lua script (package scripts), every command sent, and every reply
// decoded. The domain packages above it keep the rules and the flow and
// call its typed operations; none of them sends a command or sees a
// go-redis type. How an operation fuses its commands into round trips is
// the store's own matter.
//
// Errors: an operation that could not reach Redis, or that Redis could not
// serve now, returns an error wrapping ErrUnavailable (see Classify).
package store

import (
	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/store/keys"
)

// Store sends the commands of every operation to one Redis: a single
// server, a Sentinel-managed primary or a Cluster.
type Store struct {
	rdb  redis.UniversalClient
	keys keys.Space
}

// Config is how a Store lays out and keeps its data.
type Config struct {
	// Prefix starts every key; "" is keys.DefaultPrefix. Processes that
	// share data share it.
	Prefix string
}

// New returns the store of rdb's data.
func New(rdb redis.UniversalClient, cfg Config) *Store {
	return &Store{rdb: rdb, keys: keys.New(cfg.Prefix)}
}
