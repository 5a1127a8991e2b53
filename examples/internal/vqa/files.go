package vqa

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strings"
)

// lineLoc names line (1-based) of a JSONL file, or the file when line is 0.
func lineLoc(file string, line int) string {
	if line > 0 {
		return fmt.Sprintf("%s:%d", file, line)
	}
	return file
}

// rowLoc names row (1-based) of a Parquet file.
func rowLoc(file string, row int) string { return fmt.Sprintf("%s: row %d", file, row) }

// fileError is an error about a dataset file, at loc (see lineLoc, rowLoc),
// about field when not empty.
func fileError(loc, field, format string, args ...any) error {
	if field != "" {
		return fmt.Errorf("vqa: %s: field %q: %s", loc, field, fmt.Sprintf(format, args...))
	}
	return fmt.Errorf("vqa: %s: %s", loc, fmt.Sprintf(format, args...))
}

// jsonRecord is one line of a JSONL dataset. Pointers tell a missing field
// from an empty one.
type jsonRecord struct {
	ID       *uint64   `json:"id,omitempty"`
	Prompt   *string   `json:"prompt"`
	Answer   *string   `json:"answer"`
	Response *string   `json:"response"`
	Images   *[]string `json:"images"`
	Objects  *[]Object `json:"objects"`
}

// imageName is the PNG path of sample i of dataset name, relative to the dataset directory.
func imageName(name string, i int) string {
	return filepath.ToSlash(filepath.Join("images", fmt.Sprintf("%s_%06d.png", name, i)))
}

func encodePNG(img image.Image) ([]byte, error) {
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeAtomic writes data to path through a temporary file and a rename.
func writeAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return nil
}

func checkName(op, name string) error {
	if name == "" || strings.ContainsAny(name, `/\`) || name == "." || name == ".." {
		return fmt.Errorf("vqa: %s: invalid dataset name %q (want a plain file name without extension)", op, name)
	}
	return nil
}

// writeImages writes the PNG of every sample under dir/images/ and returns
// the relative paths.
func writeImages(dir, name string, samples []Sample) ([]string, error) {
	if err := os.MkdirAll(filepath.Join(dir, "images"), 0o755); err != nil {
		return nil, fmt.Errorf("vqa: %w", err)
	}
	paths := make([]string, len(samples))
	for i, s := range samples {
		if s.Image == nil {
			return nil, fmt.Errorf("vqa: sample %d (id %d) has no image", i, s.ID)
		}
		data, err := encodePNG(s.Image)
		if err != nil {
			return nil, fmt.Errorf("vqa: sample %d (id %d): encode PNG: %w", i, s.ID, err)
		}
		paths[i] = imageName(name, i)
		if err := writeAtomic(filepath.Join(dir, filepath.FromSlash(paths[i])), data); err != nil {
			return nil, fmt.Errorf("vqa: %w", err)
		}
	}
	return paths, nil
}

// WriteJSONL writes <dir>/<name>.jsonl, one JSON object per line with the
// fields "id", "prompt", "answer", "response", "images" (a list with the one
// PNG path, relative to dir) and "objects" (the scene, for VisualLabels), and
// the PNGs as <dir>/images/<name>_NNNNNN.png. dir is created if needed; files
// are written through a temporary file and a rename. It returns the path of
// the .jsonl file.
func WriteJSONL(dir, name string, samples []Sample) (string, error) {
	if err := checkName("WriteJSONL", name); err != nil {
		return "", err
	}
	paths, err := writeImages(dir, name, samples)
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for i, s := range samples {
		id, prompt, answer, response := s.ID, s.Prompt, s.Answer, s.Response
		imgs, objs := []string{paths[i]}, s.Objects
		if objs == nil {
			objs = []Object{}
		}
		rec := jsonRecord{ID: &id, Prompt: &prompt, Answer: &answer, Response: &response, Images: &imgs, Objects: &objs}
		if err := enc.Encode(rec); err != nil {
			return "", fmt.Errorf("vqa: sample %d: %w", i, err)
		}
	}
	path := filepath.Join(dir, name+".jsonl")
	if err := writeAtomic(path, buf.Bytes()); err != nil {
		return "", fmt.Errorf("vqa: %w", err)
	}
	return path, nil
}

// Load reads a dataset written by WriteJSONL (".jsonl") or WriteParquet
// (".parquet"), chosen by the extension of path, and returns its samples in
// file order with their images decoded. Image paths are relative to the
// directory of path. Errors name the file, the line (JSONL, 1-based) or row
// (Parquet, 1-based) and the field: a corrupt JSON line, a missing field, an
// answer that is not an option letter of the prompt, an unknown object word,
// a missing image file (naming its path), an undecodable PNG, or images of
// different sizes in one file.
func Load(path string) ([]Sample, error) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".jsonl":
		return loadJSONL(path)
	case ".parquet":
		return loadParquet(path)
	}
	return nil, fmt.Errorf("vqa: %s: unknown dataset extension %q (want .jsonl or .parquet)", path, filepath.Ext(path))
}

func loadJSONL(path string) ([]Sample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("vqa: %w", err)
	}
	defer f.Close()
	dir := filepath.Dir(path)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var out []Sample
	var size image.Point
	line := 0
	for sc.Scan() {
		line++
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			continue
		}
		var rec jsonRecord
		dec := json.NewDecoder(bytes.NewReader(text))
		if err := dec.Decode(&rec); err != nil {
			return nil, fileError(lineLoc(path, line), "", "corrupt JSON: %v", err)
		}
		if dec.More() {
			return nil, fileError(lineLoc(path, line), "", "corrupt JSON: trailing data after the object")
		}
		for _, m := range []struct {
			name    string
			missing bool
		}{{"prompt", rec.Prompt == nil}, {"answer", rec.Answer == nil}, {"response", rec.Response == nil},
			{"images", rec.Images == nil}, {"objects", rec.Objects == nil}} {
			if m.missing {
				return nil, fileError(lineLoc(path, line), m.name, "missing")
			}
		}
		id := uint64(line - 1)
		if rec.ID != nil {
			id = *rec.ID
		}
		s := Sample{ID: id, Prompt: *rec.Prompt, Answer: *rec.Answer, Response: *rec.Response, Objects: *rec.Objects}
		if len(*rec.Images) != 1 {
			return nil, fileError(lineLoc(path, line), "images", "want exactly 1 image path, got %d", len(*rec.Images))
		}
		s.Image, err = readImage(dir, (*rec.Images)[0])
		if err != nil {
			return nil, fileError(lineLoc(path, line), "images", "%v", err)
		}
		if err := checkSample(&s, &size); err != nil {
			return nil, fileError(lineLoc(path, line), err.field, "%s", err.msg)
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fileError(lineLoc(path, line+1), "", "read: %v", err)
	}
	return out, nil
}

// readImage decodes the PNG at rel (relative to dir unless absolute).
func readImage(dir, rel string) (image.Image, error) {
	if rel == "" {
		return nil, errors.New("empty image path")
	}
	p := filepath.FromSlash(rel)
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("missing image file %s", p)
		}
		return nil, fmt.Errorf("image file %s: %v", p, err)
	}
	img, err := decodePNG(data)
	if err != nil {
		return nil, fmt.Errorf("image file %s: %v", p, err)
	}
	return img, nil
}

func decodePNG(data []byte) (image.Image, error) {
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("undecodable PNG: %v", err)
	}
	return img, nil
}

type fieldErr struct{ field, msg string }

// checkSample validates the fields of a loaded sample; size is the image size
// of the file's first sample (zero before it).
func checkSample(s *Sample, size *image.Point) *fieldErr {
	if strings.TrimSpace(s.Prompt) == "" {
		return &fieldErr{"prompt", "empty"}
	}
	a := normLetter(strings.TrimSpace(s.Answer))
	if indexOf(letters, a) < 0 {
		return &fieldErr{"answer", fmt.Sprintf("unknown answer letter %q (want one of A..J)", s.Answer)}
	}
	if indexOf(strings.Fields(s.Prompt), a) < 0 {
		return &fieldErr{"answer", fmt.Sprintf("answer letter %q is not an option of the prompt", s.Answer)}
	}
	s.Answer = a
	for j, o := range s.Objects {
		if indexOf(shapes, o.Shape) < 0 || indexOf(colours, o.Colour) < 0 || indexOf(positions, o.Position) < 0 {
			return &fieldErr{"objects", fmt.Sprintf("object %d %+v has an unknown shape, colour or position", j, o)}
		}
	}
	b := s.Image.Bounds().Size()
	if b.X != b.Y || b.X == 0 {
		return &fieldErr{"images", fmt.Sprintf("image is %dx%d, want a non-empty square", b.X, b.Y)}
	}
	if *size == (image.Point{}) {
		*size = b
	} else if b != *size {
		return &fieldErr{"images", fmt.Sprintf("image is %dx%d but earlier images are %dx%d", b.X, b.Y, size.X, size.Y)}
	}
	return nil
}
