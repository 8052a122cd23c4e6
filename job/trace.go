package job

// Span event names of the job's trace.
const EventCancelRequested = "cancel requested"
