package mtrl_test

// tprlGolden returns the handlers for the tprl op family (FORMAT.md §5).
func tprlGolden() map[string]goldenHandler {
	return map[string]goldenHandler{}
}
