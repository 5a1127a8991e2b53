package atomicfile

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWriteFileReplacesAndLeavesNoTemporary(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.json")
	require.NoError(t, WriteFile(p, []byte("old"), 0o644))
	require.NoError(t, WriteFile(p, []byte("new contents"), 0o640))
	got, err := os.ReadFile(p)
	require.NoError(t, err)
	require.Equal(t, "new contents", string(got))
	st, err := os.Stat(p)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o640), st.Mode().Perm())
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "temporary file left behind")
}

func TestWriteFileFailureKeepsOldFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a")
	require.NoError(t, WriteFile(p, []byte("old"), 0o644))
	// A directory in the target's place makes the rename fail after the data was written.
	require.Error(t, WriteFile(filepath.Join(dir, "missing", "b"), []byte("x"), 0o644))
	sub := filepath.Join(dir, "d")
	require.NoError(t, os.Mkdir(sub, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(sub, "keep"), nil, 0o644))
	require.Error(t, WriteFile(sub, []byte("x"), 0o644))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 2, "a temporary file was left behind: %v", entries)
	got, err := os.ReadFile(p)
	require.NoError(t, err)
	require.Equal(t, "old", string(got))
}
