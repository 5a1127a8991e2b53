package vqa

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	"github.com/parquet-go/parquet-go"
)

// parquetImage is one element of the "images" column, in the layout of
// Hugging Face image features (as read by verl/EasyR1): the encoded bytes
// and/or a path.
type parquetImage struct {
	Bytes []byte `parquet:"bytes"`
	Path  string `parquet:"path"`
}

// parquetRewardModel is verl's "reward_model" column.
type parquetRewardModel struct {
	Style       string `parquet:"style"`
	GroundTruth string `parquet:"ground_truth"`
}

// parquetRow is one row of a Parquet dataset.
type parquetRow struct {
	DataSource  string             `parquet:"data_source"`
	ID          uint64             `parquet:"id"`
	Prompt      string             `parquet:"prompt"`
	Answer      string             `parquet:"answer"`
	Response    string             `parquet:"response"`
	Images      []parquetImage     `parquet:"images,list"`
	Objects     []Object           `parquet:"objects,list"`
	RewardModel parquetRewardModel `parquet:"reward_model"`
}

// DataSource is the value of the "data_source" column of Parquet datasets.
const DataSource = "mtrl-vqa"

// WriteParquet writes <dir>/<name>.parquet with one row per sample and the
// verl-style columns data_source ("mtrl-vqa"), id, prompt, answer (the
// letter), response (the reference chain), images (a list with one
// {bytes, path} struct: the PNG bytes embedded, so the file is
// self-contained, and the path the PNG would have next to it), objects (the
// scene: list of {shape, colour, position}) and reward_model {style "rule",
// ground_truth (the letter)}. dir is created if needed; the file is written
// through a temporary file and a rename. It returns the path of the file.
func WriteParquet(dir, name string, samples []Sample) (string, error) {
	if err := checkName("WriteParquet", name); err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("vqa: %w", err)
	}
	rows := make([]parquetRow, len(samples))
	for i, s := range samples {
		if s.Image == nil {
			return "", fmt.Errorf("vqa: sample %d (id %d) has no image", i, s.ID)
		}
		data, err := encodePNG(s.Image)
		if err != nil {
			return "", fmt.Errorf("vqa: sample %d (id %d): encode PNG: %w", i, s.ID, err)
		}
		objs := s.Objects
		if objs == nil {
			objs = []Object{}
		}
		rows[i] = parquetRow{
			DataSource: DataSource, ID: s.ID, Prompt: s.Prompt, Answer: s.Answer, Response: s.Response,
			Images:      []parquetImage{{Bytes: data, Path: imageName(name, i)}},
			Objects:     objs,
			RewardModel: parquetRewardModel{Style: "rule", GroundTruth: s.Answer},
		}
	}
	var buf bytes.Buffer
	w := parquet.NewGenericWriter[parquetRow](&buf)
	if _, err := w.Write(rows); err != nil {
		return "", fmt.Errorf("vqa: WriteParquet: %w", err)
	}
	if err := w.Close(); err != nil {
		return "", fmt.Errorf("vqa: WriteParquet: %w", err)
	}
	path := filepath.Join(dir, name+".parquet")
	if err := writeAtomic(path, buf.Bytes()); err != nil {
		return "", fmt.Errorf("vqa: %w", err)
	}
	return path, nil
}

func loadParquet(path string, o LoadOptions) (out []Sample, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("vqa: %w", err)
	}
	// parquet-go may panic on some malformed files; report those as corrupt.
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fileError(path, "", "corrupt Parquet file: %v", r)
		}
	}()
	f, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return nil, fileError(path, "", "corrupt Parquet file: %v", err)
	}
	have := map[string]bool{}
	for _, fl := range f.Schema().Fields() {
		have[fl.Name()] = true
	}
	for _, c := range []string{o.PromptKey, o.AnswerKey, o.ImageKey} {
		if !have[c] {
			return nil, fileError(path, c, "missing column")
		}
	}
	// The row type is built at run time: its parquet tags are the configured column names, and
	// it has the optional columns only when the file does.
	fields := []reflect.StructField{
		{Name: "Prompt", Type: reflect.TypeOf(""), Tag: reflect.StructTag(`parquet:"` + o.PromptKey + `"`)},
		{Name: "Answer", Type: reflect.TypeOf(""), Tag: reflect.StructTag(`parquet:"` + o.AnswerKey + `"`)},
		{Name: "Images", Type: reflect.TypeOf([]parquetImage{}), Tag: reflect.StructTag(`parquet:"` + o.ImageKey + `,list"`)},
	}
	optional := []reflect.StructField{
		{Name: "ID", Type: reflect.TypeOf(uint64(0)), Tag: `parquet:"id"`},
		{Name: "Response", Type: reflect.TypeOf(""), Tag: `parquet:"response"`},
		{Name: "Objects", Type: reflect.TypeOf([]Object{}), Tag: `parquet:"objects,list"`},
	}
	for _, fl := range optional {
		name, _, _ := strings.Cut(fl.Tag.Get("parquet"), ",")
		if have[name] {
			fields = append(fields, fl)
		}
	}
	videos, err := parquetListLengths(f, o.videoKey())
	if err != nil {
		return nil, fileError(path, o.videoKey(), "corrupt Parquet column: %v", err)
	}
	rowType := reflect.StructOf(fields)
	r := parquet.NewReader(f, parquet.SchemaOf(reflect.New(rowType).Interface()))
	defer r.Close()
	dirs := imageDirs(path, o)
	for row := 1; ; row++ {
		rv := reflect.New(rowType)
		rerr := r.Read(rv.Interface())
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return nil, fileError(rowLoc(path, row), "", "corrupt Parquet row: %v", rerr)
		}
		v := rv.Elem()
		s := Sample{ID: uint64(row - 1), Prompt: v.FieldByName("Prompt").String(), Answer: v.FieldByName("Answer").String()}
		if fv := v.FieldByName("ID"); fv.IsValid() {
			s.ID = fv.Uint()
		}
		if fv := v.FieldByName("Response"); fv.IsValid() {
			s.Response = fv.String()
		}
		if fv := v.FieldByName("Objects"); fv.IsValid() {
			s.Objects = append([]Object{}, fv.Interface().([]Object)...)
		}
		images := v.FieldByName("Images").Interface().([]parquetImage)
		if len(images) != 1 {
			return nil, fileError(rowLoc(path, row), o.ImageKey, "want exactly 1 image, got %d (the model reads one image per prompt)", len(images))
		}
		im := images[0]
		if len(im.Bytes) > 0 {
			s.Image, err = decodeImage(im.Bytes)
		} else {
			s.Image, err = readImage(dirs, im.Path)
		}
		if err != nil {
			return nil, fileError(rowLoc(path, row), o.ImageKey, "%v", err)
		}
		if row-1 < len(videos) {
			if ferr := checkVideos(&s, videos[row-1], o); ferr != nil {
				return nil, fileError(rowLoc(path, row), ferr.field, "%s", ferr.msg)
			}
		}
		if ferr := checkSample(&s, o); ferr != nil {
			return nil, fileError(rowLoc(path, row), ferr.field, "%s", ferr.msg)
		}
		out = append(out, s)
	}
	return out, nil
}

// parquetListLengths returns, per row, the number of elements of column key (a list of any
// element type, or a single optional value counted as one), read from its first leaf column
// whatever the element type; nil when the file has no such column.
func parquetListLengths(f *parquet.File, key string) ([]int, error) {
	var leafPath []string
	for _, p := range f.Schema().Columns() {
		if len(p) > 0 && p[0] == key {
			leafPath = p
			break
		}
	}
	if leafPath == nil {
		return nil, nil
	}
	leaf, _ := f.Schema().Lookup(leafPath...)
	// An element exists at the definition level of the first repeated node on the path (each
	// optional or repeated node on the way adds one); without one, a present value counts.
	exists, level := leaf.MaxDefinitionLevel, 0
	var node parquet.Node = f.Schema()
	for _, name := range leafPath {
		var next parquet.Node
		for _, fd := range node.Fields() {
			if fd.Name() == name {
				next = fd
			}
		}
		if next == nil {
			return nil, fmt.Errorf("no node %q on the path %v", name, leafPath)
		}
		node = next
		if node.Optional() || node.Repeated() {
			level++
		}
		if node.Repeated() {
			exists = level
			break
		}
	}
	var counts []int
	buf := make([]parquet.Value, 256)
	for _, rg := range f.RowGroups() {
		pages := rg.ColumnChunks()[leaf.ColumnIndex].Pages()
		for {
			p, err := pages.ReadPage()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				pages.Close()
				return nil, err
			}
			vr := p.Values()
			for {
				n, err := vr.ReadValues(buf)
				if n == 0 && err == nil {
					err = errors.New("a page stops yielding values")
				}
				for _, v := range buf[:n] {
					if v.RepetitionLevel() == 0 {
						counts = append(counts, 0)
					}
					if v.DefinitionLevel() >= exists && len(counts) > 0 {
						counts[len(counts)-1]++
					}
				}
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					parquet.Release(p)
					pages.Close()
					return nil, err
				}
			}
			parquet.Release(p)
		}
		if err := pages.Close(); err != nil {
			return nil, err
		}
	}
	return counts, nil
}
