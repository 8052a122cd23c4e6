package testenv

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

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

// RedisCPU is how much CPU time the Redis behind rdb has used (user and
// system, from INFO cpu): benchmarks report Redis's share of each
// operation from two readings.
func RedisCPU(tb testing.TB, rdb redis.UniversalClient) time.Duration {
	tb.Helper()
	info, err := rdb.Info(tb.Context(), "cpu").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var total float64
	for line := range strings.SplitSeq(info, "\n") {
		name, value, _ := strings.Cut(strings.TrimSpace(line), ":")
		if name == "used_cpu_sys" || name == "used_cpu_user" {
			s, _ := strconv.ParseFloat(value, 64)
			total += s
		}
	}
	return time.Duration(total * float64(time.Second))
}

// ProcessCPU is how much CPU time this process has used, user and system.
func ProcessCPU(tb testing.TB) time.Duration {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// RedisMemory is how many bytes the Redis behind rdb holds (used_memory
// from INFO memory): benchmarks report what each job costs to keep.
func RedisMemory(tb testing.TB, rdb redis.UniversalClient) int64 {
	tb.Helper()
	info, err := rdb.Info(tb.Context(), "memory").Result()
	if err != nil {
		tb.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	tb.Fatal("INFO memory has no used_memory")
	return 0
}
