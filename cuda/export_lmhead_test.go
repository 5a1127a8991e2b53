//go:build cuda

package cuda

// SetLMHeadChunk sets the LM head's vocabulary chunk for a test and returns the restore.
func SetLMHeadChunk(n int) (restore func()) {
	old := lmHeadChunk
	lmHeadChunk = n
	return func() { lmHeadChunk = old }
}

// LMChunk is lmChunk.
func LMChunk(rows, v int) int { return lmChunk(rows, v) }
