package testenv

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// info reads one section of INFO from the Redis behind rdb, as its
// name: value pairs.
func info(tb testing.TB, rdb redis.UniversalClient, section string) map[string]string {
	tb.Helper()
	text, err := rdb.Info(tb.Context(), section).Result()
	if err != nil {
		tb.Fatal(err)
	}
	fields := map[string]string{}
	for line := range strings.SplitSeq(text, "\n") {
		if name, value, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[name] = value
		}
	}
	return fields
}

// CommandsExecuted is how many commands the Redis behind rdb has run, those
// inside scripts included and INFO's own excluded, from INFO commandstats:
// benchmarks report commands per operation from two readings.
func CommandsExecuted(tb testing.TB, rdb redis.UniversalClient) int64 {
	tb.Helper()
	var total int64
	for name, stats := range info(tb, rdb, "commandstats") {
		calls, ok := strings.CutPrefix(stats, "calls=")
		if !ok || name == "cmdstat_info" {
			continue
		}
		n, _ := strconv.ParseInt(calls[:strings.IndexByte(calls, ',')], 10, 64)
		total += n
	}
	return total
}

// RedisCPU is how much CPU time the Redis behind rdb has used (user and
// system, from INFO cpu): benchmarks report Redis's share of each
// operation from two readings.
func RedisCPU(tb testing.TB, rdb redis.UniversalClient) time.Duration {
	tb.Helper()
	cpu := info(tb, rdb, "cpu")
	var total float64
	for _, name := range []string{"used_cpu_sys", "used_cpu_user"} {
		s, _ := strconv.ParseFloat(cpu[name], 64)
		total += s
	}
	return time.Duration(total * float64(time.Second))
}

// RedisMemory is how many bytes the Redis behind rdb holds (used_memory
// from INFO memory): benchmarks report what each job costs to keep.
func RedisMemory(tb testing.TB, rdb redis.UniversalClient) int64 {
	tb.Helper()
	n, err := strconv.ParseInt(info(tb, rdb, "memory")["used_memory"], 10, 64)
	if err != nil {
		tb.Fatalf("INFO memory: used_memory: %v", err)
	}
	return n
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

// Callgrind runs callgrind_control op on the Redis behind rdb when
// LEASEHOLD_BENCH_CALLGRIND is set (the Makefile's bench/instructions
// targets run Redis under callgrind): a benchmark counts its Redis
// instructions between a --zero as its clock starts and a --dump as it
// stops.
func Callgrind(tb testing.TB, rdb redis.UniversalClient, op string) {
	tb.Helper()
	if os.Getenv("LEASEHOLD_BENCH_CALLGRIND") == "" {
		return
	}
	pid := info(tb, rdb, "server")["process_id"]
	if pid == "" {
		tb.Fatal("callgrind: no process_id in INFO server")
	}
	if out, err := exec.Command("callgrind_control", op, pid).CombinedOutput(); err != nil {
		tb.Fatalf("callgrind_control %s %s: %v\n%s", op, pid, err, out)
	}
}
