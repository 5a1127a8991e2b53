package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestProgressPlainLines: on a writer that is not a terminal, one plain line per tenth of the
// way and one at the end, no escape codes.
func TestProgressPlainLines(t *testing.T) {
	var b bytes.Buffer
	p := NewProgress(&b, "RL", 25, true)
	for i := 1; i <= 25; i++ {
		p.Update(i, "reward 0.5")
	}
	p.Done()
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	require.Len(t, lines, 10, b.String())
	require.True(t, strings.HasPrefix(lines[9], "RL 25/25 ["), lines[9])
	require.True(t, strings.HasSuffix(lines[9], "] reward 0.5"), lines[9])
	require.NotContains(t, b.String(), "\x1b")
	require.NotContains(t, b.String(), "\r")

	b.Reset()
	off := NewProgress(&b, "RL", 25, false)
	off.Update(25, "x")
	off.Done()
	require.Empty(t, b.String())
}

// TestProgressBar draws the terminal bar (mpb) into a buffer: the last frame shows the count,
// a rate, the ETA field and the status; an interrupted bar is ended where it stands.
func TestProgressBar(t *testing.T) {
	var b bytes.Buffer
	p := newProgress(&b, "RL", 4, true, true)
	for i := 1; i <= 4; i++ {
		time.Sleep(5 * time.Millisecond)
		p.Update(i, "reward 0.75")
	}
	p.Done()
	out := b.String()
	require.Contains(t, out, "RL 4/4")
	require.Regexp(t, `RL 4/4 \[=+\] [1-9][0-9.e+]*/s `, out, "a non-zero rate")
	require.Contains(t, out, "ETA")
	require.Contains(t, out, "reward 0.75")
	p.Done() // idempotent

	b.Reset()
	q := newProgress(&b, "warm start", 10, true, true)
	q.Update(3, "loss 1.2")
	q.Done()
	require.Contains(t, b.String(), "warm start 3/10")
}
