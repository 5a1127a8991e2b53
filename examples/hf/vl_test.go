package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/examples/hflm"
	"github.com/mtrl-go/mtrl/examples/hfmodel"
	"github.com/mtrl-go/mtrl/examples/qwenvl"
)

const vlTestdata = "../qwenvl/testdata"

// initVLCheckpoint writes a tiny Qwen2-VL or Qwen2.5-VL checkpoint whose vocabulary and special
// tokens are the real ones, with the Qwen2.5 tokenizer and Qwen2-VL's chat template.
func initVLCheckpoint(t *testing.T, cfgFile, layout string) string {
	data, err := os.ReadFile(filepath.Join(vlTestdata, "models", cfgFile))
	require.NoError(t, err)
	var cfg map[string]any
	require.NoError(t, json.Unmarshal(data, &cfg))
	text := cfg
	if tc, ok := cfg["text_config"].(map[string]any); ok {
		text = tc
	}
	text["vocab_size"] = 151936
	for k, v := range map[string]int{"bos_token_id": 151643, "eos_token_id": 151645, "vision_start_token_id": 151652,
		"vision_end_token_id": 151653, "vision_token_id": 151654, "image_token_id": 151655, "video_token_id": 151656} {
		cfg[k] = v
	}
	data, err = json.Marshal(cfg)
	require.NoError(t, err)
	tmp := t.TempDir()
	cfgPath := filepath.Join(tmp, "config.json")
	require.NoError(t, os.WriteFile(cfgPath, data, 0o644))
	dir := filepath.Join(tmp, "model")
	_, err = runHF(t, "", "init", "-config", cfgPath, "-out", dir, "-seed", "4", "-dtype", "bfloat16",
		"-layout", layout, "-tokenizer", filepath.Join(testdata, "qwen2_5"))
	require.NoError(t, err)
	tpl, err := os.ReadFile(filepath.Join(testdata, "qwen2_vl", "chat_template.json"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "chat_template.json"), tpl, 0o644))
	return dir
}

// TestVLCommands runs init, preprocess, logits and generate on tiny Qwen2-VL and Qwen2.5-VL
// checkpoints (both weight layouts): generate's text for a conversation with two images is the
// model's greedy completion of the sample built by hand (chat template, tokenizer, processor,
// expansion), and logits of {"ids", "images"} are the model's.
func TestVLCommands(t *testing.T) {
	images := []string{filepath.Join(vlTestdata, "images", "odd_rgb.png"), filepath.Join(vlTestdata, "images", "exact.png")}
	for _, c := range []struct{ cfg, layout string }{{"qwen2-vl.json", "legacy"}, {"qwen2.5-vl.json", "nested"}} {
		t.Run(c.cfg, func(t *testing.T) {
			dir := initVLCheckpoint(t, c.cfg, c.layout)
			out, err := runHF(t, "", "preprocess", "-model", dir, "-image", images[0], "-image", images[1])
			require.NoError(t, err)
			var rep qwenvl.Report
			require.NoError(t, json.Unmarshal([]byte(out), &rep))
			require.Len(t, rep.ImageGridTHW, 2)

			m, err := qwenvl.LoadDir(dir)
			require.NoError(t, err)
			conv := `{"messages": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "and"}, {"type": "image"}, {"type": "text", "text": "Same?"}]}], "images": ["` + images[0] + `", "` + images[1] + `"]}`
			ct, err := hfmodel.LoadChatTemplate(dir)
			require.NoError(t, err)
			prompt, err := ct.Render([]byte(conv), true)
			require.NoError(t, err)
			require.Equal(t, 2, strings.Count(prompt, qwenvl.ImagePad))
			tok, err := hfmodel.LoadTokenizer(dir)
			require.NoError(t, err)
			var ids []int64
			for _, id := range tok.Encode(prompt) {
				ids = append(ids, int64(id))
			}
			pc, err := qwenvl.LoadProcessorConfig(dir)
			require.NoError(t, err)
			proc, err := qwenvl.NewProcessor(pc)
			require.NoError(t, err)
			var imgs []*qwenvl.RGB
			for _, f := range images {
				img, err := qwenvl.LoadImage(f)
				require.NoError(t, err)
				imgs = append(imgs, img)
			}
			patches, err := proc.Images(imgs)
			require.NoError(t, err)
			rows, err := qwenvl.ExpandTokens([][]int64{ids}, patches.Grids, nil, m.Config.Tokens)
			require.NoError(t, err)
			s := qwenvl.Sample{Images: patches}
			for _, id := range rows[0] {
				s.IDs = append(s.IDs, int32(id))
			}
			// logits of {"ids", "images"}: the same path without the chat template, kept short
			// (each position prints the whole vocabulary)
			short := qwenvl.Sample{IDs: []int32{151652}, Images: qwenvl.Patches{Cols: patches.Cols, Rows: 24, Grids: patches.Grids[:1]}}
			short.Images.Values = patches.Values[:24*patches.Cols]
			for range patches.Grids[0].Tokens(2) {
				short.IDs = append(short.IDs, 151655)
			}
			short.IDs = append(short.IDs, 151653, 3838)
			want, err := m.Logits(short)
			require.NoError(t, err)
			wv, err := want.Float32s()
			require.NoError(t, err)
			require.Equal(t, 24, patches.Grids[0].T*patches.Grids[0].H*patches.Grids[0].W)
			out, err = runHF(t, `{"ids": [151652, 151655, 151653, 3838], "images": ["`+images[0]+`"]}`+"\n[151644, 872]\n", "logits", "-model", dir)
			require.NoError(t, err)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			require.Len(t, lines, 2)
			var got [][]float32
			require.NoError(t, json.Unmarshal([]byte(lines[0]), &got))
			require.Len(t, got, len(short.IDs))
			for p, row := range got {
				require.Equal(t, wv[p*151936:(p+1)*151936], row, "position %d", p)
			}

			out, err = runHF(t, conv+"\n", "generate", "-model", dir, "-max-new-tokens", "5")
			require.NoError(t, err)
			gen, err := m.Generate([]qwenvl.Sample{s}, hflm.Sampling{MaxNewTokens: 5, TopP: 1, Stop: []int32{151645}}, nil)
			require.NoError(t, err)
			var gids []int
			for _, id := range gen[0] {
				gids = append(gids, int(id))
			}
			text, err := tok.Decode(gids, true)
			require.NoError(t, err)
			var gotText string
			require.NoError(t, json.Unmarshal([]byte(out), &gotText))
			require.Equal(t, text, gotText)

			// a video: three frames (repeated to four, two temporal patches)
			var frames []string
			var rgbs []*qwenvl.RGB
			for i := range 3 {
				f := filepath.Join(vlTestdata, "images", fmt.Sprintf("frame%d.png", i))
				img, err := qwenvl.LoadImage(f)
				require.NoError(t, err)
				frames, rgbs = append(frames, f), append(rgbs, img)
			}
			vconv := `{"messages": [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "What moves?"}]}], "videos": [["` + strings.Join(frames, `", "`) + `"]]}`
			vprompt, err := ct.Render([]byte(vconv), true)
			require.NoError(t, err)
			require.Equal(t, 1, strings.Count(vprompt, qwenvl.VideoPad))
			var vids []int64
			for _, id := range tok.Encode(vprompt) {
				vids = append(vids, int64(id))
			}
			vp, err := proc.Video([][]*qwenvl.RGB{rgbs})
			require.NoError(t, err)
			require.Equal(t, 2, vp.Grids[0].T)
			rows, err = qwenvl.ExpandTokens([][]int64{vids}, nil, vp.Grids, m.Config.Tokens)
			require.NoError(t, err)
			vs := qwenvl.Sample{Videos: vp}
			for _, id := range rows[0] {
				vs.IDs = append(vs.IDs, int32(id))
			}
			gen, err = m.Generate([]qwenvl.Sample{vs}, hflm.Sampling{MaxNewTokens: 4, TopP: 1, Stop: []int32{151645}}, nil)
			require.NoError(t, err)
			gids = gids[:0]
			for _, id := range gen[0] {
				gids = append(gids, int(id))
			}
			text, err = tok.Decode(gids, true)
			require.NoError(t, err)
			out, err = runHF(t, vconv+"\n", "generate", "-model", dir, "-max-new-tokens", "4")
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal([]byte(out), &gotText))
			require.Equal(t, text, gotText)

			_, err = runHF(t, `{"messages": [{"role": "user", "content": [{"type": "image"}]}], "images": []}`+"\n", "logits", "-model", dir)
			require.ErrorContains(t, err, "stdin line 1")
			_, err = runHF(t, `{"ids": [1], "messages": []}`+"\n", "logits", "-model", dir)
			require.ErrorContains(t, err, "either ids or messages")
			_, err = runHF(t, "", "init", "-config", filepath.Join(dir, "config.json"), "-out", t.TempDir(), "-shards", "2")
			require.ErrorContains(t, err, "one file")
			_, err = runHF(t, "", "init", "-config", filepath.Join(dir, "config.json"), "-out", t.TempDir(), "-layout", "flat")
			require.ErrorContains(t, err, "legacy or nested")
		})
	}
}
