package vlm

// SampleBits is the seeded per-row generator of the device sampler (kernels/sample.cu): the 64
// random bits for (seed, row, step), SplitMix64 applied three times. A math/rand/v2 Rand whose
// source returns them draws the uniform the device draws (Float64 uses the low 53 bits), so
// the host sampler reproduces the device's choices (TestCUDASample).
func SampleBits(seed, row, step uint64) uint64 {
	return splitmix(splitmix(splitmix(seed)^row) ^ step)
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
