package testenv

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Between makes rdb send each pipeline one command at a time and calls
// between once, right after the first command whose arguments match:
// another client's commands come between two commands of one pipeline,
// as Redis allows. A transaction runs in one step, so between comes
// before it. fired reports whether between was called.
func Between(rdb redis.UniversalClient, match func(args []any) bool, between func()) (fired func() bool) {
	h := &betweenHook{match: match, between: between}
	rdb.AddHook(h)
	return h.fired.Load
}

type betweenHook struct {
	match   func(args []any) bool
	between func()
	fired   atomic.Bool
}

func (h *betweenHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *betweenHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *betweenHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		tx := len(cmds) > 0 && cmds[0].Name() == "multi"
		var first error
		for i, c := range cmds {
			if !tx {
				if err := next(ctx, cmds[i:i+1]); err != nil && first == nil && !errors.Is(err, redis.Nil) {
					first = err
				}
			}
			if h.match(c.Args()) && h.fired.CompareAndSwap(false, true) {
				h.between()
			}
		}
		if tx {
			return next(ctx, cmds)
		}
		return first
	}
}
