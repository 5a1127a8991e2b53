package mtrl_test

// ppoGolden returns the handlers for the ppo op family (FORMAT.md §5).
func ppoGolden() map[string]goldenHandler {
	return map[string]goldenHandler{}
}
