package tensor

// LogProbImpls names the implementations of the log-prob loops this build and CPU can run,
// best first; "go" (the pure-Go reference) is last. Test hook for package tensor_test.
func LogProbImpls() []string { return lpImpls.Names() }

// UseLogProbImpl makes LogProbEntropy and its backward use the named implementation until the
// returned function restores the default. Test hook; not safe to use in parallel tests.
func UseLogProbImpl(name string) (restore func()) { return lpImpls.Use(name) }
