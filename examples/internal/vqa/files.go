package vqa

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	_ "image/gif" // registered for image.Decode
	_ "image/jpeg"
	"image/png"
	"os"
	"path/filepath"
	"strings"

	"github.com/mtrl-go/mtrl/examples/internal/atomicfile"
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

// imageName is the PNG file of sample i of dataset name, relative to the images directory
// (<dir>/images, the seeds' image_dir).
func imageName(name string, i int) string { return fmt.Sprintf("%s_%06d.png", name, i) }

func encodePNG(img image.Image) ([]byte, error) {
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeAtomic writes data to path durably (fsync of the file and its directory) through
// atomicfile, so an interrupted generator never leaves a truncated image or data file.
func writeAtomic(path string, data []byte) error { return atomicfile.WriteFile(path, data, 0o644) }

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
		if err := writeAtomic(filepath.Join(dir, "images", paths[i]), data); err != nil {
			return nil, fmt.Errorf("vqa: %w", err)
		}
	}
	return paths, nil
}

// WriteJSONL writes <dir>/<name>.jsonl, one JSON object per line with the
// fields "id", "prompt", "answer", "response", "images" (a list with the one
// PNG path, relative to dir/images: the seeds' image_dir) and "objects" (the scene, for VisualLabels), and
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

// LoadOptions names the columns of a dataset (the seeds' *_key options) and where its image
// paths are relative to.
type LoadOptions struct {
	PromptKey, AnswerKey, ImageKey string
	// VideoKey is the column of a row's videos (empty: "videos"). The model reads one image per
	// prompt, so a row that lists videos is an error unless IgnoreVideos is set; then the
	// videos are skipped and counted in Sample.IgnoredVideos.
	VideoKey     string
	IgnoreVideos bool
	// ImageDir is the directory image paths are relative to; empty: the data file's directory,
	// then its images/ subdirectory.
	ImageDir string
}

// DefaultLoadOptions are the seeds' column names: prompt, answer, images, videos.
func DefaultLoadOptions() LoadOptions {
	return LoadOptions{PromptKey: "prompt", AnswerKey: "answer", ImageKey: "images", VideoKey: "videos"}
}

func (o LoadOptions) videoKey() string {
	if o.VideoKey == "" {
		return "videos"
	}
	return o.VideoKey
}

// checkVideos is the rule for a row that lists n videos: an error naming the column and the
// way out, or the count kept in s.
func checkVideos(s *Sample, n int, o LoadOptions) *fieldErr {
	if n == 0 {
		return nil
	}
	if !o.IgnoreVideos {
		return &fieldErr{o.videoKey(), fmt.Sprintf("the row lists %d video(s), and this model reads one image per prompt and no video: remove them from the data, or set dataset.ignore_videos=true (LoadOptions.IgnoreVideos) to train on the image alone", n)}
	}
	s.IgnoredVideos = n
	return nil
}

// Load reads a dataset with the default options (see LoadWith).
func Load(path string) ([]Sample, error) { return LoadWith(path, DefaultLoadOptions()) }

// LoadWith reads a JSONL (".jsonl") or Parquet (".parquet") dataset, chosen by the extension
// of path, and returns its samples in file order with their images decoded (PNG, JPEG or GIF,
// any size). A row needs a prompt, an answer (an option letter A..J) and one image (a path, or
// in Parquet a {bytes, path} struct); the task's own fields response (the reference chain, for
// the warm start) and objects (the scene, for the visual-token diagnostics) are optional: nil
// Objects and an empty Response mean absent. Errors name the file, the line (JSONL, 1-based) or
// row (Parquet, 1-based) and the field.
func LoadWith(path string, o LoadOptions) ([]Sample, error) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".jsonl":
		return loadJSONL(path, o)
	case ".parquet":
		return loadParquet(path, o)
	}
	return nil, fmt.Errorf("vqa: %s: unknown dataset extension %q (want .jsonl or .parquet)", path, filepath.Ext(path))
}

func loadJSONL(path string, o LoadOptions) ([]Sample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("vqa: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var out []Sample
	line := 0
	for sc.Scan() {
		line++
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			continue
		}
		loc := lineLoc(path, line)
		var rec map[string]json.RawMessage
		dec := json.NewDecoder(bytes.NewReader(text))
		if err := dec.Decode(&rec); err != nil {
			return nil, fileError(loc, "", "corrupt JSON: %v", err)
		}
		if dec.More() {
			return nil, fileError(loc, "", "corrupt JSON: trailing data after the object")
		}
		s := Sample{ID: uint64(line - 1)}
		var images []string
		for _, fd := range []struct {
			key      string
			dst      any
			required bool
		}{{o.PromptKey, &s.Prompt, true}, {o.AnswerKey, &s.Answer, true}, {o.ImageKey, &images, true},
			{"response", &s.Response, false}, {"objects", &s.Objects, false}, {"id", &s.ID, false}} {
			raw, ok := rec[fd.key]
			if !ok || string(raw) == "null" {
				if fd.required {
					return nil, fileError(loc, fd.key, "missing")
				}
				continue
			}
			if fd.key == o.ImageKey {
				var one string // a single path is accepted as well as a list
				if json.Unmarshal(raw, &one) == nil {
					images = []string{one}
					continue
				}
			}
			if err := json.Unmarshal(raw, fd.dst); err != nil {
				return nil, fileError(loc, fd.key, "corrupt JSON: %v", err)
			}
		}
		if raw, ok := rec[o.videoKey()]; ok && string(raw) != "null" {
			var videos []json.RawMessage
			var one string // a single path, as for images
			if json.Unmarshal(raw, &one) == nil {
				videos = []json.RawMessage{raw}
			} else if err := json.Unmarshal(raw, &videos); err != nil {
				return nil, fileError(loc, o.videoKey(), "corrupt JSON: want a list of videos: %v", err)
			}
			if ferr := checkVideos(&s, len(videos), o); ferr != nil {
				return nil, fileError(loc, ferr.field, "%s", ferr.msg)
			}
		}
		if fd := rec["objects"]; fd != nil && string(fd) != "null" && s.Objects == nil {
			s.Objects = []Object{} // present and empty: a scene without objects
		}
		if len(images) != 1 {
			return nil, fileError(loc, o.ImageKey, "want exactly 1 image path, got %d (the model reads one image per prompt)", len(images))
		}
		s.Image, err = readImage(imageDirs(path, o), images[0])
		if err != nil {
			return nil, fileError(loc, o.ImageKey, "%v", err)
		}
		if err := checkSample(&s, o); err != nil {
			return nil, fileError(loc, err.field, "%s", err.msg)
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fileError(lineLoc(path, line+1), "", "read: %v", err)
	}
	return out, nil
}

// imageDirs are the directories a relative image path is looked up in, in order.
func imageDirs(dataPath string, o LoadOptions) []string {
	if o.ImageDir != "" {
		return []string{o.ImageDir}
	}
	d := filepath.Dir(dataPath)
	return []string{d, filepath.Join(d, "images")}
}

// readImage decodes the image at rel: absolute, or relative to the first of dirs holding it.
func readImage(dirs []string, rel string) (image.Image, error) {
	if rel == "" {
		return nil, errors.New("empty image path")
	}
	p := filepath.FromSlash(rel)
	var tried []string
	if filepath.IsAbs(p) {
		tried = []string{p}
	} else {
		for _, d := range dirs {
			tried = append(tried, filepath.Join(d, p))
		}
	}
	for _, q := range tried {
		data, err := os.ReadFile(q)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("image file %s: %v", q, err)
		}
		img, err := decodeImage(data)
		if err != nil {
			return nil, fmt.Errorf("image file %s: %v", q, err)
		}
		return img, nil
	}
	return nil, fmt.Errorf("missing image file %s", strings.Join(tried, " or "))
}

// decodeImage decodes PNG, JPEG or GIF bytes.
func decodeImage(data []byte) (image.Image, error) {
	img, _, err := image.Decode(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("undecodable image (want PNG, JPEG or GIF): %v", err)
	}
	if b := img.Bounds(); b.Empty() {
		return nil, errors.New("empty image")
	}
	return img, nil
}

type fieldErr struct{ field, msg string }

// checkSample validates the fields of a loaded sample.
func checkSample(s *Sample, o LoadOptions) *fieldErr {
	if strings.TrimSpace(s.Prompt) == "" {
		return &fieldErr{o.PromptKey, "empty"}
	}
	a := normLetter(strings.Trim(strings.TrimSpace(s.Answer), "()."))
	if indexOf(letters, a) < 0 {
		return &fieldErr{o.AnswerKey, fmt.Sprintf("unknown answer letter %q (want one of A..J: the reward scores multiple-choice answers)", s.Answer)}
	}
	isOption := false
	for _, w := range strings.Fields(s.Prompt) {
		if normLetter(strings.Trim(w, "().:")) == a {
			isOption = true
		}
	}
	if !isOption {
		return &fieldErr{o.AnswerKey, fmt.Sprintf("answer letter %q is not an option of the prompt", s.Answer)}
	}
	s.Answer = a
	for j, ob := range s.Objects {
		if indexOf(shapes, ob.Shape) < 0 || indexOf(colours, ob.Colour) < 0 || indexOf(positions, ob.Position) < 0 {
			return &fieldErr{"objects", fmt.Sprintf("object %d %+v has an unknown shape, colour or position", j, ob)}
		}
	}
	return nil
}
