package execution_test

// helpers are the roles a test can start this binary in as a subprocess
// (testenv.StartHelper): worker processes to kill and pause.
var helpers = map[string]func() int{}
