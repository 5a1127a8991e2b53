package mtrl_test

// perturbGolden returns the handlers for the perturb op family (FORMAT.md §5).
func perturbGolden() map[string]goldenHandler {
	return map[string]goldenHandler{}
}
