package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/replicas"
)

// RedisConfig names the Redis a process keeps its state in.
type RedisConfig struct {
	// URL is one of
	//
	//	redis://[user:password@]host:port/db          one Redis (rediss:// for TLS)
	//	redis+cluster://[user:password@]h1:p1,h2:p2   a Redis Cluster (rediss+cluster:// for TLS)
	//	redis+sentinel://[user:password@]s1:26379,s2:26379/master[/db]
	//	                                              the master a Sentinel group names
	//	                                              (rediss+sentinel:// for TLS)
	//
	// each with go-redis's query options (?pool_size=100). For Sentinel the
	// user and password authenticate to the sentinels and, unless
	// ?password= is given, to the master.
	URL string
	// AssumeNoEviction skips the start-up check that maxmemory-policy is
	// noeviction, for a managed Redis that refuses CONFIG: the operator
	// asserts the policy. Logged as a warning at every start.
	AssumeNoEviction bool
	// PoolSize, when not 0, overrides the URL's pool_size.
	PoolSize int
	// MinReplicas, when at least 1, makes the writes a caller acknowledges
	// (under replicas.Ack: the API's writes, a claim's) wait until this
	// many replicas have them, at most ReplicaTimeout (Redis WAIT).
	MinReplicas    int
	ReplicaTimeout time.Duration
}

// RedisFlags are the flags that name the Redis: --redis-url and
// --redis-assume-noeviction.
type RedisFlags struct {
	url              *string
	assumeNoEviction *bool
	minReplicas      *int
	replicaTimeout   *time.Duration
}

// Redis defines --redis-url, with usage, and --redis-assume-noeviction.
func (f *Flags) Redis(usage string) RedisFlags {
	return RedisFlags{
		url: f.URL("redis-url", "LEASEHOLD_REDIS_URL", "redis://127.0.0.1:6379/0", usage+
			"; a cluster: redis+cluster://h1:p1,h2:p2; Sentinel: redis+sentinel://s1:26379,s2:26379/master/db"),
		assumeNoEviction: f.Bool("redis-assume-noeviction", "LEASEHOLD_REDIS_ASSUME_NOEVICTION", false,
			"skip the start-up check of maxmemory-policy, for a managed Redis that refuses CONFIG: you assert it is noeviction"),
		minReplicas: f.Int("redis-min-replicas", "LEASEHOLD_REDIS_MIN_REPLICAS", 0,
			"acknowledged writes (the API's, a claim's before its handler starts) wait until this many replicas have them (Redis WAIT); 0: no wait"),
		replicaTimeout: f.Duration("redis-replica-timeout", "LEASEHOLD_REDIS_REPLICA_TIMEOUT", time.Second,
			"how long a write waits for its replicas; past it the API answers 503 (keep it below the Redis read timeout, 3s by default)"),
	}
}

// Config returns the configuration the flags give.
func (r RedisFlags) Config() RedisConfig {
	return RedisConfig{URL: *r.url, AssumeNoEviction: *r.assumeNoEviction,
		MinReplicas: *r.minReplicas, ReplicaTimeout: *r.replicaTimeout}
}

// Redis connects to cfg.URL and checks the server: it must answer, and it
// must never evict keys, or leases would vanish and limits oversell.
// Context deadlines are honoured on the wire, so a Redis that accepts
// connections but does not answer costs a caller its own timeout, not the
// client's read timeout. No error or log line shows the URL's password.
func Redis(ctx context.Context, cfg RedisConfig, log *slog.Logger) (redis.UniversalClient, error) {
	rdb, err := NewRedisClient(cfg)
	if err != nil {
		return nil, err
	}
	check := CheckNoEviction
	if cfg.AssumeNoEviction {
		log.Warn("NOT CHECKING Redis's maxmemory-policy (LEASEHOLD_REDIS_ASSUME_NOEVICTION): the operator asserts noeviction. " +
			"If Redis evicts keys, leases vanish and every concurrency limit oversells")
		check = ping
	}
	if err := check(ctx, rdb); err != nil {
		rdb.Close()
		return nil, redactErr(err, cfg.URL)
	}
	return rdb, nil
}

// NewRedisClient returns a client for cfg.URL without contacting Redis.
func NewRedisClient(cfg RedisConfig) (redis.UniversalClient, error) {
	if cfg.MinReplicas < 0 || cfg.MinReplicas > 0 && cfg.ReplicaTimeout <= 0 {
		return nil, fmt.Errorf("redis min replicas %d, replica timeout %v: want 0 or more replicas and a timeout above 0",
			cfg.MinReplicas, cfg.ReplicaTimeout)
	}
	rdb, err := newRedisClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("redis url %s: %w", Redact(cfg.URL), redactErr(err, cfg.URL))
	}
	if err := replicas.Require(rdb, cfg.MinReplicas, cfg.ReplicaTimeout); err != nil {
		rdb.Close()
		return nil, err
	}
	return rdb, nil
}

// ClusterReload is how often a Cluster client reads the slots' map again
// (one CLUSTER SLOTS), unless the URL says otherwise. go-redis's default,
// a minute, is how long a client would send a failed-over master's slots
// to the dead node: every claim and heartbeat of its queues would fail
// for that long after the replica took over.
const ClusterReload = 2 * time.Second

func newRedisClient(cfg RedisConfig) (redis.UniversalClient, error) {
	scheme, rest, _ := strings.Cut(cfg.URL, "://")
	base, topology, _ := strings.Cut(scheme, "+")
	switch topology {
	case "":
		opts, err := redis.ParseURL(cfg.URL)
		if err != nil {
			return nil, err
		}
		opts.ContextTimeoutEnabled = true
		opts.PoolSize = cmp.Or(cfg.PoolSize, opts.PoolSize)
		return redis.NewClient(opts), nil
	case "cluster":
		u, err := multiHost(base, rest, nil)
		if err != nil {
			return nil, err
		}
		opts, err := redis.ParseClusterURL(u)
		if err != nil {
			return nil, err
		}
		opts.ContextTimeoutEnabled = true
		opts.PoolSize = cmp.Or(cfg.PoolSize, opts.PoolSize)
		opts.ClusterStateReloadInterval = cmp.Or(opts.ClusterStateReloadInterval, ClusterReload)
		return redis.NewClusterClient(opts), nil
	case "sentinel":
		u, err := multiHost(base, rest, sentinelPath)
		if err != nil {
			return nil, err
		}
		opts, err := redis.ParseFailoverURL(u)
		if err != nil {
			return nil, err
		}
		if opts.Password == "" {
			opts.Username, opts.Password = opts.SentinelUsername, opts.SentinelPassword
		}
		opts.ContextTimeoutEnabled = true
		opts.PoolSize = cmp.Or(cfg.PoolSize, opts.PoolSize)
		return redis.NewFailoverClient(opts), nil
	}
	return nil, fmt.Errorf("unknown scheme %q: want redis, rediss, redis+cluster, rediss+cluster, redis+sentinel or rediss+sentinel", scheme)
}

// multiHost turns base://[userinfo@]h1,h2,h3[/path][?query] into the form
// go-redis parses, base://[userinfo@]h1[/path]?query&addr=h2&addr=h3.
// path, when not nil, rewrites the path and the query.
func multiHost(base, rest string, path func(p string, q url.Values) (string, error)) (string, error) {
	end := strings.IndexAny(rest, "/?")
	if end < 0 {
		end = len(rest)
	}
	authority, tail := rest[:end], rest[end:]
	userinfo, hosts := "", authority
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		userinfo, hosts = authority[:at+1], authority[at+1:]
	}
	p, rawQuery, _ := strings.Cut(tail, "?")
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return "", err
	}
	addrs := strings.Split(hosts, ",")
	if addrs[0] == "" {
		return "", errors.New("no host")
	}
	for _, a := range addrs[1:] {
		q.Add("addr", a)
	}
	if path != nil {
		if p, err = path(p, q); err != nil {
			return "", err
		}
	}
	return base + "://" + userinfo + addrs[0] + p + "?" + q.Encode(), nil
}

// sentinelPath reads /master[/db] into ?master_name= and the path /db.
func sentinelPath(p string, q url.Values) (string, error) {
	master, db, _ := strings.Cut(strings.TrimPrefix(p, "/"), "/")
	if master == "" {
		return "", errors.New("no master name: want redis+sentinel://host:26379,host:26379/master[/db]")
	}
	q.Set("master_name", master)
	if db == "" {
		return "", nil
	}
	return "/" + db, nil
}

// CheckNoEviction fails unless Redis answers and its maxmemory-policy is
// noeviction, on every master of a cluster.
func CheckNoEviction(ctx context.Context, rdb redis.UniversalClient) error {
	ctx, stop := context.WithTimeout(ctx, 5*time.Second)
	defer stop()
	if cluster, ok := rdb.(*redis.ClusterClient); ok {
		return cluster.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			if err := checkPolicy(ctx, node); err != nil {
				return fmt.Errorf("%s: %w", node.Options().Addr, err)
			}
			return nil
		})
	}
	return checkPolicy(ctx, rdb)
}

func checkPolicy(ctx context.Context, rdb redis.Cmdable) error {
	cfg, err := rdb.ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil {
		if isUnknownCommand(err) {
			return fmt.Errorf("redis refuses CONFIG GET maxmemory-policy (%w), as a managed Redis may: "+
				"if its maxmemory-policy is noeviction, say so with LEASEHOLD_REDIS_ASSUME_NOEVICTION=1 (--redis-assume-noeviction)", err)
		}
		return fmt.Errorf("redis: %w", err)
	}
	if policy := cfg["maxmemory-policy"]; policy != "noeviction" {
		return fmt.Errorf("redis maxmemory-policy is %q: Leasehold needs noeviction, "+
			"or Redis may evict live leases and oversell every limit (set it with: CONFIG SET maxmemory-policy noeviction)", policy)
	}
	return nil
}

func isUnknownCommand(err error) bool {
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "unknown command") || strings.Contains(msg, "noperm")
}

// ping checks only that Redis answers.
func ping(ctx context.Context, rdb redis.UniversalClient) error {
	ctx, stop := context.WithTimeout(ctx, 5*time.Second)
	defer stop()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	return nil
}

var passwordParam = regexp.MustCompile(`(?i)(password=)[^&#]*`)

// Redact returns a URL with its password, in the user info or a password=
// parameter, replaced by xxxxx.
func Redact(raw string) string {
	out := passwordParam.ReplaceAllString(raw, "${1}xxxxx")
	i := strings.Index(out, "://")
	if i < 0 {
		return out
	}
	rest := out[i+3:]
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	at := strings.LastIndex(rest[:end], "@")
	if at < 0 {
		return out
	}
	user, _, hasPassword := strings.Cut(rest[:at], ":")
	if !hasPassword {
		return out
	}
	return out[:i+3] + user + ":xxxxx" + rest[at:]
}

// redactErr returns err with raw, and any password in it, redacted from
// its text: url.Parse, among others, quotes the whole URL in its errors.
func redactErr(err error, raw string) error {
	msg := err.Error()
	redacted := strings.ReplaceAll(msg, raw, Redact(raw))
	for _, secret := range passwords(raw) {
		redacted = strings.ReplaceAll(redacted, secret, "xxxxx")
	}
	if redacted == msg {
		return err
	}
	return errors.New(redacted)
}

// passwords returns what in raw may be a password, as written and decoded.
func passwords(raw string) []string {
	var out []string
	add := func(s string) {
		if s != "" {
			out = append(out, s)
			if d, err := url.PathUnescape(s); err == nil && d != s {
				out = append(out, d)
			}
		}
	}
	if i := strings.Index(raw, "://"); i >= 0 {
		rest := raw[i+3:]
		if end := strings.IndexAny(rest, "/?#"); end >= 0 {
			rest = rest[:end]
		}
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			_, p, _ := strings.Cut(rest[:at], ":")
			add(p)
		}
	}
	for _, m := range passwordParam.FindAllString(raw, -1) {
		_, p, _ := strings.Cut(m, "=")
		add(p)
	}
	return out
}
