package vqa

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestVideosAreNeverDroppedSilently: a row that lists videos is an error naming the file, the
// line or row, the column and the way out (JSONL and Parquet, a list of paths or of structs);
// an empty or null list is fine, and with IgnoreVideos the videos are counted, not read.
func TestVideosAreNeverDroppedSilently(t *testing.T) {
	s := Generate(DefaultTaskConfig(), 3, 0, 3)
	dir := t.TempDir()
	p, err := WriteJSONL(dir, "rows", s)
	require.NoError(t, err)
	data, err := os.ReadFile(p)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	// Row 2 lists two videos, row 3 an empty list, row 1 none; a renamed key in the second file.
	withVideos := func(key string) []byte {
		return []byte(lines[0] + "\n" + lines[1][:len(lines[1])-1] + `,"` + key + `":["a.mp4","b.mp4"]}` + "\n" +
			lines[2][:len(lines[2])-1] + `,"` + key + `":[]}` + "\n")
	}
	vp := filepath.Join(dir, "videos.jsonl")
	require.NoError(t, os.WriteFile(vp, withVideos("videos"), 0o644))
	_, err = Load(vp)
	require.Error(t, err)
	for _, want := range []string{"videos.jsonl:2", `field "videos"`, "2 video(s)", "dataset.ignore_videos=true"} {
		assert.Contains(t, err.Error(), want)
	}
	o := DefaultLoadOptions()
	o.IgnoreVideos = true
	got, err := LoadWith(vp, o)
	require.NoError(t, err)
	require.Len(t, got, 3)
	assert.Equal(t, []int{0, 2, 0}, []int{got[0].IgnoredVideos, got[1].IgnoredVideos, got[2].IgnoredVideos})

	rp := filepath.Join(dir, "renamed.jsonl")
	require.NoError(t, os.WriteFile(rp, withVideos("clips"), 0o644))
	_, err = Load(rp) // the videos column is "clips" here: not the default's
	require.NoError(t, err)
	o = DefaultLoadOptions()
	o.VideoKey = "clips"
	_, err = LoadWith(rp, o)
	assert.ErrorContains(t, err, `field "clips"`)

	// Parquet: a list of paths, and a list of structs.
	png0, err := encodePNG(s[0].Image)
	require.NoError(t, err)
	type pathRow struct {
		Prompt string         `parquet:"prompt"`
		Answer string         `parquet:"answer"`
		Images []parquetImage `parquet:"images,list"`
		Videos []string       `parquet:"videos,list"`
	}
	pp := filepath.Join(dir, "videos.parquet")
	require.NoError(t, parquet.WriteFile(pp, []pathRow{
		{s[0].Prompt, s[0].Answer, []parquetImage{{Bytes: png0}}, nil},
		{s[1].Prompt, s[1].Answer, []parquetImage{{Bytes: png0}}, []string{}},
		{s[2].Prompt, s[2].Answer, []parquetImage{{Bytes: png0}}, []string{"a.mp4", "b.mp4", "c.mp4"}},
	}))
	_, err = Load(pp)
	require.Error(t, err)
	for _, want := range []string{"videos.parquet: row 3", `field "videos"`, "3 video(s)"} {
		assert.Contains(t, err.Error(), want)
	}
	o = DefaultLoadOptions()
	o.IgnoreVideos = true
	got, err = LoadWith(pp, o)
	require.NoError(t, err)
	assert.Equal(t, []int{0, 0, 3}, []int{got[0].IgnoredVideos, got[1].IgnoredVideos, got[2].IgnoredVideos})

	type structRow struct {
		Prompt string         `parquet:"prompt"`
		Answer string         `parquet:"answer"`
		Images []parquetImage `parquet:"images,list"`
		Videos []parquetImage `parquet:"videos,list"`
	}
	sp := filepath.Join(dir, "structs.parquet")
	require.NoError(t, parquet.WriteFile(sp, []structRow{
		{s[0].Prompt, s[0].Answer, []parquetImage{{Bytes: png0}}, []parquetImage{{Path: "v.mp4"}}},
		{s[1].Prompt, s[1].Answer, []parquetImage{{Bytes: png0}}, nil},
	}))
	_, err = Load(sp)
	assert.ErrorContains(t, err, "structs.parquet: row 1")
}
