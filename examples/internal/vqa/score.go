package vqa

import (
	"fmt"
	"math"
	"regexp"
	"strings"
)

// RewardWeights weighs the two reward terms: Overall = (Accuracy*acc +
// Format*fmt) / (Accuracy + Format).
type RewardWeights struct{ Accuracy, Format float64 }

// DefaultRewardWeights returns 4:1, so Overall = (4*acc + 1*fmt) / 5.
func DefaultRewardWeights() RewardWeights { return RewardWeights{Accuracy: 4, Format: 1} }

// Validate requires finite, non-negative weights with a positive sum.
func (w RewardWeights) Validate() error {
	for _, f := range []struct {
		name string
		v    float64
	}{{"Accuracy", w.Accuracy}, {"Format", w.Format}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 {
			return fmt.Errorf("vqa: RewardWeights.%s must be finite and >= 0, got %v", f.name, f.v)
		}
	}
	if w.Accuracy+w.Format <= 0 {
		return fmt.Errorf("vqa: RewardWeights must have a positive sum, got %v + %v", w.Accuracy, w.Format)
	}
	return nil
}

// Reward is the score of one response; every field is 0 or in [0, 1].
type Reward struct{ Overall, Accuracy, Format float64 }

// answerRE matches one answer marker and its letter:
//   - keyword "Answer" (any letter case), "答案" or "选项";
//   - optional white space, a colon ":" or full-width "：", optional white space;
//   - an upper-case letter A–J, half-width or full-width (Ａ–Ｊ); lower-case
//     letters are not accepted (they would make "Answer: a circle" an A);
//   - the letter must not be followed by another letter or digit
//     ("Answer: Blue" has no choice).
var answerRE = regexp.MustCompile(`(?i:answer)\s*[:：]\s*([A-JＡ-Ｊ])|(?:答案|选项)\s*[:：]\s*([A-JＡ-Ｊ])`)

// ExtractChoice returns the letter ("A".."J", half-width) of the last answer
// marker in response (see Score for the grammar) and the byte offset where
// that marker starts; ok is false when there is none.
func ExtractChoice(response string) (letter string, at int, ok bool) {
	ms := answerRE.FindAllStringSubmatchIndex(response, -1)
	for i := len(ms) - 1; i >= 0; i-- {
		m := ms[i]
		lo, hi := m[2], m[3]
		if lo < 0 {
			lo, hi = m[4], m[5]
		}
		if hi < len(response) && isWordRune(response[hi:]) {
			continue // "Answer: Blue": not a choice
		}
		return normLetter(response[lo:hi]), m[0], true
	}
	return "", 0, false
}

// isWordRune reports whether s starts with a letter or digit (ASCII or full-width).
func isWordRune(s string) bool {
	for _, r := range s {
		return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
			r >= 'ａ' && r <= 'ｚ' || r >= 'Ａ' && r <= 'Ｚ' || r >= '０' && r <= '９'
	}
	return false
}

// normLetter maps a full-width Ａ–Ｊ to A–J and leaves other strings as they are.
func normLetter(s string) string {
	r := []rune(s)
	if len(r) == 1 && r[0] >= 'Ａ' && r[0] <= 'Ｊ' {
		return string('A' + (r[0] - 'Ａ'))
	}
	return s
}

// FormatOK reports whether response is well formed: after optional leading
// white space it starts with "<think>", contains exactly one "<think>" and
// exactly one "</think>", the thought between them is not blank, and an answer
// marker (see ExtractChoice) follows the "</think>". Text after the answer is
// allowed.
func FormatOK(response string) bool {
	s := strings.TrimLeft(response, " \t\r\n")
	if !strings.HasPrefix(s, "<think>") || strings.Count(s, "<think>") != 1 || strings.Count(s, "</think>") != 1 {
		return false
	}
	end := strings.Index(s, "</think>")
	if strings.TrimSpace(s[len("<think>"):end]) == "" {
		return false
	}
	_, _, ok := ExtractChoice(s[end+len("</think>"):])
	return ok
}

// Score scores a response against the correct letter answer ("A".."J",
// half- or full-width): Accuracy is 1 iff ExtractChoice finds a letter equal
// to answer, Format is 1 iff FormatOK, and Overall = (w.Accuracy*Accuracy +
// w.Format*Format) / (w.Accuracy + w.Format) (0 when the weights do not sum to
// a positive number; see RewardWeights.Validate).
func Score(response, answer string, w RewardWeights) Reward {
	var r Reward
	if Correct(response, answer) {
		r.Accuracy = 1
	}
	if FormatOK(response) {
		r.Format = 1
	}
	if sum := w.Accuracy + w.Format; sum > 0 {
		r.Overall = (w.Accuracy*r.Accuracy + w.Format*r.Format) / sum
	}
	return r
}

// Correct reports whether ExtractChoice finds a letter in response equal to the answer letter
// ("A".."J", half- or full-width): Score's accuracy.
func Correct(response, answer string) bool {
	got, _, ok := ExtractChoice(response)
	return ok && got == normLetter(strings.TrimSpace(answer))
}

// Part returns the reward part named key: "overall", "accuracy" or "format" (online filtering's
// filter_key); NaN for another name.
func (r Reward) Part(key string) float64 {
	switch key {
	case "overall":
		return r.Overall
	case "accuracy":
		return r.Accuracy
	case "format":
		return r.Format
	}
	return math.NaN()
}
