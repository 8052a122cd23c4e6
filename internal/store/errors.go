package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/replicas"
)

// ErrUnavailable is what Classify wraps an error in when it means Redis
// could not be reached, did not answer in time, or is up but cannot serve
// now: worth a retry, and never the caller's fault. Callers above storage
// branch on it alone, never on go-redis's errors.
var ErrUnavailable = errors.New("redis unavailable")

// Classify returns err wrapped in ErrUnavailable when it is an outage
// (see ErrUnavailable), and err as it is otherwise. It is the one place
// that reads go-redis's and the network's errors for that.
func Classify(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) || !outage(err) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

func outage(err error) bool {
	var netErr net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded),
		errors.As(err, &netErr),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, redis.ErrClosed), errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrPoolExhausted),
		errors.Is(err, replicas.ErrNotConfirmed): // the write may be on the primary only: a failover could lose it
		return true
	}
	// A redirect that outlived the client's redirects: a Cluster's slots
	// are moving (a failover, a node coming back with its old map) and the
	// nodes do not agree yet.
	if _, moved := redis.IsMovedError(err); moved {
		return true
	}
	if _, ask := redis.IsAskError(err); ask {
		return true
	}
	// Replies of a Redis that is up but cannot serve now.
	return redis.IsLoadingError(err) || redis.IsReadOnlyError(err) || redis.IsClusterDownError(err) ||
		redis.IsTryAgainError(err) || redis.IsMasterDownError(err) || redis.IsMaxClientsError(err) ||
		redis.IsOOMError(err) || redis.IsNoReplicasError(err) || redis.HasErrorPrefix(err, "BUSY")
}
