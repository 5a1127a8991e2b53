package main

import (
	"bytes"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// writeRollouts appends a "## step N" section with a few rollouts (the first response of
// different prompts) to rollouts.md, and their images under rollouts/.
func writeRollouts(runDir string, step, n, count int, rs []Rollout) error {
	path := filepath.Join(runDir, "rollouts.md")
	var b bytes.Buffer
	if st, err := os.Stat(path); err != nil || st.Size() == 0 {
		b.WriteString("# Sample rollouts\n\n")
	}
	// A section starts at its header line (truncateRollouts cuts there on a resume).
	fmt.Fprintf(&b, "## step %d\n\n", step)
	fmt.Fprintf(&b, "Bold tokens: selected by the perception mask (top-p by image dependency); ᵛ: labelled visual by the task.\n\n")
	imgDir := filepath.Join(runDir, "rollouts")
	if err := os.MkdirAll(imgDir, dirMode); err != nil {
		return err
	}
	for k := 0; k < count && k*n < len(rs); k++ {
		r := rs[k*n]
		name := fmt.Sprintf("step%06d_%d.png", step, k)
		var img bytes.Buffer
		if err := png.Encode(&img, r.Sample.Image); err != nil {
			return err
		}
		if err := WriteFileAtomic(filepath.Join(imgDir, name), img.Bytes()); err != nil {
			return err
		}
		fmt.Fprintf(&b, "### sample %d (id %d)\n\n![image](rollouts/%s)\n\n", k, r.Sample.ID, name)
		fmt.Fprintf(&b, "- prompt: %s — correct: **%s**\n", mdEscape(r.Sample.Prompt), r.Sample.Answer)
		var toks []string
		for j, w := range r.Tokens {
			s := mdEscape(w)
			if r.Perception[j] {
				s = "**" + s + "**"
			}
			if r.Visual[j] {
				s += "ᵛ"
			}
			toks = append(toks, s)
		}
		fmt.Fprintf(&b, "- response: %s\n", strings.Join(toks, " "))
		fmt.Fprintf(&b, "- reward %.2f (accuracy %.0f, format %.0f), advantage %+.3f, shaping factor %.3f\n",
			r.Reward.Overall, r.Reward.Accuracy, r.Reward.Format, r.Advantage, r.ScaleFactor)
		var sc []string
		for _, s := range r.Score {
			sc = append(sc, strconv.FormatFloat(float64(s), 'f', 3, 32))
		}
		fmt.Fprintf(&b, "- perception score per token: %s\n\n", strings.Join(sc, " "))
	}
	return appendFile(path, b.Bytes())
}

var stepHeader = regexp.MustCompile(`(?m)^## step (\d+)$`)

// truncateRollouts drops the sections of steps after keep from the step log at path
// (rollouts.md, attention_diagnostics.md): a resumed run writes them again, identical.
func truncateRollouts(path string, keep int) error {
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, m := range stepHeader.FindAllSubmatchIndex(data, -1) {
		if s, _ := strconv.Atoi(string(data[m[2]:m[3]])); s > keep {
			// Everything before the header, blank lines included: the section written again
			// lands where it was.
			return WriteFileAtomic(path, data[:m[0]])
		}
	}
	return nil
}

func mdEscape(s string) string {
	r := strings.NewReplacer("<", "&lt;", ">", "&gt;", "*", `\*`, "_", `\_`, "|", `\|`)
	return r.Replace(s)
}
