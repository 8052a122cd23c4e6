package job

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
)

// Bounds of signals (API.md, Waits, signals and checkpoints).
const (
	// MaxSignalData is the most bytes of a signal's data.
	MaxSignalData = 64 << 10
	// MaxCheckpoint is the most bytes of a checkpoint.
	MaxCheckpoint = 256 << 10
	// MaxKeptSignals is how many signals a job keeps for later waits (sent
	// before a wait for them, or for another name), and MaxKeptSignalBytes
	// how many bytes of data they hold in all: a signal past either → ErrSignalsFull.
	MaxKeptSignals     = 16
	MaxKeptSignalBytes = 256 << 10
)

// ErrSignalsFull: the job already keeps MaxKeptSignals signals, or
// MaxKeptSignalBytes of their data, for waits to come; the signal was not
// kept.
var ErrSignalsFull = errors.New("job: too many signals kept for later waits")

// SignalNamePattern is what a signal name must match.
var SignalNamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_.:-]{0,63}$`)

// ValidateSignalName checks the name of a signal, or of the signal a wait
// waits for.
func ValidateSignalName(name string) error {
	if !SignalNamePattern.MatchString(name) {
		return fmt.Errorf("job: signal name %q must match %s", name, SignalNamePattern)
	}
	return nil
}

// Signal is what resumed a job from a wait: the signal's name and data, or
// TimedOut when its wait reached its timeout first (Data is then null).
type Signal struct {
	Name     string          `json:"name"`
	Data     json.RawMessage `json:"data"`
	TimedOut bool            `json:"timed_out"`
}

// Span event name of a signal in the job's trace.
const EventSignal = "signal"
