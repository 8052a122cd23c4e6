package execution

// ClaimScript is the claim script, for tests that watch for it on the wire
// or need it cached in Redis.
var ClaimScript = claimScript

// FinishScript is the finish script, for benchmarks that count its runs.
var FinishScript = finishScript
