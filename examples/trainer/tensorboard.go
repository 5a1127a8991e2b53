package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"sort"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// TensorBoard event files are TFRecord files of tensorflow.Event protobufs. The Go module proxy
// serves no maintained TensorBoard writer (the ones there are unmaintained forks of TensorFlow's
// generated code), and generating Go code from TensorFlow's .proto files would pull its whole
// proto tree for three messages, so the few fields are encoded with protowire directly:
//
//	Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//	Summary { repeated Value value = 1; }
//	Value   { string tag = 1; float simple_value = 2; }
//
// Each record is: uint64 length, uint32 masked CRC32C of the length bytes, the data, uint32
// masked CRC32C of the data (little-endian).

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// maskedCRC is TFRecord's masked CRC32C.
func maskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return (c>>15 | c<<17) + 0xa282ead8
}

// appendRecord appends one TFRecord holding data.
func appendRecord(dst, data []byte) []byte {
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(data)))
	dst = append(dst, n[:]...)
	dst = binary.LittleEndian.AppendUint32(dst, maskedCRC(n[:]))
	dst = append(dst, data...)
	return binary.LittleEndian.AppendUint32(dst, maskedCRC(data))
}

// eventBytes encodes an Event with the given scalars (sorted by tag), or the file_version event
// when version is not empty.
func eventBytes(wall float64, step int64, version string, scalars map[string]float64) []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, math.Float64bits(wall))
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(step))
	if version != "" {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		return protowire.AppendString(b, version)
	}
	tags := make([]string, 0, len(scalars))
	for k := range scalars {
		tags = append(tags, k)
	}
	sort.Strings(tags)
	var sum []byte
	for _, k := range tags {
		var v []byte
		v = protowire.AppendTag(v, 1, protowire.BytesType)
		v = protowire.AppendString(v, k)
		v = protowire.AppendTag(v, 2, protowire.Fixed32Type)
		v = protowire.AppendFixed32(v, math.Float32bits(float32(scalars[k])))
		sum = protowire.AppendTag(sum, 1, protowire.BytesType)
		sum = protowire.AppendBytes(sum, v)
	}
	b = protowire.AppendTag(b, 5, protowire.BytesType)
	return protowire.AppendBytes(b, sum)
}

// TensorBoardLog writes scalars to dir/events.out.tfevents.<time>.<host>, one file per process
// (a resumed run adds a file; TensorBoard merges the files of a directory).
type TensorBoardLog struct {
	f *os.File
}

// OpenTensorBoard creates a new event file in dir and writes its file_version record.
func OpenTensorBoard(dir string) (*TensorBoardLog, error) {
	host, _ := os.Hostname()
	now := time.Now()
	var f *os.File
	var err error
	for n := 0; ; n++ { // TensorFlow's name: time, host, pid, and a counter against collisions
		name := fmt.Sprintf("events.out.tfevents.%d.%s.%d.%d", now.Unix(), host, os.Getpid(), n)
		f, err = os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, fileMode)
		if !errors.Is(err, os.ErrExist) {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	l := &TensorBoardLog{f: f}
	if _, err := f.Write(appendRecord(nil, eventBytes(unixSeconds(now), 0, "brain.Event:2", nil))); err != nil {
		f.Close()
		return nil, err
	}
	return l, nil
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// Log writes one event with the finite metrics of step as simple values.
func (l *TensorBoardLog) Log(step int, m Metrics) error {
	fin := Metrics{}
	for k, v := range m {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			fin[k] = v
		}
	}
	if _, err := l.f.Write(appendRecord(nil, eventBytes(unixSeconds(time.Now()), int64(step), "", fin))); err != nil {
		return err
	}
	return l.f.Sync()
}

// Close closes the file.
func (l *TensorBoardLog) Close() error { return l.f.Close() }

// readEvents parses an event file back (for the tests and -compare): the scalars of every event
// by step, checking both CRCs of every record.
func readEvents(data []byte) (version string, steps []int64, scalars []map[string]float32, err error) {
	for off := 0; off < len(data); {
		if len(data)-off < 12 {
			return "", nil, nil, fmt.Errorf("tfrecord at %d: truncated header", off)
		}
		n := binary.LittleEndian.Uint64(data[off:])
		if maskedCRC(data[off:off+8]) != binary.LittleEndian.Uint32(data[off+8:]) {
			return "", nil, nil, fmt.Errorf("tfrecord at %d: length CRC mismatch", off)
		}
		if uint64(len(data)-off-16) < n {
			return "", nil, nil, fmt.Errorf("tfrecord at %d: truncated data", off)
		}
		rec := data[off+12 : off+12+int(n)]
		if maskedCRC(rec) != binary.LittleEndian.Uint32(data[off+12+int(n):]) {
			return "", nil, nil, fmt.Errorf("tfrecord at %d: data CRC mismatch", off)
		}
		off += 16 + int(n)
		var step int64
		sc := map[string]float32{}
		isVersion := false
		for b := rec; len(b) > 0; {
			num, typ, k := protowire.ConsumeTag(b)
			if k < 0 {
				return "", nil, nil, protowire.ParseError(k)
			}
			b = b[k:]
			switch {
			case num == 2 && typ == protowire.VarintType:
				v, k := protowire.ConsumeVarint(b)
				step, b = int64(v), b[k:]
			case num == 3 && typ == protowire.BytesType:
				v, k := protowire.ConsumeString(b)
				version, isVersion, b = v, true, b[k:]
			case num == 5 && typ == protowire.BytesType:
				sum, k := protowire.ConsumeBytes(b)
				b = b[k:]
				for len(sum) > 0 {
					_, _, k := protowire.ConsumeTag(sum)
					val, k2 := protowire.ConsumeBytes(sum[k:])
					sum = sum[k+k2:]
					var tag string
					var x float32
					for len(val) > 0 {
						vn, vt, k := protowire.ConsumeTag(val)
						val = val[k:]
						switch {
						case vn == 1 && vt == protowire.BytesType:
							s, k := protowire.ConsumeString(val)
							tag, val = s, val[k:]
						case vn == 2 && vt == protowire.Fixed32Type:
							u, k := protowire.ConsumeFixed32(val)
							x, val = math.Float32frombits(u), val[k:]
						default:
							k := protowire.ConsumeFieldValue(vn, vt, val)
							if k < 0 {
								return "", nil, nil, protowire.ParseError(k)
							}
							val = val[k:]
						}
					}
					sc[tag] = x
				}
			default:
				k := protowire.ConsumeFieldValue(num, typ, b)
				if k < 0 {
					return "", nil, nil, protowire.ParseError(k)
				}
				b = b[k:]
			}
		}
		if !isVersion {
			steps, scalars = append(steps, step), append(scalars, sc)
		}
	}
	return version, steps, scalars, nil
}
