package mtrl_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// pendingLinks are link targets that another branch in flight adds; they may be missing until it
// is merged. Delete an entry once its target exists.
var pendingLinks = map[string]bool{}

var (
	mdLink    = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)\)`)
	fence     = regexp.MustCompile("(?ms)^\\s*```.*?^\\s*```[^\\n]*$")
	codeSpan  = regexp.MustCompile("`[^`\n]*`")
	goDocLink = regexp.MustCompile(`\bdocs/[A-Za-z0-9_.-]+\.md(#[A-Za-z0-9_-]+)?`)
)

// markdownFiles returns README.md and every .md file under docs/.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md"}
	err := filepath.WalkDir("docs", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// htmlAnchor is an explicit anchor in Markdown text: <a id="name"></a>.
var htmlAnchor = regexp.MustCompile(`<a id="([^"]+)">`)

// headingAnchors returns the anchors GitHub gives the headings of a Markdown file: lower case,
// punctuation other than '-' and '_' dropped, spaces turned into '-', repeats numbered -1, -2, …;
// and the explicit <a id> anchors.
func headingAnchors(text string) map[string]bool {
	anchors, seen := map[string]bool{}, map[string]int{}
	for _, m := range htmlAnchor.FindAllStringSubmatch(fence.ReplaceAllString(text, ""), -1) {
		anchors[m[1]] = true
	}
	for _, line := range strings.Split(fence.ReplaceAllString(text, ""), "\n") {
		title, ok := strings.CutPrefix(line, "#")
		if !ok {
			continue
		}
		title = strings.TrimSpace(strings.TrimLeft(title, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			anchors[a+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors
}

// checkTarget reports whether target (a path relative to dir, with an optional #anchor) names an
// existing file or directory and, for a Markdown file, an existing heading.
func checkTarget(t *testing.T, from, dir, target string) {
	t.Helper()
	path, anchor, _ := strings.Cut(target, "#")
	file := from
	if path != "" {
		file = filepath.Join(dir, path)
		if pendingLinks[filepath.ToSlash(file)] {
			return
		}
		if _, err := os.Stat(file); err != nil {
			t.Errorf("%s: link %q: %v", from, target, err)
			return
		}
	}
	if anchor == "" || !strings.HasSuffix(file, ".md") {
		return
	}
	text, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !headingAnchors(string(text))[anchor] {
		t.Errorf("%s: link %q: %s has no heading with anchor #%s", from, target, file, anchor)
	}
}

// TestDocLinks checks that every relative link in README.md and docs/ points at a file of the
// repository (and, with #anchor, at a heading of that file), and that every docs/*.md a Go
// comment names exists.
func TestDocLinks(t *testing.T) {
	for _, f := range markdownFiles(t) {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		prose := codeSpan.ReplaceAllString(fence.ReplaceAllString(string(text), ""), "")
		for _, m := range mdLink.FindAllStringSubmatch(prose, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checkTarget(t, f, filepath.Dir(f), target)
		}
	}
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != "." && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir // .git, .ci
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, target := range goDocLink.FindAllString(string(src), -1) {
			checkTarget(t, p, ".", target)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestReadmeSnippetIsExample keeps the README's Go code compiled: its lines, leading white space
// aside, must be lines of example_test.go in the same order.
func TestReadmeSnippetIsExample(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?ms)^```go\n(.*?)^```").FindAllStringSubmatch(string(readme), -1)
	if len(blocks) == 0 {
		t.Fatal("README.md has no ```go block")
	}
	// A block's first line "// from FILE" names the file it is taken from; else example_test.go.
	from := regexp.MustCompile(`^// from (\S+_test\.go)\n`)
	for _, b := range blocks {
		file, body := "example_test.go", b[1]
		if m := from.FindStringSubmatch(body); m != nil {
			file, body = m[1], body[len(m[0]):]
		}
		example, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(example), "\n")
		next := 0
		for _, want := range strings.Split(body, "\n") {
			want = strings.TrimSpace(want)
			if want == "" {
				continue
			}
			for next < len(lines) && strings.TrimSpace(lines[next]) != want {
				next++
			}
			if next == len(lines) {
				t.Errorf("README.md's Go line %q is not a line of %s (after the lines before it)", want, file)
				break
			}
			next++
		}
	}
}
