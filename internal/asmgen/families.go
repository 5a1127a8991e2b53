package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// family is one generated assembly file: the kernels of one op family in one package.
type family struct {
	name string // -family value
	dir  string // package directory, relative to the repository root
	pkg  string // package name
	file string // base name of the .s and _stub_amd64.go files
	gen  func()
}

var families = []family{
	{"logprob", "tensor", "tensor", "logprob", logprobFamily},
	{"penalty", "divergence", "divergence", "penalty", penaltyFamily},
	{"masked", "internal/hostops", "hostops", "masked", maskedFamily},
	{"policy", "ppo", "ppo", "policy", policyFamily},
	{"gemm", "internal/gemm", "gemm", "gemm", gemmFamily},
	{"attention", "tensor", "tensor", "attention", attentionFamily},
	{"gemmbf16", "internal/gemm", "gemm", "gemmbf16", gemmbf16Family},
	{"bf16conv", "tensor", "tensor", "bf16conv", bf16convFamily},
	{"activation", "tensor", "tensor", "activation", activationFamily},
	{"rownorm", "tensor", "tensor", "rownorm", rownormFamily},
	{"layernorm", "tensor", "tensor", "layernorm", layernormFamily},
}

var (
	familyFlag = flag.String("family", "logprob", "which kernels to generate: logprob, penalty, masked, policy, gemm, gemmbf16, attention, bf16conv, activation, rownorm or layernorm (with -out, -stubs, -pkg)")
	allFlag    = flag.String("all", "", "regenerate every family's files under this repository root (runs itself once per family)")
)

func main() {
	flag.Parse()
	if *allFlag != "" {
		self, err := os.Executable()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		for _, f := range families {
			dir := filepath.Join(*allFlag, f.dir)
			cmd := exec.Command(self, "-family", f.name,
				"-out", filepath.Join(dir, f.file+"_amd64.s"),
				"-stubs", filepath.Join(dir, f.file+"_stub_amd64.go"),
				"-pkg", f.pkg)
			cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
			if err := cmd.Run(); err != nil {
				fmt.Fprintf(os.Stderr, "family %s: %v\n", f.name, err)
				os.Exit(1)
			}
		}
		return
	}
	for _, f := range families {
		if f.name == *familyFlag {
			ConstraintExpr("!noasm")
			f.gen()
			Generate()
			return
		}
	}
	fmt.Fprintf(os.Stderr, "unknown family %q\n", *familyFlag)
	os.Exit(2)
}

// Extra constants of the per-token families, in a second table (xconst) whose entries are 16
// replicated words (one zmm), so AVX-512 code can use them as memory operands too. The
// log-prob family does not emit it, which keeps logprob_amd64.s unchanged.
const (
	xBase = 100 + iota
	xSign // int32 0x80000000
	xHalf
	xZero
	xM20  // -20
	xP20  // +20
	xM10  // -10
	xP10  // +10
	xWide // xWide+i is a 64-byte copy of lpconst entry i
	xEnd  = xWide + nConst
)

var xTable Mem

func emitXConstants() {
	vals := map[int]uint32{
		xSign: 0x80000000,
		xHalf: f32bits(0.5),
		xZero: 0,
		xM20:  f32bits(-20),
		xP20:  f32bits(20),
		xM10:  f32bits(-10),
		xP10:  f32bits(10),
	}
	for i, v := range lpconstValues() {
		vals[xWide+i] = v
	}
	xTable = GLOBL("xconst", RODATA|NOPTR)
	// Entry 0 (xBase) is padding. The assembler wants the DATA in increasing offsets.
	for j := 0; j < 16; j++ {
		DATA(4*j, U32(0))
	}
	for i := xBase + 1; i < xEnd; i++ {
		for j := 0; j < 16; j++ {
			DATA(64*(i-xBase)+4*j, U32(vals[i]))
		}
	}
}

// Comparison predicates (VCMPPS imm8), all ordered (false on NaN) except neqUQ.
const (
	eqOQ  = 0x00
	neqUQ = 0x04
	ltOQ  = 0x11
	leOQ  = 0x12
	geOQ  = 0x1D
	gtOQ  = 0x1E
)

// cmp returns the mask a pred b (a register, b a register or memory): a k register for
// AVX-512, a vector of all-ones/zero lanes for AVX2.
func (g *kern) cmp(pred uint8, a, b Op) Op {
	if g.avx512 {
		k := K()
		VCMPPS(U8(pred), b, a, k)
		return k
	}
	m := g.vec()
	VCMPPS(U8(pred), b, a, m)
	return m
}

// blend returns m ? t : f (t a register or memory, f a register).
//
// avo's liveness treats the destination of a masked AVX-512 instruction as read (merge
// masking), so d is defined first: otherwise it would stay live from the function's entry.
func (g *kern) blend(m, t, f Op) VecVirtual {
	d := g.vec()
	if g.avx512 {
		VMOVAPS(f, d)
		VBLENDMPS(t, d, m, d)
	} else {
		VBLENDVPS(m, t, f, d)
	}
	return d
}

// zero returns m ? v : +0 (see blend for the AVX-512 form).
func (g *kern) zero(m, v Op) VecVirtual {
	d := g.vec()
	if g.avx512 {
		VXORPS(d, d, d)
		VBLENDMPS(v, d, m, d)
	} else {
		VANDPS(v, m, d)
	}
	return d
}

// and returns the mask a & b; andNot returns ^a & b.
func (g *kern) and(a, b Op) Op {
	if g.avx512 {
		k := K()
		KANDW(a, b, k)
		return k
	}
	m := g.vec()
	VANDPS(a, b, m)
	return m
}

func (g *kern) or(a, b Op) Op {
	if g.avx512 {
		k := K()
		KORW(a, b, k)
		return k
	}
	m := g.vec()
	VORPS(a, b, m)
	return m
}

// clamp returns min(max(x, lo), hi), NaN passing through as in torch.clamp. The bounds must
// be the first (Intel) source of VMAXPS/VMINPS, which has to be a register: bounds in memory
// are loaded first.
func (g *kern) clamp(x VecVirtual, lo, hi Op) VecVirtual {
	d := g.vec()
	if _, ok := lo.(Mem); ok {
		g.mov(lo, d)
		lo = d
	}
	VMAXPS(x, lo, d) // a NaN x is returned: it is the second source; so is x on a tie
	h := g.vec()
	if _, ok := hi.(Mem); ok {
		g.mov(hi, h)
		hi = h
	}
	VMINPS(d, hi, h)
	return h
}

// bcastArg broadcasts float32 argument name into a vector.
func (g *kern) bcastArg(name string) VecVirtual {
	x := Load(Param(name), XMM())
	v := g.vec()
	VBROADCASTSS(x, v)
	return v
}

// loop emits the standard whole-vector loop: body(off) for element offset off (in elements),
// unrolled u times, then one vector at a time; n counts elements and is decremented, the
// pointers advance by the bytes per element given.
func loop(name string, lanes, u int, n Register, ptrs []Register, body func(off int)) {
	step := u * lanes
	Label(name + "_loop")
	CMPQ(n, U32(step))
	JB(LabelRef(name + "_one"))
	for j := 0; j < u; j++ {
		body(j * lanes)
	}
	for _, p := range ptrs {
		ADDQ(U32(step*4), p)
	}
	SUBQ(U32(step), n)
	JMP(LabelRef(name + "_loop"))
	Label(name + "_one")
	CMPQ(n, U32(lanes))
	JB(LabelRef(name + "_done"))
	body(0)
	for _, p := range ptrs {
		ADDQ(U32(lanes*4), p)
	}
	SUBQ(U32(lanes), n)
	JMP(LabelRef(name + "_one"))
	Label(name + "_done")
}

// expKeep are the constants the exp construction uses; AVX-512 kernels keep them in registers.
var expKeep = []int{cLog2e, cLn2Hi, cLn2Lo, cC7, cC6, cC5, cC4, cC3, cC2, cOne, cMagic}

func mem(p Register, off int) Mem { return Mem{Base: p, Disp: off} }

var _ = math.Inf
