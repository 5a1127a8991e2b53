package hfmodel

import (
	"strings"
	"sync"
	"unicode/utf8"
)

// byteLevel is GPT-2's reversible map from bytes to printable characters, which byte-level BPE
// vocabularies are written in: printable Latin-1 bytes stand for themselves, the other 68 bytes
// for U+0100 onwards in order.
var byteToRune, runeToByte = func() (b2r [256]rune, r2b [324]int16) {
	for i := range r2b {
		r2b[i] = -1
	}
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			b2r[b] = rune(b)
		} else {
			b2r[b] = rune(256 + n)
			n++
		}
		r2b[b2r[b]] = int16(b)
	}
	return
}()

// byteLevelDecode maps a vocabulary token back to the bytes it stands for; ok is false when the
// token holds a character outside the byte alphabet.
func byteLevelDecode(tok string) (raw []byte, ok bool) {
	raw = make([]byte, 0, len(tok))
	for _, r := range tok {
		if r >= rune(len(runeToByte)) || runeToByte[r] < 0 {
			return nil, false
		}
		raw = append(raw, byte(runeToByte[r]))
	}
	return raw, true
}

// bpe is the byte-level BPE model: vocabulary tokens as the raw bytes they stand for, and the
// merges by rank.
type bpe struct {
	vocab  map[string]int32 // raw bytes → id
	byteID [256]int32       // id of each single byte
	// merges maps the pair (left id, right id) to rank<<32 | merged id; a lower rank merges first.
	merges       map[uint64]uint64
	ignoreMerges bool // a word in the vocabulary is one token without merging (Llama 3)

	mu    sync.Mutex
	cache map[string][]int32 // words already encoded, as Hugging Face caches them
}

const bpeCacheCap = 1 << 16 // entries; when full, new words are not cached

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// encodeWord appends the ids of one pre-tokenized piece. Merging applies the lowest-ranked
// merge present anywhere in the word, leftmost first, until none applies: what Hugging Face's
// BPE computes with its priority queue.
func (m *bpe) encodeWord(dst []int32, word string) []int32 {
	if m.ignoreMerges {
		if id, ok := m.vocab[word]; ok {
			return append(dst, id)
		}
	}
	if len(word) == 1 {
		return append(dst, m.byteID[word[0]])
	}
	m.mu.Lock()
	ids, ok := m.cache[word]
	m.mu.Unlock()
	if ok {
		return append(dst, ids...)
	}
	start := len(dst)
	dst = m.merge(dst, word)
	if len(word) < 256 {
		m.mu.Lock()
		if len(m.cache) < bpeCacheCap {
			m.cache[strings.Clone(word)] = append([]int32(nil), dst[start:]...)
		}
		m.mu.Unlock()
	}
	return dst
}

const noMerge = ^uint64(0)

func (m *bpe) merge(dst []int32, word string) []int32 {
	start := len(dst)
	for i := 0; i < len(word); i++ {
		dst = append(dst, m.byteID[word[i]])
	}
	sym := dst[start:]
	// ranks[i] is the merge of (sym[i], sym[i+1]); only the neighbours of a merge change.
	var buf [64]uint64
	ranks := buf[:0]
	if len(sym) > len(buf) {
		ranks = make([]uint64, 0, len(sym))
	}
	for i := 0; i+1 < len(sym); i++ {
		ranks = append(ranks, m.lookup(sym[i], sym[i+1]))
	}
	for len(sym) > 1 {
		best, bi := noMerge, -1
		for i, r := range ranks {
			if r < best { // strict: the leftmost of equal ranks
				best, bi = r, i
			}
		}
		if bi < 0 {
			break
		}
		sym[bi] = int32(uint32(best))
		copy(sym[bi+1:], sym[bi+2:])
		sym = sym[:len(sym)-1]
		copy(ranks[bi:], ranks[bi+1:])
		ranks = ranks[:len(ranks)-1]
		if bi > 0 {
			ranks[bi-1] = m.lookup(sym[bi-1], sym[bi])
		}
		if bi < len(ranks) {
			ranks[bi] = m.lookup(sym[bi], sym[bi+1])
		}
	}
	return dst[:start+len(sym)]
}

func (m *bpe) lookup(a, b int32) uint64 {
	if v, ok := m.merges[pairKey(a, b)]; ok {
		return v
	}
	return noMerge
}

// decodeUTF8Lossy turns bytes into a string as Rust's String::from_utf8_lossy and the WHATWG
// decoder do: each maximal ill-formed subsequence becomes one U+FFFD.
func decodeUTF8Lossy(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if r != utf8.RuneError || size > 1 {
			sb.Write(b[:size])
			b = b[size:]
			continue
		}
		sb.WriteRune(utf8.RuneError)
		b = b[maximalSubpart(b):]
	}
	return sb.String()
}

// maximalSubpart is the length of the longest prefix of b that starts a well-formed sequence
// (at least 1): the bytes one U+FFFD replaces.
func maximalSubpart(b []byte) int {
	c := b[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF) // range of the second byte
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 2
	case c == 0xED:
		need, hi = 2, 0x9F
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1
	}
	n := 1
	for k := 0; k < need && n < len(b); k++ {
		x := b[n]
		if k == 0 && (x < lo || x > hi) || k > 0 && (x < 0x80 || x > 0xBF) {
			break
		}
		n++
	}
	return n
}
