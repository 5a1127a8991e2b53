package mtrl_test

// advantageGolden returns the handlers for the advantage op family (FORMAT.md §5).
func advantageGolden() map[string]goldenHandler {
	return map[string]goldenHandler{}
}
