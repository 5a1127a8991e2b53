package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Metrics is one line of metrics.jsonl: the step and the reference's metric names as keys.
type Metrics map[string]float64

// timingKey reports whether a metric measures wall time (it differs between otherwise identical
// runs; the resume test ignores these).
func timingKey(k string) bool { return strings.HasPrefix(k, "perf/") || strings.HasPrefix(k, "timing") }

// MarshalLine renders {"step": N, then the keys in sorted order}; non-finite values are null
// (JSON has no NaN), floats in the shortest form that round-trips.
func MarshalLine(step int, m Metrics) []byte {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"step":%d`, step)
	for _, k := range keys {
		kb, _ := json.Marshal(k)
		b.WriteByte(',')
		b.Write(kb)
		b.WriteByte(':')
		v := m[k]
		if math.IsNaN(v) || math.IsInf(v, 0) {
			b.WriteString("null")
		} else {
			b.WriteString(strconv.FormatFloat(v, 'g', -1, 64))
		}
	}
	b.WriteString("}\n")
	return b.Bytes()
}

// MetricsLine is a parsed metrics.jsonl line.
type MetricsLine struct {
	Step    int
	Metrics map[string]*float64 // nil: the value was null (non-finite)
}

// ReadMetrics parses a metrics.jsonl file.
func ReadMetrics(path string) ([]MetricsLine, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseMetrics(data, path)
}

func parseMetrics(data []byte, path string) ([]MetricsLine, error) {
	var out []MetricsLine
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<16), 1<<24)
	for n := 1; sc.Scan(); n++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var raw map[string]*float64
		if err := json.Unmarshal(sc.Bytes(), &raw); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, n, err)
		}
		s, ok := raw["step"]
		if !ok || s == nil {
			return nil, fmt.Errorf("%s line %d: no step", path, n)
		}
		delete(raw, "step")
		out = append(out, MetricsLine{Step: int(*s), Metrics: raw})
	}
	return out, sc.Err()
}

// MetricsLog appends lines to metrics.jsonl, one write (and fsync) per line.
type MetricsLog struct {
	f *os.File
}

// OpenMetricsLog opens path for appending. With keepUpTo >= 0 (a resumed run), lines of steps
// after keepUpTo (written by an interrupted run after its last checkpoint, which the resumed run
// writes again) are moved, not dropped, to metrics.orphaned.jsonl beside it; with keepUpTo < 0
// a new file is started (Run refuses a run directory that holds metrics without checkpoints).
func OpenMetricsLog(path string, keepUpTo int) (*MetricsLog, error) {
	if keepUpTo < 0 {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fileMode)
		if err != nil {
			return nil, err
		}
		return &MetricsLog{f: f}, nil
	}
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	var kept, orphaned bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<16), 1<<24)
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var head struct{ Step *int }
		if err := json.Unmarshal(line, &head); err != nil || head.Step == nil {
			return nil, fmt.Errorf("%s line %d: not a metrics line (%v)", path, n, err)
		}
		dst := &kept
		if *head.Step > keepUpTo {
			dst = &orphaned
		}
		dst.Write(line)
		dst.WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if orphaned.Len() > 0 {
		op := strings.TrimSuffix(path, ".jsonl") + ".orphaned.jsonl"
		f, err := os.OpenFile(op, os.O_WRONLY|os.O_CREATE|os.O_APPEND, fileMode)
		if err != nil {
			return nil, err
		}
		_, err = f.Write(orphaned.Bytes())
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, err
		}
		if err := WriteFileAtomic(path, kept.Bytes()); err != nil {
			return nil, err
		}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, fileMode)
	if err != nil {
		return nil, err
	}
	return &MetricsLog{f: f}, nil
}

// Log appends one line.
func (l *MetricsLog) Log(step int, m Metrics) error {
	if _, err := l.f.Write(MarshalLine(step, m)); err != nil {
		return err
	}
	return l.f.Sync()
}

// Close closes the file.
func (l *MetricsLog) Close() error { return l.f.Close() }

// Progress is a one-line console progress bar on a terminal-like writer (stderr).
type Progress struct {
	w          io.Writer
	label      string
	total      int
	start      time.Time
	lastRender time.Time
	enabled    bool
	open       bool // a line was drawn and not ended
	tty        bool
	lastTenth  int
}

// NewProgress starts a bar of total units. On a terminal the bar redraws in place; on other
// writers (a log file, a pipe) it prints a plain line at every tenth of the way.
func NewProgress(w io.Writer, label string, total int, enabled bool) *Progress {
	tty := false
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	return &Progress{w: w, label: label, total: total, start: time.Now(), enabled: enabled, tty: tty}
}

// Update redraws the bar at done units with a short status text (at most ~10 times a second,
// and always at the end).
func (p *Progress) Update(done int, status string) {
	if !p.enabled || p.total <= 0 {
		return
	}
	now := time.Now()
	if !p.tty {
		if tenth := done * 10 / p.total; tenth > p.lastTenth || done == p.total {
			p.lastTenth = tenth
			fmt.Fprintf(p.w, "%s %d/%d [%s] %s\n", p.label, done, p.total, now.Sub(p.start).Round(time.Second), status)
		}
		return
	}
	if done < p.total && now.Sub(p.lastRender) < 100*time.Millisecond {
		return
	}
	p.lastRender = now
	const width = 24
	filled := min(width, done*width/p.total)
	bar := strings.Repeat("█", filled) + strings.Repeat("░", width-filled)
	el := now.Sub(p.start)
	eta := "?"
	if done > 0 {
		eta = (time.Duration(float64(el) / float64(done) * float64(p.total-done))).Round(time.Second).String()
	}
	fmt.Fprintf(p.w, "\r\033[K%s %s %d/%d [%s<%s] %s", p.label, bar, done, p.total, el.Round(time.Second), eta, status)
	p.open = done < p.total
	if !p.open {
		fmt.Fprintln(p.w)
	}
}

// Done ends the bar's line when it was not already ended.
func (p *Progress) Done() {
	if p.open {
		fmt.Fprintln(p.w)
		p.open = false
	}
}
