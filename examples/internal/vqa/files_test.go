package vqa

import (
	"image"
	"image/jpeg"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func samePixels(t *testing.T, a, b image.Image) {
	t.Helper()
	require.Equal(t, a.Bounds().Size(), b.Bounds().Size())
	assert.Equal(t, Pixels(a), Pixels(b))
}

func checkRoundTrip(t *testing.T, want, got []Sample) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range want {
		assert.Equal(t, want[i].ID, got[i].ID)
		assert.Equal(t, want[i].Prompt, got[i].Prompt)
		assert.Equal(t, want[i].Answer, got[i].Answer)
		assert.Equal(t, want[i].Response, got[i].Response)
		assert.Equal(t, want[i].Objects, got[i].Objects)
		samePixels(t, want[i].Image, got[i].Image)
	}
}

func TestRoundTrip(t *testing.T) {
	for _, cfg := range []TaskConfig{DefaultTaskConfig(), {ImageSize: 17, MaxShapes: 4, Options: 10}} {
		want := Generate(cfg, 42, 100, 20)
		dir := t.TempDir()
		pj, err := WriteJSONL(dir, "train", want)
		require.NoError(t, err)
		assert.Equal(t, filepath.Join(dir, "train.jsonl"), pj)
		got, err := Load(pj)
		require.NoError(t, err)
		checkRoundTrip(t, want, got)
		_, err = os.Stat(filepath.Join(dir, "images", "train_000019.png"))
		require.NoError(t, err)

		pq, err := WriteParquet(dir, "val", want)
		require.NoError(t, err)
		assert.Equal(t, filepath.Join(dir, "val.parquet"), pq)
		got, err = Load(pq)
		require.NoError(t, err)
		checkRoundTrip(t, want, got)
	}
}

func TestRoundTripEmpty(t *testing.T) {
	dir := t.TempDir()
	for _, write := range []func(string, string, []Sample) (string, error){WriteJSONL, WriteParquet} {
		p, err := write(dir, "empty", nil)
		require.NoError(t, err)
		got, err := Load(p)
		require.NoError(t, err)
		assert.Empty(t, got)
	}
}

// TestParquetImagePath reads a Parquet row whose image is given by path only.
func TestParquetImagePath(t *testing.T) {
	dir := t.TempDir()
	want := Generate(DefaultTaskConfig(), 1, 0, 3)
	_, err := WriteJSONL(dir, "x", want) // writes images/x_00000N.png
	require.NoError(t, err)
	rows := make([]parquetRow, len(want))
	for i, s := range want {
		rows[i] = parquetRow{ID: s.ID, Prompt: s.Prompt, Answer: s.Answer, Response: s.Response, Objects: s.Objects,
			Images: []parquetImage{{Path: imageName("x", i)}}}
	}
	p := filepath.Join(dir, "x.parquet")
	require.NoError(t, parquet.WriteFile(p, rows))
	got, err := Load(p)
	require.NoError(t, err)
	checkRoundTrip(t, want, got)

	require.NoError(t, os.Remove(filepath.Join(dir, "images", "x_000001.png")))
	_, err = Load(p)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "row 2")
	assert.Contains(t, err.Error(), "missing image file")
	assert.Contains(t, err.Error(), filepath.Join(dir, "images", "x_000001.png"))
}

func TestWriteErrors(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"", "a/b", "..", `a\b`} {
		_, err := WriteJSONL(dir, name, nil)
		assert.ErrorContains(t, err, "invalid dataset name")
		_, err = WriteParquet(dir, name, nil)
		assert.ErrorContains(t, err, "invalid dataset name")
	}
	_, err := WriteJSONL(dir, "x", []Sample{{ID: 7}})
	assert.ErrorContains(t, err, "no image")
	_, err = WriteParquet(dir, "x", []Sample{{ID: 7}})
	assert.ErrorContains(t, err, "no image")
}

// jsonlFixture writes a valid 3-line dataset and returns its path and lines.
func jsonlFixture(t *testing.T) (string, []string) {
	t.Helper()
	dir := t.TempDir()
	p, err := WriteJSONL(dir, "d", Generate(DefaultTaskConfig(), 5, 0, 3))
	require.NoError(t, err)
	data, err := os.ReadFile(p)
	require.NoError(t, err)
	return p, strings.Split(strings.TrimRight(string(data), "\n"), "\n")
}

func TestLoadJSONLErrors(t *testing.T) {
	good := `{"id":1,"prompt":"what colour is the circle ? A red B blue","answer":"B","response":"r","images":["d_000000.png"],"objects":[]}`
	cases := []struct {
		name  string
		line  string // replaces line 2
		setup func(dir string)
		want  []string
	}{
		{"corrupt json", `{"prompt": "x",`, nil, []string{"d.jsonl:2", "corrupt JSON"}},
		{"trailing data", good + ` {}`, nil, []string{"d.jsonl:2", "trailing data"}},
		{"not an object", `[1,2]`, nil, []string{"d.jsonl:2", "corrupt JSON"}},
		{"wrong type", strings.Replace(good, `"answer":"B"`, `"answer":7`, 1), nil, []string{"d.jsonl:2", "corrupt JSON"}},
		{"missing prompt", strings.Replace(good, `"prompt":"what colour is the circle ? A red B blue",`, "", 1), nil, []string{"d.jsonl:2", `field "prompt"`, "missing"}},
		{"missing answer", strings.Replace(good, `"answer":"B",`, "", 1), nil, []string{"d.jsonl:2", `field "answer"`, "missing"}},
		{"missing images", strings.Replace(good, `"images":["d_000000.png"],`, "", 1), nil, []string{"d.jsonl:2", `field "images"`, "missing"}},
		{"empty prompt", strings.Replace(good, `"what colour is the circle ? A red B blue"`, `" "`, 1), nil, []string{"d.jsonl:2", `field "prompt"`, "empty"}},
		{"unknown letter", strings.Replace(good, `"answer":"B"`, `"answer":"K"`, 1), nil, []string{"d.jsonl:2", `field "answer"`, `unknown answer letter "K"`}},
		{"lower-case letter", strings.Replace(good, `"answer":"B"`, `"answer":"b"`, 1), nil, []string{"d.jsonl:2", `field "answer"`, "unknown answer letter"}},
		{"letter not an option", strings.Replace(good, `"answer":"B"`, `"answer":"C"`, 1), nil, []string{"d.jsonl:2", `field "answer"`, "not an option"}},
		{"two images", strings.Replace(good, `["d_000000.png"]`, `["d_000000.png","d_000001.png"]`, 1), nil, []string{"d.jsonl:2", `field "images"`, "exactly 1"}},
		{"empty image path", strings.Replace(good, `"d_000000.png"`, `""`, 1), nil, []string{"d.jsonl:2", `field "images"`, "empty image path"}},
		{"missing image", strings.Replace(good, "d_000000.png", "nope.png", 1), nil, []string{"d.jsonl:2", `field "images"`, "missing image file", filepath.Join("images", "nope.png")}},
		{"fractional id", strings.Replace(good, `"id":1`, `"id":1.5`, 1), nil, []string{"d.jsonl:2", `field "id"`}},
		{"undecodable png", strings.Replace(good, "d_000000.png", "bad.png", 1), func(dir string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "images", "bad.png"), []byte("not a png"), 0o644))
		}, []string{"d.jsonl:2", `field "images"`, "undecodable image", "bad.png"}},
		{"unknown object", strings.Replace(good, `"objects":[]`, `"objects":[{"shape":"star","colour":"red","position":"top left"}]`, 1), nil, []string{"d.jsonl:2", `field "objects"`, "unknown"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, lines := jsonlFixture(t)
			lines[1] = c.line
			require.NoError(t, os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
			if c.setup != nil {
				c.setup(filepath.Dir(p))
			}
			_, err := Load(p)
			require.Error(t, err)
			for _, w := range c.want {
				assert.Contains(t, err.Error(), w)
			}
			assert.Contains(t, err.Error(), p)
		})
	}
}

func TestLoadJSONLBlankLinesAndNoID(t *testing.T) {
	p, lines := jsonlFixture(t)
	want, err := Load(p)
	require.NoError(t, err)
	// Drop the id of line 3 and add blank lines: ids default to line-1.
	lines[2] = strings.Replace(lines[2], `"id":2,`, "", 1)
	require.NoError(t, os.WriteFile(p, []byte("\n"+strings.Join(lines, "\n\n")+"\n\n"), 0o644))
	got, err := Load(p)
	require.NoError(t, err)
	require.Len(t, got, 3)
	assert.Equal(t, uint64(5), got[2].ID) // line 6
	assert.Equal(t, want[1], got[1])
}

func TestLoadOtherErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := Load(filepath.Join(dir, "x.csv"))
	assert.ErrorContains(t, err, "unknown dataset extension")
	_, err = Load(filepath.Join(dir, "none.jsonl"))
	assert.ErrorContains(t, err, "none.jsonl")
	_, err = Load(filepath.Join(dir, "none.parquet"))
	assert.ErrorContains(t, err, "none.parquet")

	bad := filepath.Join(dir, "bad.parquet")
	require.NoError(t, os.WriteFile(bad, []byte("PAR1 this is not parquet PAR1"), 0o644))
	_, err = Load(bad)
	assert.ErrorContains(t, err, "corrupt Parquet file")
	assert.ErrorContains(t, err, bad)

	// A truncated real file.
	p, err := WriteParquet(dir, "t", Generate(DefaultTaskConfig(), 1, 0, 4))
	require.NoError(t, err)
	data, err := os.ReadFile(p)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p, data[:len(data)/2], 0o644))
	_, err = Load(p)
	assert.ErrorContains(t, err, "corrupt Parquet")
}

func TestLoadParquetErrors(t *testing.T) {
	dir := t.TempDir()
	s := Generate(DefaultTaskConfig(), 3, 0, 3)
	png0, err := encodePNG(s[0].Image)
	require.NoError(t, err)
	row := func(i int) parquetRow {
		return parquetRow{ID: s[i].ID, Prompt: s[i].Prompt, Answer: s[i].Answer, Response: s[i].Response,
			Objects: s[i].Objects, Images: []parquetImage{{Bytes: png0}}}
	}
	cases := []struct {
		name   string
		mutate func(r *parquetRow)
		want   []string
	}{
		{"unknown letter", func(r *parquetRow) { r.Answer = "Z" }, []string{"row 2", `field "answer"`, `unknown answer letter "Z"`}},
		{"undecodable png", func(r *parquetRow) { r.Images[0].Bytes = []byte("garbage") }, []string{"row 2", `field "images"`, "undecodable image"}},
		{"no image", func(r *parquetRow) { r.Images = nil }, []string{"row 2", `field "images"`, "exactly 1"}},
		{"missing image path", func(r *parquetRow) { r.Images[0].Path = "images/gone.png"; r.Images[0].Bytes = nil }, []string{"row 2", `field "images"`, "missing image file", "gone.png"}},
		{"unknown object", func(r *parquetRow) { r.Objects = []Object{{"blob", "red", "top left"}} }, []string{"row 2", `field "objects"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rows := []parquetRow{row(0), row(1), row(2)}
			c.mutate(&rows[1])
			p := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_")+".parquet")
			require.NoError(t, parquet.WriteFile(p, rows))
			_, err := Load(p)
			require.Error(t, err)
			for _, w := range c.want {
				assert.Contains(t, err.Error(), w)
			}
			assert.Contains(t, err.Error(), p)
		})
	}

	// A file without the "answer" column.
	type noAnswer struct {
		Prompt   string         `parquet:"prompt"`
		Response string         `parquet:"response"`
		Images   []parquetImage `parquet:"images,list"`
		Objects  []Object       `parquet:"objects,list"`
	}
	p := filepath.Join(dir, "noanswer.parquet")
	require.NoError(t, parquet.WriteFile(p, []noAnswer{{Prompt: "x"}}))
	_, err = Load(p)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `field "answer": missing column`)
}

// TestSeedFormat reads the seeds' rows: renamed keys, a single image path, images of any size
// and format under image_dir, no response and no objects (both optional).
func TestSeedFormat(t *testing.T) {
	dir := t.TempDir()
	imgDir := filepath.Join(dir, "pics")
	require.NoError(t, os.MkdirAll(imgDir, 0o755))
	big := image.NewRGBA(image.Rect(0, 0, 70, 45))
	f, err := os.Create(filepath.Join(imgDir, "a.jpg"))
	require.NoError(t, err)
	require.NoError(t, jpeg.Encode(f, big, nil))
	require.NoError(t, f.Close())
	rows := `{"question":"which is it ? (A) cat (B) dog","label":"(B)","img":"a.jpg"}` + "\n" +
		`{"question":"what ? A. x B. y","label":"A","img":["a.jpg"],"response":"<think> x </think> Answer: A"}` + "\n"
	p := filepath.Join(dir, "train.jsonl")
	require.NoError(t, os.WriteFile(p, []byte(rows), 0o644))
	o := LoadOptions{PromptKey: "question", AnswerKey: "label", ImageKey: "img", ImageDir: imgDir}
	got, err := LoadWith(p, o)
	require.NoError(t, err)
	require.Len(t, got, 2)
	assert.Equal(t, "B", got[0].Answer)
	assert.Equal(t, "", got[0].Response)
	assert.Nil(t, got[0].Objects)
	assert.Equal(t, image.Pt(70, 45), got[0].Image.Bounds().Size())
	assert.Equal(t, "<think> x </think> Answer: A", got[1].Response)

	_, err = Load(p) // the default keys are not there
	assert.ErrorContains(t, err, `field "prompt": missing`)
	o.ImageDir = dir
	_, err = LoadWith(p, o)
	assert.ErrorContains(t, err, "missing image file "+filepath.Join(dir, "a.jpg"))
}

// TestSeedFormatParquet: renamed columns and no response/objects columns.
func TestSeedFormatParquet(t *testing.T) {
	s := Generate(DefaultTaskConfig(), 3, 0, 2)
	png0, err := encodePNG(s[0].Image)
	require.NoError(t, err)
	type seedRow struct {
		Q   string         `parquet:"question"`
		L   string         `parquet:"label"`
		Img []parquetImage `parquet:"img,list"`
	}
	p := filepath.Join(t.TempDir(), "seed.parquet")
	require.NoError(t, parquet.WriteFile(p, []seedRow{{s[0].Prompt, s[0].Answer, []parquetImage{{Bytes: png0}}}, {s[1].Prompt, s[1].Answer, []parquetImage{{Bytes: png0}}}}))
	got, err := LoadWith(p, LoadOptions{PromptKey: "question", AnswerKey: "label", ImageKey: "img"})
	require.NoError(t, err)
	require.Len(t, got, 2)
	assert.Equal(t, s[1].Prompt, got[1].Prompt)
	assert.Equal(t, s[1].Answer, got[1].Answer)
	assert.Nil(t, got[1].Objects)
	assert.Equal(t, uint64(1), got[1].ID)
	samePixels(t, s[0].Image, got[1].Image)
}
