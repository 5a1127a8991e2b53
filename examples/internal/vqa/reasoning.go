package vqa

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/mtrl-go/mtrl/internal/enum"
)

// ChainStyle selects the reference chain of a generated sample: the short chain that states the
// visual fact, or a reasoning chain that wraps the same fact in image-independent text.
type ChainStyle int

const (
	// ShortChain is "<think> the circle is blue </think> Answer: C": about nine tokens, most of
	// them the visual fact.
	ShortChain ChainStyle = iota
	// ReasoningChain is a 30–46 token chain of image-independent text around the same visual
	// fact: an opening remark, the question restated, the fact, a conclusion restating the
	// value and naming its letter, each phrased one of several ways drawn per sample:
	//
	//	<think> i see shapes in the image . so what colour is the circle ?
	//	i see it in the image . the circle is blue . so the answer is blue , it is C . </think> Answer: C
	//
	// Only the fact's value, its restatement and the final letter depend on the image
	// (VisualLabels); the phrasing is random, so a policy that learned the references samples
	// it with high entropy and no bearing on the reward: token credit spread over the whole
	// response is mostly noise.
	ReasoningChain
)

var chainStyles = enum.Table[ChainStyle]{Type: "vqa.ChainStyle", Noun: "chain style",
	Names: []string{ShortChain: "short", ReasoningChain: "reasoning"},
	Errorf: func(_ error, _, _, format string, args ...any) error {
		return fmt.Errorf("vqa: "+format, args...)
	}}

// String returns "short" or "reasoning".
func (c ChainStyle) String() string { return chainStyles.String(c) }

// ParseChainStyle parses "short" or "reasoning"; the empty string means ShortChain.
func ParseChainStyle(s string) (ChainStyle, error) {
	if s == "" {
		return ShortChain, nil
	}
	if c, ok := chainStyles.Lookup(s); ok {
		return c, nil
	}
	return 0, fmt.Errorf("vqa: unknown chain style %q (want short or reasoning)", s)
}

// The phrasings of a reasoning chain: words of the task's vocabulary (no new token ids) that are
// neither visual values nor letters, so none of them is a visual token.
var (
	chainOpeners = []string{
		"i see the image .",
		"i see shapes in the image .",
		"there are shapes in the image .",
		"in the image there are shapes .",
		"so i see an image of shapes .",
		"i see an image .",
	}
	chainRestates = []string{"", "so", "and", "i see"}
	chainLooks    = []string{
		"i see the image .",
		"so i see it in the image .",
		"i see it in the image .",
		"it is in the image .",
		"",
	}
	chainConclusions = []string{"so the answer is", "and so it is", "so it is", "the answer is"}
)

// reasoningResponse is the reasoning chain of a sample whose short chain states think (its
// visual fact) and whose question, correct value and letter are given. Its draws come from r
// after every draw of the short sample, so both styles share scene, question and options.
func reasoningResponse(r *rand.Rand, question, think, value, letter string) string {
	pick := func(list []string) string { return list[r.IntN(len(list))] }
	parts := []string{"<think>", pick(chainOpeners), pick(chainRestates), question, pick(chainLooks),
		think, ".", pick(chainConclusions), value, ",", "it", "is", letter, ".", "</think>", "Answer:", letter}
	return strings.Join(strings.Fields(strings.Join(parts, " ")), " ")
}

// MarshalText implements encoding.TextMarshaler with the name String returns.
func (c ChainStyle) MarshalText() ([]byte, error) { return chainStyles.MarshalText(c) }

// UnmarshalText implements encoding.TextUnmarshaler with ParseChainStyle, so configuration
// files hold the name.
func (c *ChainStyle) UnmarshalText(b []byte) error {
	return enum.UnmarshalText(c, b, ParseChainStyle)
}
