package tensor

// LogProbImpls names the implementations of the log-prob loops this build and CPU can run,
// best first; "go" (the pure-Go reference) is last. Test hook for package tensor_test.
func LogProbImpls() []string {
	names := make([]string, len(lpImpls))
	for i, im := range lpImpls {
		names[i] = im.name
	}
	return names
}

// UseLogProbImpl makes LogProbEntropy and its backward use the named implementation until the
// returned function restores the default. Test hook; not safe to use in parallel tests.
func UseLogProbImpl(name string) (restore func()) {
	for i, im := range lpImpls {
		if im.name == name {
			old := lpSelect.Swap(int32(i))
			return func() { lpSelect.Store(old) }
		}
	}
	panic("tensor: unknown log-prob implementation " + name)
}
