package vqa

import (
	"strings"
	"testing"
)

func TestReasoningChain(t *testing.T) {
	short := DefaultTaskConfig()
	long := short
	long.Chain = ReasoningChain
	tok := NewTokenizer()
	a, b := Generate(short, 7, 0, 400), Generate(long, 7, 0, 400)
	phrasings := map[string]bool{}
	var visual, total int
	for i := range a {
		s, r := a[i], b[i]
		// The same scene, question and answer: only the chain differs.
		if s.Prompt != r.Prompt || s.Answer != r.Answer || len(s.Objects) != len(r.Objects) {
			t.Fatalf("sample %d: styles differ beyond the chain:\n%+v\n%+v", i, s, r)
		}
		if !FormatOK(r.Response) || Score(r.Response, r.Answer, DefaultRewardWeights()).Accuracy != 1 {
			t.Fatalf("sample %d: reference not well formed or wrong: %q", i, r.Response)
		}
		if u := tok.Unknown(r.Response); len(u) > 0 {
			t.Fatalf("sample %d: words outside the vocabulary %q in %q", i, u, r.Response)
		}
		// The short chain's fact is inside the reasoning chain.
		fact := strings.TrimSuffix(strings.TrimPrefix(s.Response, "<think> "), " </think> Answer: "+s.Answer)
		if !strings.Contains(r.Response, " "+fact+" . ") {
			t.Fatalf("sample %d: fact %q missing from %q", i, fact, r.Response)
		}
		ids, lab := ReferenceLabels(r, tok)
		if n := len(ids); n < 28 || n > 48 {
			t.Fatalf("sample %d: %d tokens, want 28..48: %q", i, n, r.Response)
		}
		if !lab[len(lab)-1] {
			t.Fatalf("sample %d: the answer letter is not labelled visual", i)
		}
		for j, v := range lab {
			if v {
				visual++
			}
			total++
			_ = j
		}
		phrasings[strings.SplitN(r.Response, " . ", 2)[0]] = true
	}
	// Mostly image-independent text, and the phrasing varies.
	if f := float64(visual) / float64(total); f < 0.05 || f > 0.25 {
		t.Fatalf("visual-token fraction %.3f, want a small minority (0.05..0.25)", f)
	}
	if len(phrasings) < len(chainOpeners) {
		t.Fatalf("%d openings seen, want all %d", len(phrasings), len(chainOpeners))
	}
	// The short task is unchanged by the new field's zero value.
	if ShortChain != (TaskConfig{}).Chain {
		t.Fatal("the zero Chain must be ShortChain")
	}
}

func TestParseChainStyle(t *testing.T) {
	for _, c := range []ChainStyle{ShortChain, ReasoningChain} {
		got, err := ParseChainStyle(c.String())
		if err != nil || got != c {
			t.Fatalf("%v: %v %v", c, got, err)
		}
	}
	if c, err := ParseChainStyle(""); err != nil || c != ShortChain {
		t.Fatal("empty must be ShortChain")
	}
	if _, err := ParseChainStyle("long"); err == nil {
		t.Fatal("unknown style accepted")
	}
	cfg := DefaultTaskConfig()
	cfg.Chain = 5
	if cfg.Validate() == nil {
		t.Fatal("unknown Chain passed Validate")
	}
}
