package vqa

import (
	"slices"
	"strings"
	"testing"
)

func TestOrderedOptions(t *testing.T) {
	cfg := TaskConfig{ImageSize: 32, MaxShapes: 3, Options: 4, OrderedOptions: true}
	for _, s := range Generate(cfg, 7, 0, 200) {
		opts, ok := Options(s.Prompt)
		if !ok || len(opts) != 4 {
			t.Fatalf("%q: options %v", s.Prompt, opts)
		}
		var idx []int
		for _, o := range opts {
			i := slices.Index(colours, o[1])
			for _, l := range [][]string{shapes, numbers, positions} {
				if i < 0 {
					i = slices.Index(l, o[1])
				}
			}
			if i < 0 {
				t.Fatalf("%q: unknown value %q", s.Prompt, o[1])
			}
			idx = append(idx, i)
		}
		if !slices.IsSorted(idx) {
			t.Fatalf("%q: options not in the value list's order", s.Prompt)
		}
	}
	// The unordered task is unchanged by the new field's zero value.
	a := Generate(TaskConfig{ImageSize: 32, MaxShapes: 3, Options: 4}, 7, 0, 50)
	b := Generate(cfg, 7, 0, 50)
	for i := range a {
		if a[i].Response != b[i].Response && !strings.HasPrefix(a[i].Response, "<think> ") {
			t.Fatal("bad response")
		}
		if len(a[i].Objects) != len(b[i].Objects) || a[i].Objects[0] != b[i].Objects[0] {
			t.Fatalf("sample %d: scene changed with OrderedOptions", i)
		}
	}
}

func TestBlindResponse(t *testing.T) {
	for _, s := range Generate(TaskConfig{ImageSize: 32, MaxShapes: 3, Options: 4}, 3, 0, 300) {
		opts, _ := Options(s.Prompt)
		for _, o := range opts {
			got, ok := BlindResponse(s, o[0])
			if !ok {
				t.Fatalf("%q / %q: not rewritten", s.Prompt, s.Response)
			}
			if !FormatOK(got) || Score(got, o[0], DefaultRewardWeights()).Accuracy != 1 {
				t.Fatalf("%q: %q is not a well-formed answer %s", s.Prompt, got, o[0])
			}
			if o[0] == s.Answer && got != s.Response {
				t.Fatalf("the correct letter must give the reference: %q vs %q", got, s.Response)
			}
			think := got[:strings.Index(got, " </think>")]
			if !strings.Contains(think, o[1]) {
				t.Fatalf("%q: the think %q does not state %q", s.Prompt, think, o[1])
			}
		}
	}
	s := Generate(TaskConfig{ImageSize: 32, MaxShapes: 3, Options: 4}, 3, 0, 1)[0]
	s.Prompt = "no options here"
	if _, ok := BlindResponse(s, "A"); ok {
		t.Fatal("a prompt without options was rewritten")
	}
}
