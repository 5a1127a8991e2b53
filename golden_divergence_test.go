package mtrl_test

// divergenceGolden returns the handlers for the divergence op family (FORMAT.md §5).
func divergenceGolden() map[string]goldenHandler {
	return map[string]goldenHandler{}
}
