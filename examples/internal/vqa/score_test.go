package vqa

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestExtractChoice(t *testing.T) {
	cases := []struct {
		in   string
		want string // "" = no choice
	}{
		{"Answer: B", "B"},
		{"Answer:B", "B"},
		{"Answer :  B", "B"},
		{"Answer:\tB.", "B"},
		{"answer: C", "C"},
		{"ANSWER: D", "D"},
		{"The Answer: E)", "E"},
		{"Answer：F", "F"},                // full-width colon
		{"Answer: Ｇ", "G"},               // full-width letter
		{"Answer：Ｊ", "J"},                // both
		{"答案: A", "A"},                   // Chinese keyword
		{"答案：Ｂ", "B"},                    // Chinese, full-width colon and letter
		{"选项: C", "C"},                   // "option"
		{"选项：D。", "D"},                   // Chinese full stop after the letter
		{"最终答案：  E", "E"},                // keyword inside a phrase
		{"Answer: A ... Answer: C", "C"}, // the last one counts
		{"答案: A\nAnswer: B\n选项: D", "D"},
		{"Answer: C Answer: Blue", "C"}, // a trailing non-choice is skipped
		{"Answer: K", ""},               // outside A..J
		{"Answer: Ｋ", ""},
		{"Answer: a", ""}, // lower case is not a letter choice
		{"Answer: a circle", ""},
		{"Answer: Blue", ""},
		{"Answer: A1", ""},
		{"Answer: Ａｂ", ""},
		{"Answer B", ""}, // no colon
		{"Answer; B", ""},
		{"B", ""},
		{"", ""},
		{"<think> red </think>", ""},
		{"答案 B", ""},
		{"Answer: \nB", "B"}, // white space includes new lines
	}
	for _, c := range cases {
		got, _, ok := ExtractChoice(c.in)
		assert.Equal(t, c.want != "", ok, "%q", c.in)
		assert.Equal(t, c.want, got, "%q", c.in)
	}
}

func TestScore(t *testing.T) {
	w := DefaultRewardWeights()
	cases := []struct {
		resp, answer string
		acc, fmt     float64
	}{
		{"<think> the circle is red </think> Answer: B", "B", 1, 1},
		{"<think> the circle is red </think> Answer: C", "B", 0, 1},
		{"<think> the circle is red </think>Answer:B", "B", 1, 1},
		{"  \n<think>x</think>\n答案：Ｂ", "B", 1, 1},
		{"<think>红色</think> 选项: B", "B", 1, 1},
		{"<think> r </think> Answer: B", "Ｂ", 1, 1},          // full-width reference answer
		{"<think> r </think> Answer: B", " B ", 1, 1},        // padded reference answer
		{"<think> r </think> Answer: Ｂ and more", "B", 1, 1}, // trailing text allowed
		{"Answer: B", "B", 1, 0},                             // no think
		{"the circle is red Answer: B", "B", 1, 0},           // no think
		{"x <think> r </think> Answer: B", "B", 1, 0},        // text before <think>
		{"<think> </think> Answer: B", "B", 1, 0},            // blank thought
		{"<think> a </think> <think> b </think> Answer: B", "B", 1, 0},
		{"<think> a <think> b </think> Answer: B", "B", 1, 0},
		{"<think> a </think> b </think> Answer: B", "B", 1, 0},
		{"</think> a <think> Answer: B", "B", 1, 0},
		{"<think> Answer: B </think>", "B", 1, 0}, // answer not after the thought
		{"<think> a </think>", "B", 0, 0},
		{"<think> a </think> Answer: b", "B", 0, 0},
		{"<think> a </think> Answer: Blue", "B", 0, 0},
		{"<think> a", "B", 0, 0},
		{"", "B", 0, 0},
		{"<think> r </think> Answer: B", "", 0, 1}, // no valid reference letter
		{"<think> r </think> Answer: B", "K", 0, 1},
	}
	for _, c := range cases {
		r := Score(c.resp, c.answer, w)
		assert.Equal(t, c.acc, r.Accuracy, "accuracy %q vs %q", c.resp, c.answer)
		assert.Equal(t, c.fmt, r.Format, "format %q", c.resp)
		assert.InDelta(t, (4*c.acc+c.fmt)/5, r.Overall, 1e-12, "%q", c.resp)
	}
}

func TestRewardWeights(t *testing.T) {
	require.NoError(t, DefaultRewardWeights().Validate())
	assert.Equal(t, RewardWeights{4, 1}, DefaultRewardWeights())
	require.NoError(t, RewardWeights{1, 0}.Validate())
	for _, w := range []RewardWeights{{-1, 1}, {1, math.NaN()}, {math.Inf(1), 1}, {0, 0}} {
		assert.Error(t, w.Validate(), "%+v", w)
	}
	resp := "<think> x </think> Answer: C"
	assert.Equal(t, Reward{Overall: 0.5, Accuracy: 0, Format: 1}, Score(resp, "A", RewardWeights{1, 1}))
	assert.Equal(t, Reward{Overall: 1, Accuracy: 1, Format: 1}, Score(resp, "C", RewardWeights{0, 3}))
	assert.Equal(t, Reward{Overall: 0, Accuracy: 0, Format: 1}, Score(resp, "A", RewardWeights{1, 0}))
	assert.Equal(t, Reward{Overall: 0, Accuracy: 1, Format: 1}, Score(resp, "C", RewardWeights{}))
}

func FuzzScore(f *testing.F) {
	for _, s := range []string{"<think> a </think> Answer: B", "答案：Ｂ", "Answer: Ｊ", "<think><think>", "Answer:", "\xff\xfe"} {
		f.Add(s, "B")
	}
	f.Fuzz(func(t *testing.T, resp, answer string) {
		r := Score(resp, answer, DefaultRewardWeights())
		for _, v := range []float64{r.Accuracy, r.Format} {
			if v != 0 && v != 1 {
				t.Fatalf("%+v", r)
			}
		}
		if math.Abs(r.Overall-(4*r.Accuracy+r.Format)/5) > 1e-12 {
			t.Fatalf("%+v", r)
		}
		if letter, at, ok := ExtractChoice(resp); ok {
			if indexOf(letters, letter) < 0 || at < 0 || at >= len(resp) {
				t.Fatalf("%q → %q at %d", resp, letter, at)
			}
		}
		if r.Format == 1 && !strings.Contains(resp, "</think>") {
			t.Fatalf("format without </think>: %q", resp)
		}
	})
}
