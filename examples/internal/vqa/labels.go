package vqa

import "strings"

// VisualLabels labels each token of a response (ids as produced by Encode; any
// response, not only the reference chain) with whether its correct value can
// only be known by looking at the sample's image. The rule, per token:
//
//   - a colour word is visual iff an object of that colour is in the image;
//   - a shape word is visual iff an object of that shape is in the image;
//   - a number word ("one".."nine") is visual iff it equals the number of
//     objects;
//   - a side word ("top", "bottom", "left", "right") is visual iff some object
//     lies on that side of the 2x2 grid;
//   - in every case above, only if the word does not occur in the question
//     (the prompt up to its first "?"): "circle" in "the circle is blue" is
//     copied from "what colour is the circle ?" and is not visual, "blue" is;
//   - an option letter is visual iff it equals the correct answer and directly
//     follows the token "Answer:" (the choice itself depends on the image);
//   - every other token (function words, <think>, specials, false statements,
//     PAD/BOS/EOS, unknown ids) is not visual.
//
// So on the reference chain the visual tokens are exactly the perceived facts
// and the answer letter, and on a sampled response only true perceptions count:
// a hallucinated colour is not a visual token. The result has len(response).
func VisualLabels(s Sample, tok *Tokenizer, response []int32) []bool {
	out := make([]bool, len(response))
	colourIn := map[string]bool{}
	shapeIn := map[string]bool{}
	sideIn := map[string]bool{}
	for _, o := range s.Objects {
		colourIn[o.Colour] = true
		shapeIn[o.Shape] = true
		for _, w := range strings.Fields(o.Position) {
			sideIn[w] = true
		}
	}
	count := ""
	if n := len(s.Objects); n < len(numbers) {
		count = numbers[n]
	}
	inQuestion := map[string]bool{}
	q := s.Prompt
	if i := strings.Index(q, "?"); i >= 0 {
		q = q[:i]
	}
	for _, w := range strings.Fields(q) {
		inQuestion[w] = true
	}
	answerTok, _ := tok.ID("Answer:")
	for i, id := range response {
		w := tok.Word(id)
		if id == PAD || id == BOS || id == EOS || id == UNK {
			continue
		}
		switch {
		case indexOf(letters, w) >= 0:
			out[i] = i > 0 && response[i-1] == answerTok && w == s.Answer
		case inQuestion[w]:
		case indexOf(colours, w) >= 0:
			out[i] = colourIn[w]
		case indexOf(shapes, w) >= 0:
			out[i] = shapeIn[w]
		case indexOf(numbers, w) >= 0:
			out[i] = w == count
		case indexOf(sides, w) >= 0:
			out[i] = sideIn[w]
		}
	}
	return out
}

// ReferenceLabels encodes the sample's reference chain and labels it with
// VisualLabels.
func ReferenceLabels(s Sample, tok *Tokenizer) (ids []int32, visual []bool) {
	ids = tok.Encode(s.Response)
	return ids, VisualLabels(s, tok, ids)
}
