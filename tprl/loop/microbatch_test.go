package loop

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMicroBatchesByTokens splits rows by a token budget: runs of consecutive rows within it, a
// row over the budget alone, and the fixed split of UpdateRows rows without a budget.
func TestMicroBatchesByTokens(t *testing.T) {
	b := &Batch[int]{T: 6}
	for _, n := range []int{3, 2, 4, 9, 1, 1, 5} { // the 9 counts as T = 6
		b.Completions = append(b.Completions, Completion{Tokens: make([]int32, n)})
	}
	l := &Loop[int]{cfg: Config{MicroBatchTokens: 6}}
	require.Equal(t, [][2]int{{0, 2}, {2, 3}, {3, 4}, {4, 6}, {6, 7}}, l.microBatches(b, 0, 7, 100))
	require.Equal(t, [][2]int{{1, 3}, {3, 4}}, l.microBatches(b, 1, 4, 100)) // 2+4 fits exactly
	l.cfg.MicroBatchTokens = 0
	require.Equal(t, [][2]int{{0, 3}, {3, 6}, {6, 7}}, l.microBatches(b, 0, 7, 3))
}
