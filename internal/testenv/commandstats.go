package testenv

import (
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// CommandsExecuted is how many commands the Redis behind rdb has run, those
// inside scripts included and INFO's own excluded, from INFO commandstats:
// benchmarks report commands per operation from two readings.
func CommandsExecuted(tb testing.TB, rdb redis.UniversalClient) int64 {
	tb.Helper()
	info, err := rdb.Info(tb.Context(), "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var total int64
	for line := range strings.SplitSeq(info, "\n") {
		_, rest, ok := strings.Cut(line, ":calls=")
		if !ok || strings.HasPrefix(line, "cmdstat_info:") {
			continue
		}
		n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
		total += n
	}
	return total
}
