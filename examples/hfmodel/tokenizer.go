package hfmodel

import (
	"encoding/json"
	"sort"
	"strings"

	"golang.org/x/text/unicode/norm"

	"github.com/mtrl-go/mtrl/tensor"
)

// Tokenizer is a tokenizer.json pipeline of Hugging Face tokenizers for byte-level BPE models
// (GPT-2, Qwen2/2.5/3, Llama 3): added tokens are cut out of the text first, the rest is NFC
// normalized, split by the pre-tokenizer's pattern, and each piece is BPE-encoded from its UTF-8
// bytes. A component or option outside that family is an error when the file is parsed. A
// Tokenizer is safe for concurrent use.
type Tokenizer struct {
	nfc      bool
	split    splitter // nil: the whole text is one piece
	model    *bpe
	added    []AddedToken // sorted by content, longest first among equal prefixes
	addedBy  map[int]*AddedToken
	firstB   [256]bool // first bytes of added tokens
	tokens   []string  // id → token as tokenizer.json writes it (byte-level characters)
	prefix   []int     // post-processor's tokens before the text (TemplateProcessing)
	suffix   []int
	maxAdded int
}

// AddedToken is an entry of tokenizer.json's added_tokens: matched whole in the input before
// anything else; Special tokens are dropped by Decode when asked.
type AddedToken struct {
	ID      int    `json:"id"`
	Content string `json:"content"`
	Special bool   `json:"special"`
	// Only false is supported for these (the Qwen and Llama 3 files).
	SingleWord bool `json:"single_word"`
	LStrip     bool `json:"lstrip"`
	RStrip     bool `json:"rstrip"`
	Normalized bool `json:"normalized"`
}

type typed struct {
	Type string `json:"type"`
}

// LoadTokenizer reads dir/tokenizer.json (or tokenizer.json.gz).
func LoadTokenizer(dir string) (*Tokenizer, error) {
	data, err := readMaybeGzipped(dir, TokenizerFile)
	if err != nil {
		return nil, tensor.Errorf(tensor.ErrParam, "hfmodel.LoadTokenizer", TokenizerFile, "%v", err)
	}
	return ParseTokenizer(data)
}

// ParseTokenizer parses the contents of a tokenizer.json.
func ParseTokenizer(data []byte) (*Tokenizer, error) {
	const op = "hfmodel.ParseTokenizer"
	bad := func(field, format string, args ...any) error {
		return tensor.Errorf(tensor.ErrParam, op, field, format, args...)
	}
	var f struct {
		Truncation    json.RawMessage `json:"truncation"`
		Padding       json.RawMessage `json:"padding"`
		AddedTokens   []AddedToken    `json:"added_tokens"`
		Normalizer    json.RawMessage `json:"normalizer"`
		PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
		PostProcessor json.RawMessage `json:"post_processor"`
		Decoder       json.RawMessage `json:"decoder"`
		Model         struct {
			Type                    string          `json:"type"`
			Dropout                 *float64        `json:"dropout"`
			UnkToken                *string         `json:"unk_token"`
			ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
			EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
			FuseUnk                 bool            `json:"fuse_unk"`
			ByteFallback            bool            `json:"byte_fallback"`
			IgnoreMerges            bool            `json:"ignore_merges"`
			Vocab                   map[string]int  `json:"vocab"`
			Merges                  json.RawMessage `json:"merges"`
		} `json:"model"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, bad("tokenizer.json", "%v", err)
	}
	if !isNull(f.Truncation) || !isNull(f.Padding) {
		return nil, bad("truncation/padding", "must be null: the tokenizer returns every token")
	}
	t := &Tokenizer{addedBy: map[int]*AddedToken{}}

	// normalizer: null, NFC, or a Sequence of NFC
	if !isNull(f.Normalizer) {
		var n struct {
			typed
			Normalizers []json.RawMessage `json:"normalizers"`
		}
		json.Unmarshal(f.Normalizer, &n)
		list := []json.RawMessage{f.Normalizer}
		if n.Type == "Sequence" {
			list = n.Normalizers
		}
		for _, raw := range list {
			var x typed
			json.Unmarshal(raw, &x)
			if x.Type != "NFC" {
				return nil, bad("normalizer", "type %q is not supported (NFC only)", x.Type)
			}
			t.nfc = true
		}
	}

	// pre_tokenizer: [Split (Isolated)] then ByteLevel, or ByteLevel alone
	var pts []json.RawMessage
	var pt struct {
		typed
		Pretokenizers []json.RawMessage `json:"pretokenizers"`
	}
	json.Unmarshal(f.PreTokenizer, &pt)
	switch pt.Type {
	case "Sequence":
		pts = pt.Pretokenizers
	case "":
		return nil, bad("pre_tokenizer", "missing: a byte-level BPE needs the ByteLevel pre-tokenizer")
	default:
		pts = []json.RawMessage{f.PreTokenizer}
	}
	sawByteLevel := false
	for i, raw := range pts {
		var p struct {
			typed
			Pattern struct {
				Regex  *string `json:"Regex"`
				String *string `json:"String"`
			} `json:"pattern"`
			Behavior       string `json:"behavior"`
			Invert         bool   `json:"invert"`
			AddPrefixSpace bool   `json:"add_prefix_space"`
			UseRegex       bool   `json:"use_regex"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, bad("pre_tokenizer", "%v", err)
		}
		switch {
		case p.Type == "Split" && i == 0 && len(pts) == 2:
			if p.Behavior != "Isolated" || p.Invert {
				return nil, bad("pre_tokenizer", "Split with behavior %q, invert %v is not supported (Isolated, false)", p.Behavior, p.Invert)
			}
			pattern := ""
			switch {
			case p.Pattern.Regex != nil:
				pattern = *p.Pattern.Regex
			case p.Pattern.String != nil:
				pattern = regexpQuote(*p.Pattern.String)
			default:
				return nil, bad("pre_tokenizer", "Split needs a Regex or String pattern")
			}
			sp, err := newSplitter(pattern)
			if err != nil {
				return nil, bad("pre_tokenizer", "pattern %q: %v", pattern, err)
			}
			t.split = sp
		case p.Type == "ByteLevel" && i == len(pts)-1:
			if p.AddPrefixSpace {
				return nil, bad("pre_tokenizer", "ByteLevel add_prefix_space true is not supported")
			}
			if p.UseRegex {
				if t.split != nil {
					return nil, bad("pre_tokenizer", "Split followed by ByteLevel with use_regex true is not supported")
				}
				t.split, _ = newSplitter(gpt2Pattern)
			}
			sawByteLevel = true
		default:
			return nil, bad("pre_tokenizer", "%q at position %d is not supported (an optional Split, then ByteLevel)", p.Type, i)
		}
	}
	if !sawByteLevel {
		return nil, bad("pre_tokenizer", "needs ByteLevel last")
	}

	// decoder: ByteLevel
	var dec typed
	json.Unmarshal(f.Decoder, &dec)
	if dec.Type != "ByteLevel" {
		return nil, bad("decoder", "type %q is not supported (ByteLevel)", dec.Type)
	}

	// model: BPE without dropout, unknown token, affixes or byte fallback
	m := f.Model
	switch {
	case m.Type != "BPE":
		return nil, bad("model", "type %q is not supported (BPE)", m.Type)
	case m.Dropout != nil && *m.Dropout != 0:
		return nil, bad("model.dropout", "BPE dropout is not supported")
	case m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "",
		m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "":
		return nil, bad("model", "continuing_subword_prefix/end_of_word_suffix are not supported")
	case m.ByteFallback || m.FuseUnk:
		return nil, bad("model", "byte_fallback/fuse_unk are not supported")
	}
	b := &bpe{vocab: make(map[string]int32, len(m.Vocab)), merges: make(map[uint64]uint64, 1<<18), ignoreMerges: m.IgnoreMerges, cache: map[string][]int32{}}
	maxID := -1
	for _, id := range m.Vocab {
		maxID = max(maxID, id)
	}
	for _, a := range f.AddedTokens {
		maxID = max(maxID, a.ID)
	}
	t.tokens = make([]string, maxID+1)
	for tok, id := range m.Vocab {
		if id < 0 {
			return nil, bad("model.vocab", "token %q has id %d", tok, id)
		}
		t.tokens[id] = tok
		if raw, ok := byteLevelDecode(tok); ok {
			b.vocab[string(raw)] = int32(id)
		}
	}
	for c := 0; c < 256; c++ {
		id, ok := b.vocab[string([]byte{byte(c)})]
		if !ok {
			return nil, bad("model.vocab", "has no token for byte %#02x: not a byte-level vocabulary", c)
		}
		b.byteID[c] = id
	}
	merges, err := parseMerges(m.Merges)
	if err != nil {
		return nil, bad("model.merges", "%v", err)
	}
	for rank, mg := range merges {
		a, okA := m.Vocab[mg[0]]
		c, okC := m.Vocab[mg[1]]
		merged, okM := m.Vocab[mg[0]+mg[1]]
		if !okA || !okC || !okM {
			return nil, bad("model.merges", "merge %d (%q %q) uses a token not in the vocabulary", rank, mg[0], mg[1])
		}
		key := pairKey(int32(a), int32(c))
		if _, dup := b.merges[key]; !dup { // the first (lowest) rank wins, as in HF
			b.merges[key] = uint64(rank)<<32 | uint64(uint32(merged))
		}
	}
	t.model = b

	// added tokens
	for i := range f.AddedTokens {
		a := &f.AddedTokens[i]
		if a.SingleWord || a.LStrip || a.RStrip || a.Normalized {
			return nil, bad("added_tokens", "%q: single_word, lstrip, rstrip and normalized must be false", a.Content)
		}
		if a.Content == "" {
			return nil, bad("added_tokens", "token %d has empty content", a.ID)
		}
		if a.ID < 0 {
			return nil, bad("added_tokens", "%q has id %d", a.Content, a.ID)
		}
		t.tokens[a.ID] = a.Content
		t.addedBy[a.ID] = a
		t.added = append(t.added, *a)
		t.firstB[a.Content[0]] = true
		t.maxAdded = max(t.maxAdded, len(a.Content))
	}
	sort.Slice(t.added, func(i, j int) bool { return t.added[i].Content < t.added[j].Content })

	// post_processor: null, ByteLevel (no change to ids) or TemplateProcessing for one sequence
	if !isNull(f.PostProcessor) {
		if err := t.parsePostProcessor(f.PostProcessor); err != nil {
			return nil, err
		}
	}
	for id, tok := range t.tokens {
		if tok == "" {
			return nil, bad("model.vocab", "id %d has no token (ids must be dense)", id)
		}
	}
	return t, nil
}

func (t *Tokenizer) parsePostProcessor(raw json.RawMessage) error {
	const op = "hfmodel.ParseTokenizer"
	var p struct {
		typed
		Single []struct {
			SpecialToken *struct {
				ID string `json:"id"`
			} `json:"SpecialToken"`
			Sequence *struct {
				ID string `json:"id"`
			} `json:"Sequence"`
		} `json:"single"`
		SpecialTokens map[string]struct {
			IDs []int `json:"ids"`
		} `json:"special_tokens"`
		Processors []json.RawMessage `json:"processors"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return tensor.Errorf(tensor.ErrParam, op, "post_processor", "%v", err)
	}
	switch p.Type {
	case "ByteLevel":
		return nil
	case "Sequence": // Llama 3: ByteLevel then TemplateProcessing
		for _, q := range p.Processors {
			if err := t.parsePostProcessor(q); err != nil {
				return err
			}
		}
		return nil
	case "TemplateProcessing":
		seen := false
		for _, item := range p.Single {
			switch {
			case item.Sequence != nil && item.Sequence.ID == "A" && !seen:
				seen = true
			case item.SpecialToken != nil:
				st, ok := p.SpecialTokens[item.SpecialToken.ID]
				if !ok {
					return tensor.Errorf(tensor.ErrParam, op, "post_processor", "special token %q not in special_tokens", item.SpecialToken.ID)
				}
				if seen {
					t.suffix = append(t.suffix, st.IDs...)
				} else {
					t.prefix = append(t.prefix, st.IDs...)
				}
			default:
				return tensor.Errorf(tensor.ErrParam, op, "post_processor", "TemplateProcessing single must hold sequence A once and special tokens")
			}
		}
		if !seen {
			return tensor.Errorf(tensor.ErrParam, op, "post_processor", "TemplateProcessing single lacks sequence A")
		}
		return nil
	}
	return tensor.Errorf(tensor.ErrParam, op, "post_processor", "type %q is not supported (ByteLevel, TemplateProcessing)", p.Type)
}

// parseMerges reads merges written as "a b" strings (tokenizers < 0.20) or as [a, b] pairs.
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	var strs []string
	if err := json.Unmarshal(raw, &strs); err == nil {
		out := make([][2]string, len(strs))
		for i, s := range strs {
			a, b, ok := strings.Cut(s, " ")
			if !ok || strings.Contains(b, " ") {
				return nil, errorString("merge " + s + " is not two tokens separated by one space")
			}
			out[i] = [2]string{a, b}
		}
		return out, nil
	}
	var pairs [][2]string
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return nil, errorString("merges must be a list of \"a b\" strings or of [a, b] pairs")
	}
	return pairs, nil
}

type errorString string

func (e errorString) Error() string { return string(e) }

func isNull(raw json.RawMessage) bool { return len(raw) == 0 || string(raw) == "null" }

func regexpQuote(s string) string {
	var sb strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`\.+*?()|[]{}^$#&-~ `, r) {
			sb.WriteByte('\\')
		}
		sb.WriteRune(r)
	}
	return sb.String()
}

// VocabSize is the number of ids, added tokens included.
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// TokenToID returns the id of a token as tokenizer.json writes it (an added token's content,
// or a vocabulary entry in byte-level characters).
func (t *Tokenizer) TokenToID(tok string) (int, bool) {
	if a := t.matchAdded(tok, 0); a != nil && len(a.Content) == len(tok) {
		return a.ID, true
	}
	raw, ok := byteLevelDecode(tok)
	if !ok {
		return 0, false
	}
	id, ok := t.model.vocab[string(raw)]
	return int(id), ok
}

// Encode returns the ids of text as Hugging Face's tokenizer.encode(text) does (special tokens
// added by the post-processor included; for Qwen there are none).
func (t *Tokenizer) Encode(text string) []int {
	ids := make([]int32, 0, len(text)/3+len(t.prefix)+len(t.suffix))
	for _, id := range t.prefix {
		ids = append(ids, int32(id))
	}
	ids = t.encodeText(ids, text)
	for _, id := range t.suffix {
		ids = append(ids, int32(id))
	}
	out := make([]int, len(ids))
	for i, id := range ids {
		out[i] = int(id)
	}
	return out
}

// encodeText appends the ids of text without the post-processor's tokens.
func (t *Tokenizer) encodeText(dst []int32, text string) []int32 {
	start := 0
	for i := 0; i < len(text); i++ {
		if !t.firstB[text[i]] {
			continue
		}
		if a := t.matchAdded(text, i); a != nil {
			dst = t.encodePlain(dst, text[start:i])
			dst = append(dst, int32(a.ID))
			i += len(a.Content) - 1
			start = i + 1
		}
	}
	return t.encodePlain(dst, text[start:])
}

// matchAdded returns the longest added token at text[i:], or nil (leftmost-longest, as the
// Aho-Corasick automaton of Hugging Face's AddedVocabulary).
func (t *Tokenizer) matchAdded(text string, i int) *AddedToken {
	rest := text[i:]
	if len(rest) > t.maxAdded {
		rest = rest[:t.maxAdded]
	}
	// candidates are prefixes of rest; they sort before it, at or after the first token >= rest[:1]
	var best *AddedToken
	lo := sort.Search(len(t.added), func(k int) bool { return t.added[k].Content >= rest[:1] })
	for k := lo; k < len(t.added) && t.added[k].Content[0] == rest[0]; k++ {
		c := t.added[k].Content
		if strings.HasPrefix(rest, c) && (best == nil || len(c) > len(best.Content)) {
			best = &t.added[k]
		}
	}
	return best
}

func (t *Tokenizer) encodePlain(dst []int32, s string) []int32 {
	if s == "" {
		return dst
	}
	if t.nfc {
		s = norm.NFC.String(s)
	}
	if t.split == nil {
		return t.model.encodeWord(dst, s)
	}
	t.split.split(s, func(piece string) { dst = t.model.encodeWord(dst, piece) })
	return dst
}

// Decode returns the text of ids as Hugging Face's tokenizer.decode(ids, skip_special_tokens)
// does: the tokens' bytes concatenated, invalid UTF-8 replaced by U+FFFD. An id outside the
// vocabulary is an error.
func (t *Tokenizer) Decode(ids []int, skipSpecial bool) (string, error) {
	var raw []byte
	for _, id := range ids {
		if id < 0 || id >= len(t.tokens) {
			return "", tensor.Errorf(tensor.ErrParam, "hfmodel.Tokenizer.Decode", "ids", "id %d is outside the vocabulary [0, %d)", id, len(t.tokens))
		}
		if a := t.addedBy[id]; a != nil && a.Special && skipSpecial {
			continue
		}
		tok := t.tokens[id]
		if b, ok := byteLevelDecode(tok); ok {
			raw = append(raw, b...)
		} else {
			raw = append(raw, tok...) // a token outside the byte alphabet stands for itself
		}
	}
	return decodeUTF8Lossy(raw), nil
}

// IDToToken returns the token of id as tokenizer.json writes it.
func (t *Tokenizer) IDToToken(id int) (string, bool) {
	if id < 0 || id >= len(t.tokens) {
		return "", false
	}
	return t.tokens[id], true
}

// Added returns the added tokens (special or not), ordered by id.
func (t *Tokenizer) Added() []AddedToken {
	out := append([]AddedToken(nil), t.added...)
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
