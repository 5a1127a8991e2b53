package kernels

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/mtrl-go/mtrl/internal/kernelbuild"
)

// TestGenerated is the drift check of the committed PTX (kernelbuild.Check), plus the check
// that the embedded copies are the files.
func TestGenerated(t *testing.T) {
	for _, mod := range Modules() {
		b, err := os.ReadFile(mod.Name + ".ptx")
		if err != nil || !bytes.Equal(b, []byte(mod.PTX)) {
			t.Errorf("embedded %s.ptx differs from the file", mod.Name)
		}
	}
	kernelbuild.Check(t, ".", "go generate ./cuda/kernels")
}

func TestModulesNamed(t *testing.T) {
	for _, m := range Modules() {
		if !strings.Contains(m.PTX, ".entry") {
			t.Errorf("%s.ptx has no kernel entry", m.Name)
		}
	}
}
