package gemm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// TestEVEXMatchesGNUAs checks the hand-encoded VDPBF16PS of gemmbf16_amd64.s (Go's assembler
// has no mnemonic for it; internal/asmgen writes each as a LONG and a WORD after a comment
// naming the instruction) against GNU as: every distinct instruction of the file is assembled
// by as (AT&T operand order, which is Go's) and the bytes must be the committed ones. It skips
// without binutils.
func TestEVEXMatchesGNUAs(t *testing.T) {
	as, err := exec.LookPath("as")
	if err != nil {
		t.Skip("SKIP: no GNU as:", err)
	}
	objcopy, err := exec.LookPath("objcopy")
	if err != nil {
		t.Skip("SKIP: no objcopy:", err)
	}
	src, err := os.ReadFile("gemmbf16_amd64.s")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`// VDPBF16PS Z(\d+), Z(\d+), Z(\d+)\n\s*LONG\s+\$0x([0-9a-f]+)\n\s*WORD\s+\$0x([0-9a-f]+)\n`)
	var asm bytes.Buffer
	var want []byte
	seen := map[string]bool{}
	for _, m := range re.FindAllStringSubmatch(string(src), -1) {
		key := m[1] + "," + m[2] + "," + m[3]
		if seen[key] {
			continue
		}
		seen[key] = true
		l, _ := strconv.ParseUint(m[4], 16, 32)
		w, _ := strconv.ParseUint(m[5], 16, 16)
		want = binary.LittleEndian.AppendUint32(want, uint32(l))
		want = binary.LittleEndian.AppendUint16(want, uint16(w))
		fmt.Fprintf(&asm, "vdpbf16ps %%zmm%s, %%zmm%s, %%zmm%s\n", m[1], m[2], m[3])
	}
	if len(seen) < 24 {
		t.Fatalf("found %d distinct VDPBF16PS in gemmbf16_amd64.s, want at least 24", len(seen))
	}
	dir := t.TempDir()
	s, o, bin := filepath.Join(dir, "x.s"), filepath.Join(dir, "x.o"), filepath.Join(dir, "x.bin")
	if err := os.WriteFile(s, asm.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{{as, "--64", "-o", o, s}, {objcopy, "-O", "binary", "-j", ".text", o, bin}} {
		if out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", cmd, err, out)
		}
	}
	got, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		for i := 0; i+6 <= len(want) && i+6 <= len(got); i += 6 {
			if !bytes.Equal(got[i:i+6], want[i:i+6]) {
				t.Fatalf("instruction %d: GNU as encodes % x, the file has % x", i/6, got[i:i+6], want[i:i+6])
			}
		}
		t.Fatalf("GNU as gave %d bytes, the file has %d", len(got), len(want))
	}
	t.Logf("%d distinct VDPBF16PS match GNU as", len(seen))
}
