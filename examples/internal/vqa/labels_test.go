package vqa

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// visualWords returns the words of text labelled visual for s.
func visualWords(s Sample, tok *Tokenizer, text string) []string {
	ids := tok.Encode(text)
	var out []string
	for i, v := range VisualLabels(s, tok, ids) {
		if v {
			out = append(out, tok.Word(ids[i]))
		}
	}
	return out
}

func TestVisualLabels(t *testing.T) {
	tok := NewTokenizer()
	s := Sample{
		Objects: []Object{{"circle", "red", "top left"}, {"square", "blue", "bottom right"}},
		Prompt:  "what colour is the circle ? A green B red C blue D white",
		Answer:  "B",
	}
	cases := []struct {
		text string
		want []string
	}{
		{"<think> the circle is red </think> Answer: B", []string{"red", "B"}}, // circle is in the question
		{"<think> the circle is green </think> Answer: A", nil},                // hallucination, wrong letter
		{"<think> the circle is blue </think> Answer: C", []string{"blue"}},    // true of the square, still seen
		{"<think> the square is blue and the circle is red </think> Answer: B", []string{"square", "blue", "red", "B"}},
		{"<think> there are two shapes </think> Answer: B", []string{"two", "B"}},
		{"<think> there are three shapes </think>", nil},
		{"<think> the circle is at the top left </think>", []string{"top", "left"}},
		{"<think> bottom right top right </think>", []string{"bottom", "right", "top", "right"}},
		{"B Answer: A B Answer: Answer: B", []string{"B"}}, // only the letter right after Answer:
		{"triangle diamond cross yellow four", nil},
		{"", nil},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, visualWords(s, tok, c.text), c.text)
	}
	// Specials and out-of-range ids are never visual; the length matches.
	ids := []int32{PAD, BOS, EOS, UNK, -5, 999}
	assert.Equal(t, make([]bool, len(ids)), VisualLabels(s, tok, ids))
	assert.Empty(t, VisualLabels(s, tok, nil))
	// A sample without a scene has only the answer letter as visual token.
	assert.Equal(t, []string{"B"}, visualWords(Sample{Prompt: s.Prompt, Answer: "B"}, tok, "red circle one Answer: B"))
}

func TestReferenceLabels(t *testing.T) {
	tok := NewTokenizer()
	for _, s := range Generate(TaskConfig{ImageSize: 16, MaxShapes: 4, Options: 4}, 11, 0, 300) {
		ids, vis := ReferenceLabels(s, tok)
		require.Len(t, vis, len(ids))
		assert.Equal(t, s.Response, tok.Decode(ids))
		n := 0
		for i, v := range vis {
			if v {
				n++
			}
			if i == len(ids)-1 {
				assert.True(t, v, "answer letter of %q", s.Response)
			}
		}
		// Every reference chain states one (or two, for positions) perceived
		// words plus the answer letter; nothing else is visual.
		assert.True(t, n == 2 || n == 3, "%q: %d visual", s.Response, n)
	}
}
