package hfmodel

import (
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
)

// A splitter cuts normalized text into the pieces BPE encodes separately, calling f with each
// piece in order (Hugging Face's Split pre-tokenizer with behavior "Isolated": every match is a
// piece, and so is any text between matches).
type splitter interface {
	split(s string, f func(piece string)) error
}

// The split patterns of Qwen2/Qwen2.5/Qwen3 and Llama 3, which differ only in how many digits
// one piece may hold. They get a hand-written matcher (splitQwen), tested equal to regexp2's.
const (
	qwenPattern   = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// gpt2Pattern is what the ByteLevel pre-tokenizer splits with when its use_regex is true.
	gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
)

// newSplitter picks the fast matcher for the patterns it implements and regexp2 otherwise.
func newSplitter(pattern string) (splitter, error) {
	switch pattern {
	case qwenPattern:
		return splitQwen{maxDigits: 1}, nil
	case llama3Pattern:
		return splitQwen{maxDigits: 3}, nil
	}
	re, err := regexp2.Compile(pattern)
	if err != nil {
		return nil, err
	}
	return splitRegexp{re}, nil
}

// splitRegexp splits with any regular expression tokenizer.json holds. regexp2 is a
// backtracking engine with .NET/Perl syntax, lookahead included, as the Oniguruma engine Hugging
// Face tokenizers uses.
type splitRegexp struct{ re *regexp2.Regexp }

func (r splitRegexp) split(s string, f func(string)) error {
	idx, err := r.re.FindAllStringIndex(s, -1)
	if err != nil {
		return err
	}
	prev := 0
	for _, m := range idx {
		if m[0] > prev {
			f(s[prev:m[0]])
		}
		if m[1] > m[0] {
			f(s[m[0]:m[1]])
		}
		prev = m[1]
	}
	if prev < len(s) {
		f(s[prev:])
	}
	return nil
}

// splitQwen matches qwenPattern (maxDigits 1) or llama3Pattern (maxDigits 3) by hand. At each
// position the alternatives are tried in the pattern's order, as a backtracking engine does:
//
//  1. an apostrophe and s, t, re, ve, m, ll or d, case-insensitively
//  2. one optional character that is not \r, \n, a letter or a number, then letters
//  3. one to maxDigits numbers
//  4. an optional space, characters that are not space, letter or number, then any \r\n
//  5. whitespace up to and including its last \r or \n
//  6. whitespace not followed by a non-space (a run before a word leaves its last space)
//  7. whitespace
type splitQwen struct{ maxDigits int }

func (q splitQwen) split(s string, f func(string)) error {
	for i := 0; i < len(s); {
		n := q.match(s, i)
		f(s[i : i+n])
		i += n
	}
	return nil
}

// match returns the byte length of the match at i (always > 0: the last alternatives accept
// any whitespace, and 2–4 any other character).
func (q splitQwen) match(s string, i int) int {
	c, size := decodeRune(s, i)
	// 1. contractions
	if c == '\'' && i+1 < len(s) {
		if n := contraction(s[i+1:]); n > 0 {
			return 1 + n
		}
	}
	// 2. [^\r\n\p{L}\p{N}]?\p{L}+
	if isLetter(c) {
		return size + letters(s, i+size)
	}
	if c != '\r' && c != '\n' && !isNumber(c) && i+size < len(s) {
		if c2, _ := decodeRune(s, i+size); isLetter(c2) {
			return size + letters(s, i+size)
		}
	}
	// 3. \p{N}{1,maxDigits}
	if isNumber(c) {
		n := size
		for d := 1; d < q.maxDigits && i+n < len(s); d++ {
			c2, sz := decodeRune(s, i+n)
			if !isNumber(c2) {
				break
			}
			n += sz
		}
		return n
	}
	// 4. " ?[^\s\p{L}\p{N}]+[\r\n]*"
	start := i
	if c == ' ' && i+1 < len(s) {
		if c2, _ := decodeRune(s, i+1); isOther(c2) {
			start = i + 1
		}
	}
	if c2, _ := decodeRune(s, start); start < len(s) && isOther(c2) {
		j := start
		for j < len(s) {
			c3, sz := decodeRune(s, j)
			if !isOther(c3) {
				break
			}
			j += sz
		}
		for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j - i
	}
	// c is whitespace from here on: 2–4 accept every other character.
	end, lastNL := i, -1
	for end < len(s) {
		c3, sz := decodeRune(s, end)
		if !isSpace(c3) {
			break
		}
		if c3 == '\r' || c3 == '\n' {
			lastNL = end
		}
		end += sz
	}
	// 5. \s*[\r\n]+: the greedy \s* gives back up to the last newline of the run.
	if lastNL >= 0 {
		return lastNL + 1 - i
	}
	// 6. \s+(?!\S): the whole run at the end of the text, else all but its last character.
	if end == len(s) {
		return end - i
	}
	_, lastSize := utf8.DecodeLastRuneInString(s[:end])
	if end-lastSize > i {
		return end - lastSize - i
	}
	// 7. \s+ (a single whitespace character before a non-space)
	return end - i
}

// contraction matches s, t, re, ve, m, ll or d case-insensitively at the start of s (after an
// apostrophe). Unicode case folding also maps U+017F LATIN SMALL LETTER LONG S to s.
func contraction(s string) int {
	lower := func(i int) rune {
		if i >= len(s) {
			return 0
		}
		c, _ := decodeRune(s, i)
		if c == 'ſ' {
			return 's'
		}
		if c < utf8.RuneSelf {
			return unicode.ToLower(c)
		}
		return 0
	}
	switch lower(0) {
	case 's':
		if s[0] == 's' || s[0] == 'S' {
			return 1
		}
		return len("ſ")
	case 't', 'm', 'd':
		return 1
	case 'r', 'v':
		if lower(1) == 'e' {
			return 2
		}
	case 'l':
		if lower(1) == 'l' {
			return 2
		}
	}
	return 0
}

func letters(s string, i int) int {
	n := 0
	for i+n < len(s) {
		c, sz := decodeRune(s, i+n)
		if !isLetter(c) {
			break
		}
		n += sz
	}
	return n
}

// decodeRune is utf8.DecodeRuneInString at i with an ASCII fast path.
func decodeRune(s string, i int) (rune, int) {
	if i >= len(s) {
		return utf8.RuneError, 0
	}
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// Character classes of the patterns: \p{L}, \p{N}, \s (Unicode White_Space), and the rest.
var asciiClass = func() (t [128]uint8) {
	for c := 0; c < 128; c++ {
		r := rune(c)
		switch {
		case unicode.IsLetter(r):
			t[c] = classLetter
		case unicode.IsNumber(r):
			t[c] = classNumber
		case unicode.IsSpace(r):
			t[c] = classSpace
		default:
			t[c] = classOther
		}
	}
	return
}()

const (
	classLetter = iota + 1
	classNumber
	classSpace
	classOther
)

func class(c rune) uint8 {
	if c < 128 {
		return asciiClass[c]
	}
	switch {
	case unicode.IsLetter(c):
		return classLetter
	case unicode.IsNumber(c):
		return classNumber
	case unicode.IsSpace(c):
		return classSpace
	}
	return classOther
}

func isLetter(c rune) bool { return class(c) == classLetter }
func isNumber(c rune) bool { return class(c) == classNumber }
func isSpace(c rune) bool  { return class(c) == classSpace }
func isOther(c rune) bool  { return class(c) == classOther }
