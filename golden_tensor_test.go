package mtrl_test

// tensorGolden returns the handlers for the tensor op family (FORMAT.md §5).
func tensorGolden() map[string]goldenHandler {
	return map[string]goldenHandler{}
}
