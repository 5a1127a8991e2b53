package vqa

import "strings"

// Special token ids. Encode never emits PAD, BOS or EOS; callers add BOS in
// front of a prompt and EOS after a response themselves.
const (
	PAD int32 = 0
	BOS int32 = 1
	EOS int32 = 2
	UNK int32 = 3
)

// Word lists of the task. Their order is part of the vocabulary (token ids) and
// of the generator (random draws index them), so it must not change.
var (
	letters   = []string{"A", "B", "C", "D", "E", "F", "G", "H", "I", "J"}
	numbers   = []string{"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"}
	colours   = []string{"red", "green", "blue", "yellow", "purple", "orange", "white", "cyan", "pink", "brown"}
	shapes    = []string{"circle", "square", "triangle", "cross", "diamond"}
	positions = []string{"top left", "top right", "bottom left", "bottom right"}
	sides     = []string{"top", "bottom", "left", "right"}
	// Function words of prompts and reasoning chains.
	plain = []string{
		"<think>", "</think>", "Answer:", "?", ",", ".",
		"what", "which", "where", "how", "many", "colour", "shape", "shapes",
		"is", "are", "there", "the", "a", "an", "at", "of", "and", "so",
		"i", "see", "in", "image", "one", "it", "answer",
	}
)

// vocabulary returns the fixed word list: the four specials, then letters,
// numbers, colours, shapes, side words and function words (duplicates dropped).
func vocabulary() []string {
	words := []string{"<pad>", "<bos>", "<eos>", "<unk>"}
	seen := map[string]bool{}
	for _, w := range words {
		seen[w] = true
	}
	for _, list := range [][]string{letters, numbers, colours, shapes, sides, plain} {
		for _, w := range list {
			if !seen[w] {
				seen[w] = true
				words = append(words, w)
			}
		}
	}
	return words
}

// Tokenizer is a fixed word-level vocabulary (deterministic, no training).
// Text is split on white space; a word outside the vocabulary maps to UNK.
// Words are case-sensitive ("Answer:" and "answer" are different tokens).
// A Tokenizer is immutable and safe for concurrent use.
type Tokenizer struct {
	words []string
	ids   map[string]int32
}

// NewTokenizer returns the task's tokenizer. Every call returns an identical
// vocabulary.
func NewTokenizer() *Tokenizer {
	words := vocabulary()
	ids := make(map[string]int32, len(words))
	for i, w := range words {
		ids[w] = int32(i)
	}
	return &Tokenizer{words: words, ids: ids}
}

// VocabSize is the number of token ids, specials included; ids are 0..VocabSize()-1.
func (t *Tokenizer) VocabSize() int { return len(t.words) }

// Words returns a copy of the vocabulary in id order.
func (t *Tokenizer) Words() []string { return append([]string(nil), t.words...) }

// ID returns the id of word and whether it is in the vocabulary.
func (t *Tokenizer) ID(word string) (int32, bool) {
	id, ok := t.ids[word]
	return id, ok
}

// Word returns the word of id ("<unk>" for an id outside the vocabulary).
func (t *Tokenizer) Word(id int32) string {
	if id < 0 || int(id) >= len(t.words) {
		return t.words[UNK]
	}
	return t.words[id]
}

// Encode splits text on white space and maps each word to its id (UNK when
// unknown). It adds no BOS/EOS. The special words "<pad>", "<bos>", "<eos>"
// in text are encoded as UNK so that text can never inject control tokens.
func (t *Tokenizer) Encode(text string) []int32 {
	fields := strings.Fields(text)
	ids := make([]int32, len(fields))
	for i, w := range fields {
		id, ok := t.ids[w]
		if !ok || id < 3 {
			id = UNK
		}
		ids[i] = id
	}
	return ids
}

// Decode joins the words of ids with single spaces. PAD, BOS and EOS are
// skipped; ids outside the vocabulary decode as "<unk>". For text made of
// vocabulary words separated by single spaces, Decode(Encode(text)) == text.
func (t *Tokenizer) Decode(ids []int32) string {
	var b strings.Builder
	for _, id := range ids {
		if id == PAD || id == BOS || id == EOS {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(t.Word(id))
	}
	return b.String()
}

// NewTokenizerFrom returns the task's vocabulary extended by every other word of texts, in order
// of first appearance (deterministic for the same texts): a tokenizer built from the training
// data, so that no word the data contains becomes <unk>.
func NewTokenizerFrom(texts []string) *Tokenizer {
	t := NewTokenizer()
	for _, text := range texts {
		for _, w := range strings.Fields(text) {
			if _, ok := t.ids[w]; !ok {
				t.ids[w] = int32(len(t.words))
				t.words = append(t.words, w)
			}
		}
	}
	return t
}

// Unknown returns the words of text outside the vocabulary, in order (repeats included).
func (t *Tokenizer) Unknown(text string) []string {
	var out []string
	for _, w := range strings.Fields(text) {
		if id, ok := t.ids[w]; !ok || id < 3 {
			out = append(out, w)
		}
	}
	return out
}
