package main

import (
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMaskedCRC checks the CRC32C against its standard check value and the mask against
// TensorFlow's definition.
func TestMaskedCRC(t *testing.T) {
	assert.Equal(t, uint32(0xe3069283), crc32.Checksum([]byte("123456789"), castagnoli))
	c := uint32(0xe3069283)
	assert.Equal(t, (c>>15|c<<17)+0xa282ead8, maskedCRC([]byte("123456789")))
}

func TestTensorBoardRoundTrip(t *testing.T) {
	dir := t.TempDir()
	l, err := OpenTensorBoard(dir)
	require.NoError(t, err)
	require.NoError(t, l.Log(1, Metrics{"actor/pg_loss": 0.25, "val/reward_score": -1.5}))
	require.NoError(t, l.Log(2, Metrics{"actor/pg_loss": 0.125, "perf/tokens_per_second": 1e4}))
	require.NoError(t, l.Close())
	files, _ := filepath.Glob(filepath.Join(dir, "events.out.tfevents.*"))
	require.Len(t, files, 1)
	data, err := os.ReadFile(files[0])
	require.NoError(t, err)
	version, steps, scalars, err := readEvents(data)
	require.NoError(t, err)
	assert.Equal(t, "brain.Event:2", version)
	assert.Equal(t, []int64{1, 2}, steps)
	assert.Equal(t, map[string]float32{"actor/pg_loss": 0.25, "val/reward_score": -1.5}, scalars[0])
	assert.Equal(t, map[string]float32{"actor/pg_loss": 0.125, "perf/tokens_per_second": 1e4}, scalars[1])

	// Every CRC is checked: a flipped byte anywhere in a record is reported.
	for _, at := range []int{3, 10, 20, len(data) - 2} {
		bad := append([]byte(nil), data...)
		bad[at] ^= 1
		_, _, _, err := readEvents(bad)
		assert.Error(t, err, "flipped byte %d", at)
	}
}
