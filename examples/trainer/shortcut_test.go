package main

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/mtrl-go/mtrl/examples/internal/vqa"
	"github.com/stretchr/testify/require"
)

// TestSFTShortcutReferences checks the warm start's references with training.sft_shortcut: true
// before the shortcut's steps; inside them, a fraction near sft_shortcut answers option A with
// A's value in the think (true ones where A is correct), the rest are the true references.
func TestSFTShortcutReferences(t *testing.T) {
	tr, err := NewTrainer(tinyConfig(t, t.TempDir(), "training.sft_steps=10", "training.sft_shortcut=0.6",
		"training.sft_shortcut_steps=4", "dataset.ordered_options=true"))
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(1, 2))
	for s := 0; s < 6; s++ { // before the last 4 steps: always the true reference
		for _, e := range tr.train {
			require.Equal(t, e.ref, tr.sftReference(e, s, r), "step %d", s)
		}
	}
	rewritten, notA := 0, 0
	for _, e := range tr.train {
		if e.s.Answer != "A" {
			notA++
		}
		for range 20 {
			got := tr.sftReference(e, 7, r)
			if e.s.Answer == "A" {
				require.Equal(t, e.ref, got)
				continue
			}
			text := tr.tok.Decode(got)
			if text == tr.tok.Decode(e.ref) {
				continue
			}
			rewritten++
			require.True(t, strings.HasSuffix(text, "Answer: A"), "%q", text)
			opts, ok := vqa.Options(e.s.Prompt)
			require.True(t, ok)
			require.Contains(t, text, " "+opts[0][1]+" ", "the think states A's value: %q", text)
		}
	}
	frac := float64(rewritten) / float64(20*notA)
	require.InDelta(t, 0.6, frac, 0.05, "shortcut fraction among rows whose answer is not A")
}
