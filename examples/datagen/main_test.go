package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mtrl-go/mtrl/examples/internal/vqa"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRunBoth(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	require.NoError(t, run([]string{"-n-train", "5", "-n-val", "3", "-seed", "9", "-format", "both", dir}, &out, &errb))
	assert.Equal(t, 4, strings.Count(out.String(), "wrote "), out.String())
	assert.Contains(t, out.String(), "dataset.image_dir="+filepath.Join(dir, "images"))
	_, err := os.Stat(filepath.Join(dir, "images", "train_000004.png"))
	require.NoError(t, err)
	want := vqa.Generate(vqa.DefaultTaskConfig(), 9, 0, 8)
	for _, f := range []string{"train.jsonl", "train.parquet"} {
		got, err := vqa.Load(filepath.Join(dir, f))
		require.NoError(t, err)
		require.Len(t, got, 5)
		assert.Equal(t, want[4].Prompt, got[4].Prompt)
	}
	for _, f := range []string{"val.jsonl", "val.parquet"} {
		got, err := vqa.Load(filepath.Join(dir, f))
		require.NoError(t, err)
		require.Len(t, got, 3)
		assert.Equal(t, want[5].ID, got[0].ID)
		assert.Equal(t, want[7].Response, got[2].Response)
	}
}

func TestRunBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-format", "csv"}, "-format"},
		{[]string{"-n-train", "-1"}, "-n-train"},
		{[]string{"-n-train", "0", "-n-val", "0"}, "nothing to write"},
		{[]string{"-out", ""}, "name the output directory"},
		{[]string{"-options", "11"}, "Options"},
		{[]string{"-max-shapes", "5"}, "MaxShapes"},
		{[]string{"-image-size", "4"}, "ImageSize"},
		{[]string{"-seed", "x"}, "seed"},
		{[]string{"extra", "more"}, "unexpected arguments"},
		{[]string{"-bogus"}, "bogus"},
	} {
		var out, errb bytes.Buffer
		args := append([]string{"-out", t.TempDir()}, c.args...)
		if c.want == "name the output directory" {
			args = c.args
		}
		err := run(args, &out, &errb)
		require.Error(t, err, c.args)
		assert.Contains(t, err.Error()+errb.String(), c.want, c.args)
		assert.Empty(t, out.String())
	}
}
