//go:build unix && !linux

package gemm

// adviseHugePages does nothing where there is no MADV_HUGEPAGE.
func adviseHugePages([]byte) {}
