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
	"sync/atomic"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
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
		err := json.Unmarshal(line, &head)
		dst := &kept
		switch {
		case (err != nil || head.Step == nil) && !bytes.HasSuffix(data, []byte("\n")) && bytes.HasSuffix(data, line):
			dst = &orphaned // the last line, cut short by a kill
		case err != nil || head.Step == nil:
			return nil, fmt.Errorf("%s line %d: not a metrics line (%v)", path, n, err)
		case *head.Step > keepUpTo:
			dst = &orphaned
		}
		dst.Write(line)
		dst.WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if orphaned.Len() > 0 {
		if err := appendFile(strings.TrimSuffix(path, ".jsonl")+".orphaned.jsonl", orphaned.Bytes()); err != nil {
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

// appendFile appends data to the file at path (created with fileMode if missing).
func appendFile(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, fileMode)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
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

// Progress reports how far a loop is. On a terminal it is a github.com/vbauerster/mpb bar that
// redraws in place with the count, rate, elapsed time, ETA and a status text; on other writers
// (a log file, a pipe) it prints a plain line at every tenth of the way, since a redrawn bar
// would fill a log with carriage returns and escape codes.
type Progress struct {
	w         io.Writer
	label     string
	total     int
	start     time.Time
	enabled   bool
	lastTenth int

	// terminal mode
	p      *mpb.Progress
	bar    *mpb.Bar
	status atomic.Pointer[string] // read by mpb's render goroutine
	last   time.Time
}

// NewProgress starts a progress report of total units on w (a bar when w is a terminal).
func NewProgress(w io.Writer, label string, total int, enabled bool) *Progress {
	tty := false
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	return newProgress(w, label, total, enabled, tty)
}

func newProgress(w io.Writer, label string, total int, enabled, tty bool) *Progress {
	now := time.Now()
	pr := &Progress{w: w, label: label, total: total, start: now, last: now, enabled: enabled}
	pr.status.Store(new(string))
	if !enabled || total <= 0 || !tty {
		return pr
	}
	// WithAutoRefresh: mpb refreshes by itself only on a terminal it detects; the tests draw
	// the bar into a buffer.
	pr.p = mpb.New(mpb.WithOutput(w), mpb.WithWidth(96), mpb.WithRefreshRate(150*time.Millisecond), mpb.WithAutoRefresh())
	pr.bar = pr.p.AddBar(int64(total),
		mpb.PrependDecorators(decor.Name(label+" "), decor.CountersNoUnit("%d/%d")),
		mpb.AppendDecorators(
			decor.EwmaSpeed(0, "%.3g/s", 30, decor.WCSyncSpaceR), // age 30: ewma.SimpleEWMA, no warm-up
			decor.Elapsed(decor.ET_STYLE_GO, decor.WCSyncSpace),
			decor.Name(" ETA "), decor.EwmaETA(decor.ET_STYLE_GO, 30),
			decor.Any(func(decor.Statistics) string { return " " + *pr.status.Load() }),
		))
	return pr
}

// Update reports done units with a short status text.
func (p *Progress) Update(done int, status string) {
	if !p.enabled || p.total <= 0 {
		return
	}
	now := time.Now()
	if p.bar != nil {
		p.status.Store(&status)
		p.bar.EwmaSetCurrent(int64(done), now.Sub(p.last))
		p.last = now
		return
	}
	if tenth := done * 10 / p.total; tenth > p.lastTenth || done == p.total {
		p.lastTenth = tenth
		fmt.Fprintf(p.w, "%s %d/%d [%s] %s\n", p.label, done, p.total, now.Sub(p.start).Round(time.Second), status)
	}
}

// Done ends the report: a bar left incomplete (an interrupted loop) is aborted where it stands
// and its line kept; Done waits until mpb has drawn the last frame. It may be called again.
func (p *Progress) Done() {
	if p.p == nil {
		return
	}
	if !p.bar.Completed() {
		p.bar.Abort(false)
	}
	p.p.Wait()
	p.p, p.bar = nil, nil
}
