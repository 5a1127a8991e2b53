package qwenvl

import (
	"encoding/json"
	"math"
	"strings"

	"github.com/mtrl-go/mtrl/tensor"
)

// VisionTokens are the special tokens and sizes of a Qwen2-VL / Qwen2.5-VL config.json that
// the language side needs: the ids of <|vision_start|>, <|image_pad|> and <|video_pad|>, the
// vision tower's spatial_merge_size and, for Qwen2.5-VL, vision_config.tokens_per_second.
type VisionTokens struct {
	VisionStartID int64
	ImageID       int64
	VideoID       int64
	MergeSize     int
	// TokensPerSecond is Qwen2.5-VL's temporal position step per second of video; 0 selects
	// Qwen2-VL, whose video frames advance the temporal position by one per temporal patch.
	TokensPerSecond int
}

// Qwen2VLTokens returns the token ids of the Qwen2-VL and Qwen2.5-VL tokenizers with
// spatial_merge_size 2 and no tokens_per_second (Qwen2-VL).
func Qwen2VLTokens() VisionTokens {
	return VisionTokens{VisionStartID: 151652, ImageID: 151655, VideoID: 151656, MergeSize: 2}
}

// The placeholders Qwen2VLProcessor expands in prompt text.
const (
	ImagePad = "<|image_pad|>"
	VideoPad = "<|video_pad|>"
)

// ExpandText replaces the i-th <|image_pad|> of the texts (counted across all texts in order)
// by images[i].Tokens(mergeSize) copies of it, and likewise <|video_pad|> with videos, as
// Qwen2VLProcessor does before tokenising. Every grid must be used.
func ExpandText(texts []string, images, videos []Grid, mergeSize int) ([]string, error) {
	const op = "qwenvl.ExpandText"
	if mergeSize <= 0 {
		return nil, tensor.Errorf(tensor.ErrParam, op, "mergeSize", "%d must be positive", mergeSize)
	}
	out := append([]string(nil), texts...)
	for _, kind := range []struct {
		pad   string
		grids []Grid
		name  string
	}{{ImagePad, images, "images"}, {VideoPad, videos, "videos"}} {
		next := 0
		for i, s := range out {
			var b strings.Builder
			for {
				j := strings.Index(s, kind.pad)
				if j < 0 {
					break
				}
				if next == len(kind.grids) {
					return nil, tensor.Errorf(tensor.ErrShape, op, kind.name, "text %d has more %s than the %d grids", i, kind.pad, len(kind.grids))
				}
				b.WriteString(s[:j])
				b.WriteString(strings.Repeat(kind.pad, kind.grids[next].Tokens(mergeSize)))
				next++
				s = s[j+len(kind.pad):]
			}
			b.WriteString(s)
			out[i] = b.String()
		}
		if next != len(kind.grids) {
			return nil, tensor.Errorf(tensor.ErrShape, op, kind.name, "%d grids but %d %s in the texts", len(kind.grids), next, kind.pad)
		}
	}
	return out, nil
}

// ExpandTokens is ExpandText on token ids: each image (video) token of the rows, counted
// across rows in order, becomes the number of copies its grid gives.
func ExpandTokens(rows [][]int64, images, videos []Grid, tok VisionTokens) ([][]int64, error) {
	const op = "qwenvl.ExpandTokens"
	if tok.MergeSize <= 0 {
		return nil, tensor.Errorf(tensor.ErrParam, op, "tok.MergeSize", "%d must be positive", tok.MergeSize)
	}
	nextImage, nextVideo := 0, 0
	out := make([][]int64, len(rows))
	for r, ids := range rows {
		var row []int64
		for _, id := range ids {
			grids, next := images, &nextImage
			switch id {
			case tok.ImageID:
			case tok.VideoID:
				grids, next = videos, &nextVideo
			default:
				row = append(row, id)
				continue
			}
			if *next == len(grids) {
				return nil, tensor.Errorf(tensor.ErrShape, op, "rows", "row %d has more vision tokens (id %d) than the %d grids", r, id, len(grids))
			}
			for range grids[*next].Tokens(tok.MergeSize) {
				row = append(row, id)
			}
			*next++
		}
		out[r] = row
	}
	if nextImage != len(images) || nextVideo != len(videos) {
		return nil, tensor.Errorf(tensor.ErrShape, op, "rows", "used %d of %d image grids and %d of %d video grids", nextImage, len(images), nextVideo, len(videos))
	}
	return out, nil
}

// RopeInputs are get_rope_index's arguments. Mask may be nil (every token attends); otherwise it
// is 0 (padding) or 1 per token, rows as in InputIDs (left padding as Hugging Face pads).
// SecondPerGrid (Qwen2.5-VL only) is the seconds one temporal patch of each video spans
// (temporal_patch_size / fps); nil means 1 second each.
type RopeInputs struct {
	InputIDs      [][]int64
	Mask          [][]int64
	ImageGrids    []Grid
	VideoGrids    []Grid
	SecondPerGrid []float64
}

// Rope is get_rope_index's result: Positions[axis][row][token] for the temporal, height and
// width axes, and Deltas[row], the amount to add to a decoding position (the cache length) to
// get the next token's position.
type Rope struct {
	Positions [3][][]int64
	Deltas    []int64
}

// RopeIndex computes the M-RoPE position ids exactly as Hugging Face's get_rope_index of
// Qwen2-VL (tok.TokensPerSecond == 0) or Qwen2.5-VL. Text advances all three axes together.
// A vision block (a vision-start token followed by the grid's image or video tokens) starts at
// the next text position s and puts token (t, h, w) of the merged grid at
// (s + t·step, s + h, s + w), where step is 1 for Qwen2-VL and for Qwen2.5-VL
// tokens_per_second times the whole seconds of SecondPerGrid (Hugging Face casts it to an
// integer before multiplying); text after the block resumes at one past the block's largest
// position. Padding positions (mask 0) are 1. With no grids at all, positions are the running
// count of attended tokens, as for a text model.
//
// Inputs Hugging Face would fail on, or that the model's forward would reject (a vision start
// at the end of a row, a vision block with the wrong number of tokens, grids left unused, a row
// with no attended token), are errors here.
func RopeIndex(in RopeInputs, tok VisionTokens) (Rope, error) {
	const op = "qwenvl.RopeIndex"
	if tok.MergeSize <= 0 {
		return Rope{}, tensor.Errorf(tensor.ErrParam, op, "tok.MergeSize", "%d must be positive", tok.MergeSize)
	}
	if len(in.InputIDs) == 0 {
		return Rope{}, tensor.Errorf(tensor.ErrShape, op, "InputIDs", "no rows")
	}
	seq := len(in.InputIDs[0])
	for r, ids := range in.InputIDs {
		if len(ids) != seq {
			return Rope{}, tensor.Errorf(tensor.ErrShape, op, "InputIDs", "row %d has %d tokens, row 0 has %d", r, len(ids), seq)
		}
	}
	mask := in.Mask
	if mask == nil {
		mask = make([][]int64, len(in.InputIDs))
		for r := range mask {
			mask[r] = make([]int64, seq)
			for i := range mask[r] {
				mask[r][i] = 1
			}
		}
	}
	if len(mask) != len(in.InputIDs) {
		return Rope{}, tensor.Errorf(tensor.ErrShape, op, "Mask", "%d rows, InputIDs has %d", len(mask), len(in.InputIDs))
	}
	for r, m := range mask {
		if len(m) != seq {
			return Rope{}, tensor.Errorf(tensor.ErrShape, op, "Mask", "row %d has %d entries, want %d", r, len(m), seq)
		}
		for i, v := range m {
			if v != 0 && v != 1 {
				return Rope{}, tensor.Errorf(tensor.ErrParam, op, "Mask", "row %d, token %d: %d is neither 0 nor 1", r, i, v)
			}
		}
	}
	if in.SecondPerGrid != nil && len(in.SecondPerGrid) != len(in.VideoGrids) {
		return Rope{}, tensor.Errorf(tensor.ErrShape, op, "SecondPerGrid", "%d values for %d videos", len(in.SecondPerGrid), len(in.VideoGrids))
	}
	for i, g := range append(append([]Grid(nil), in.ImageGrids...), in.VideoGrids...) {
		if g.T <= 0 || g.H <= 0 || g.W <= 0 || g.H%tok.MergeSize != 0 || g.W%tok.MergeSize != 0 {
			return Rope{}, tensor.Errorf(tensor.ErrShape, op, "grids", "grid %d is %v: need positive sides, H and W multiples of %d", i, g, tok.MergeSize)
		}
	}
	out := Rope{Deltas: make([]int64, len(in.InputIDs))}
	for a := range out.Positions {
		out.Positions[a] = make([][]int64, len(in.InputIDs))
		for r := range out.Positions[a] {
			out.Positions[a][r] = make([]int64, seq)
		}
	}
	if len(in.ImageGrids) == 0 && len(in.VideoGrids) == 0 {
		textPositions(&out, mask)
		return out, nil
	}
	var next visionCursor
	for r, ids := range in.InputIDs {
		var kept []int64 // the attended tokens of the row, as Hugging Face selects them
		for i, id := range ids {
			if mask[r][i] == 1 {
				kept = append(kept, id)
			}
		}
		if len(kept) == 0 {
			return Rope{}, tensor.Errorf(tensor.ErrShape, op, "Mask", "row %d attends to no token", r)
		}
		pos, err := rowPositions(kept, in, tok, &next)
		if err != nil {
			return Rope{}, tensor.Errorf(tensor.ErrShape, op, "InputIDs", "row %d: %v", r, err)
		}
		k, largest := 0, int64(math.MinInt64)
		for i := range ids {
			for a := range 3 {
				if mask[r][i] == 1 {
					out.Positions[a][r][i] = pos[a][k]
					largest = max(largest, pos[a][k])
				} else {
					out.Positions[a][r][i] = 1
				}
			}
			if mask[r][i] == 1 {
				k++
			}
		}
		out.Deltas[r] = largest + 1 - int64(seq)
	}
	if next.image != len(in.ImageGrids) || next.video != len(in.VideoGrids) {
		return Rope{}, tensor.Errorf(tensor.ErrShape, op, "grids", "the rows use %d of %d image grids and %d of %d video grids", next.image, len(in.ImageGrids), next.video, len(in.VideoGrids))
	}
	return out, nil
}

// visionCursor counts the image and video grids used so far; grids are consumed across rows.
type visionCursor struct{ image, video int }

// textPositions is get_rope_index without grids: the cumulative count of attended tokens minus
// one, 1 at padding, and per row delta = largest position + 1 − sequence length.
func textPositions(out *Rope, mask [][]int64) {
	for r, m := range mask {
		var count, largest int64 = 0, math.MinInt64
		for i, v := range m {
			count += v
			p := count - 1
			if v == 0 {
				p = 1
			}
			for a := range 3 {
				out.Positions[a][r][i] = p
			}
			largest = max(largest, p)
		}
		out.Deltas[r] = largest + 1 - int64(len(m))
	}
}

// rowPositions returns the three position ids of each attended token of one row.
func rowPositions(ids []int64, in RopeInputs, tok VisionTokens, next *visionCursor) ([3][]int64, error) {
	var pos [3][]int64
	images, videos := 0, 0
	for i, id := range ids {
		if id != tok.VisionStartID {
			continue
		}
		if i+1 == len(ids) {
			return pos, errorf("a vision start token ends the row")
		}
		switch ids[i+1] {
		case tok.ImageID:
			images++
		case tok.VideoID:
			videos++
		}
	}
	nextStart := int64(0) // one past the largest position so far
	appendText := func(n int) {
		for j := range n {
			for a := range 3 {
				pos[a] = append(pos[a], nextStart+int64(j))
			}
		}
		nextStart += int64(n)
	}
	st := 0
	for range images + videos {
		edImage, edVideo := len(ids)+1, len(ids)+1
		if images > 0 {
			edImage = indexFrom(ids, tok.ImageID, st)
		}
		if videos > 0 {
			edVideo = indexFrom(ids, tok.VideoID, st)
		}
		if edImage < 0 || edVideo < 0 {
			return pos, errorf("fewer vision tokens after position %d than vision start tokens announce", st)
		}
		var g Grid
		var step int64 = 1
		var id int64
		ed := edImage
		if edImage < edVideo {
			if next.image == len(in.ImageGrids) {
				return pos, errorf("more images than the %d image grids", len(in.ImageGrids))
			}
			g, id = in.ImageGrids[next.image], tok.ImageID
			next.image++
			images--
			if tok.TokensPerSecond > 0 {
				step = 0 // Qwen2.5-VL: an image's temporal positions do not advance
			}
		} else {
			if next.video == len(in.VideoGrids) {
				return pos, errorf("more videos than the %d video grids", len(in.VideoGrids))
			}
			g, id, ed = in.VideoGrids[next.video], tok.VideoID, edVideo
			if tok.TokensPerSecond > 0 {
				seconds := 1.0
				if in.SecondPerGrid != nil {
					seconds = in.SecondPerGrid[next.video]
				}
				step = int64(seconds) * int64(tok.TokensPerSecond) // truncated as torch.as_tensor(…, dtype=long)
			}
			next.video++
			videos--
		}
		gt, gh, gw := g.T, g.H/tok.MergeSize, g.W/tok.MergeSize
		n := gt * gh * gw
		if ed+n > len(ids) {
			return pos, errorf("a vision block at %d needs %d tokens, the row has %d left", ed, n, len(ids)-ed)
		}
		for _, v := range ids[ed : ed+n] {
			if v != id {
				return pos, errorf("the vision block at %d has %d tokens of id %d, its grid %v needs %d", ed, countRun(ids[ed:], id), id, g, n)
			}
		}
		appendText(ed - st)
		base, largest := nextStart, nextStart
		for t := range gt {
			for h := range gh {
				for w := range gw {
					p := [3]int64{base + int64(t)*step, base + int64(h), base + int64(w)}
					for a := range 3 {
						pos[a] = append(pos[a], p[a])
						largest = max(largest, p[a])
					}
				}
			}
		}
		nextStart = largest + 1
		st = ed + n
	}
	appendText(len(ids) - st)
	return pos, nil
}

func indexFrom(ids []int64, id int64, from int) int {
	for i := from; i < len(ids); i++ {
		if ids[i] == id {
			return i
		}
	}
	return -1
}

func countRun(ids []int64, id int64) int {
	n := 0
	for n < len(ids) && ids[n] == id {
		n++
	}
	return n
}

func errorf(format string, args ...any) error {
	return tensor.Errorf(tensor.ErrShape, "qwenvl.RopeIndex", "", format, args...)
}

// ParseVisionTokens reads VisionTokens from a checkpoint's config.json: model_type qwen2_vl or
// qwen2_5_vl, vision_start_token_id, image_token_id, video_token_id and vision_config's
// spatial_merge_size (and, for qwen2_5_vl, tokens_per_second). A missing id is an error.
func ParseVisionTokens(configJSON []byte) (VisionTokens, error) {
	const op = "qwenvl.ParseVisionTokens"
	var c struct {
		ModelType          string `json:"model_type"`
		VisionStartTokenID *int64 `json:"vision_start_token_id"`
		ImageTokenID       *int64 `json:"image_token_id"`
		VideoTokenID       *int64 `json:"video_token_id"`
		VisionConfig       struct {
			SpatialMergeSize *int `json:"spatial_merge_size"`
			TokensPerSecond  *int `json:"tokens_per_second"`
		} `json:"vision_config"`
	}
	if err := json.Unmarshal(configJSON, &c); err != nil {
		return VisionTokens{}, tensor.Errorf(tensor.ErrParam, op, "config.json", "%v", err)
	}
	if c.ModelType != "qwen2_vl" && c.ModelType != "qwen2_5_vl" {
		return VisionTokens{}, tensor.Errorf(tensor.ErrParam, op, "model_type", "%q: want qwen2_vl or qwen2_5_vl", c.ModelType)
	}
	for name, v := range map[string]*int64{"vision_start_token_id": c.VisionStartTokenID, "image_token_id": c.ImageTokenID, "video_token_id": c.VideoTokenID} {
		if v == nil {
			return VisionTokens{}, tensor.Errorf(tensor.ErrParam, op, name, "missing")
		}
	}
	tok := VisionTokens{VisionStartID: *c.VisionStartTokenID, ImageID: *c.ImageTokenID, VideoID: *c.VideoTokenID, MergeSize: 2}
	if m := c.VisionConfig.SpatialMergeSize; m != nil {
		tok.MergeSize = *m
	}
	if tok.MergeSize <= 0 {
		return VisionTokens{}, tensor.Errorf(tensor.ErrParam, op, "vision_config.spatial_merge_size", "%d must be positive", tok.MergeSize)
	}
	if c.ModelType == "qwen2_5_vl" {
		tok.TokensPerSecond = 4 // Qwen2_5_VLVisionConfig's default
		if s := c.VisionConfig.TokensPerSecond; s != nil {
			tok.TokensPerSecond = *s
		}
		if tok.TokensPerSecond <= 0 {
			return VisionTokens{}, tensor.Errorf(tensor.ErrParam, op, "vision_config.tokens_per_second", "%d must be positive", tok.TokensPerSecond)
		}
	}
	return tok, nil
}
