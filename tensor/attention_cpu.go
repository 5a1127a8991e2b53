package tensor

import (
	"math"
	"math/bits"
	"runtime"
	"sync"
	"unsafe"

	"github.com/mtrl-go/mtrl/internal/dispatch"
	"github.com/mtrl-go/mtrl/internal/gemm"
	"github.com/mtrl-go/mtrl/internal/hostops"
	"github.com/mtrl-go/mtrl/internal/nnref"
	"github.com/mtrl-go/mtrl/internal/parallel"
)

// The CPU attention: flash-style tiles whose products run on internal/gemm's register-blocked
// micro-kernels (gemm.Tile) and whose exps run in the avo-generated row kernels of
// attention_amd64.s (pure-Go twins below). No [Tq, Tk] matrix exists: the largest score buffer
// is one tile per goroutine.
//
// Forward. The queries of a sequence that share a key/value head g are flattened into rows
// (token t, head h of the group) in that order, so a row's causal key limit never decreases
// along them, and split into blocks of attnRows. The keys are packed once per call into
// panels of attnKeys keys (Kᵀ·scale, [D][attnKeys]), only as many as the sequence's queries see
// (a decode step packs the cache's valid positions, not its capacity). For each block and key
// panel: S = Q·Kᵀ (rows of Q gathered into the block), the online-softmax row step, O += P·V with
// V read in place. The running maximum is rescaled lazily (attnTau).
//
// bfloat16. The kernels are generic over the element type of Q, K, V and the outputs (attnElem)
// and compute in float32 throughout, so a bfloat16 result is the float32 kernels' result on the
// widened inputs, rounded: the forward widens Q as it gathers its rows and K as it packs its
// panels (no extra pass), widens the value rows the queries see into a compact float32 buffer
// (the tiles read V in place), and rounds each output row once as it stores it; the backward,
// whose tiles read Q, K, V and dO in place and sum dK and dV in place, widens them all into
// float32 buffers and rounds dQ, dK and dV at the end (O(T·H·D) conversions against O(T²·H·D)
// products); the decode path widens each cache row before its dot product or axpy. Rows are
// widened and rounded by the bfloat16 conversions the other op families use (widenBF16,
// roundBF16: bf16conv_amd64.s).
//
// Backward. Per block of attnBwdRows queries of one head and panel of attnKeys keys, the tiles
// are transposed (keys are rows): Sᵀ = K·(scale·Q)ᵀ and dPᵀ = V·(scale·dO)ᵀ with K and V read in
// place and the query blocks packed once; the row kernel turns them into Pᵀ and dS'ᵀ =
// Pᵀ∘(dPᵀ − scale·Δ); then dV += Pᵀ·dO and dK += dS'ᵀ·Q (Q and dO read in place) and dQᵀ +=
// Kᵀ·dS'ᵀ. dK and dV of a key panel sum the query blocks in ascending order, dQ of a block the
// key panels in ascending order, whichever schedule runs: one pass per (sequence, key/value
// head) when there are enough of those for the cores, else a dK/dV pass parallel over key
// panels and a dQ pass parallel over query blocks (every tile recomputed, bit for bit).

const (
	attnKeys    = 64  // keys per tile: one AVX-512 micro-kernel call wide
	attnRows    = 192 // flattened (token, head) rows per forward block: 32 six-row micro-tiles
	attnBwdRows = 64  // queries per backward block: one micro-kernel call wide
	// attnTau is how far a tile's maximum score may pass the running maximum before the running
	// maximum (and with it the output accumulator) is moved: exps stay below e^8.
	attnTau = 8
)

// attnSIMD is one implementation of the row kernels (see attention_amd64.s).
type attnSIMD struct {
	softmax func(x []float32, m, tau float32) (mx, sum float32)
	bwd     func(p, dp, lse, dlt []float32)
}

var attnImpls = dispatch.New(attnSIMDImpls()...)

// softmaxRow is the online-softmax step of one row of a score tile (len(x) a multiple of 16):
// see attnSoftmaxAVX512.
func softmaxRow(x []float32, m float32) (mx, sum float32) {
	if k := attnImpls.Active(); k != nil {
		return k.softmax(x, m, attnTau)
	}
	return softmaxRowGo(x, m, attnTau)
}

// softmaxRowGo is the pure-Go twin of the softmax row kernel: the same maximum rule, an exp
// that agrees to about an ulp (hostops.ExpNonPosTable, accurate up to e^tau and beyond), and
// per-lane sums over 16 lanes.
func softmaxRowGo(x []float32, m, tau float32) (float32, float32) {
	r := float32(math.Inf(-1))
	for _, v := range x {
		if v > r {
			r = v
		}
	}
	if r > m+tau {
		m = r
	}
	var lanes [16]float32
	for i, v := range x {
		e := hostops.ExpNonPosTable(max(v-m, -87))
		x[i] = e
		lanes[i%16] += e
	}
	return m, sumLanes(lanes[:])
}

// sumLanes adds per-lane sums pairwise, in a fixed order.
func sumLanes(l []float32) float32 {
	for w := len(l) / 2; w >= 1; w /= 2 {
		for i := range w {
			l[i] += l[i+w]
		}
	}
	return l[0]
}

// bwdRow is the backward's row step: p = exp(p − lse), dp = p·(dp − dlt) (len a multiple of 16).
func bwdRow(p, dp, lse, dlt []float32) {
	if k := attnImpls.Active(); k != nil {
		k.bwd(p, dp, lse, dlt)
		return
	}
	for i, s := range p {
		e := hostops.ExpNonPosTable(max(s-lse[i], -87))
		p[i] = e
		dp[i] = e * (dp[i] - dlt[i])
	}
}

// attnPools recycle the per-call packed panels and per-goroutine tiles, one pool per power of
// two of the capacity: a decode step calls attention once per layer and token, and must not
// allocate its buffers each time.
var attnPools [64]sync.Pool

// getF32 returns a buffer of n float32 (contents undefined) from the pool of its size class.
func getF32(n int) *[]float32 {
	c := bits.Len(uint(n))
	if p, ok := attnPools[c].Get().(*[]float32); ok {
		*p = (*p)[:n]
		return p
	}
	s := make([]float32, n, 1<<c)
	return &s
}

func putF32(p *[]float32) { attnPools[bits.Len(uint(cap(*p)))-1].Put(p) }

// keyLimit is how many keys row t (0-based in its sequence) of q sees.
func keyLimit(s nnref.AttnShape, q nnref.Seq, t int) int {
	if !s.Causal {
		return q.KN
	}
	return max(0, min(q.KN, t+q.KN-q.QN+1))
}

// visibleKeys is how many keys any query of the sequence sees: those that are packed.
func visibleKeys(s nnref.AttnShape, q nnref.Seq) int {
	if q.QN == 0 {
		return 0
	}
	return keyLimit(s, q, q.QN-1)
}

// packKT writes keys [j0, j0+nk) of head g (rows of k, stride ld) into the panel dst
// [D][attnKeys] as dst[d·attnKeys + j] = mult·k[j][d], zero past nk; bfloat16 rows are widened
// into row (D elements) first.
func packKT[E attnElem](dst []float32, k []E, ld, d, nk int, mult float32, row []float32) {
	clear(dst[:d*attnKeys])
	if _, ok := bf16View(k); ok {
		row = row[:d]
		for j := range nk {
			loadRow(row, k[j*ld:])
			for i, x := range row {
				dst[i*attnKeys+j] = mult * x
			}
		}
		return
	}
	kf := f32View(k)
	for j := range nk {
		row := kf[j*ld:][:d]
		for i, x := range row {
			dst[i*attnKeys+j] = mult * x
		}
	}
}

// kvPanels packs the keys every (sequence, key/value head) reads into panels of attnKeys, in
// parallel; off[u] is where unit u = seq·Hkv + g starts (in panels).
func kvPanels[E attnElem](s nnref.AttnShape, seqs []nnref.Seq, k []E, mult float32) (buf *[]float32, off []int) {
	off = make([]int, len(seqs)*s.Hkv+1)
	for b, q := range seqs {
		np := (visibleKeys(s, q) + attnKeys - 1) / attnKeys
		for g := range s.Hkv {
			u := b*s.Hkv + g
			off[u+1] = off[u] + np
		}
	}
	panel := s.D * attnKeys
	buf = getF32(off[len(off)-1] * panel)
	kt := *buf
	units := len(off) - 1
	parallel.For(off[units], 4, func(lo, hi int) {
		var row []float32
		if _, ok := bf16View(k); ok {
			row = make([]float32, s.D)
		}
		u := 0
		for p := lo; p < hi; p++ {
			for off[u+1] <= p {
				u++
			}
			q, g := seqs[u/s.Hkv], u%s.Hkv
			j0 := (p - off[u]) * attnKeys
			nk := min(attnKeys, visibleKeys(s, q)-j0)
			packKT(kt[p*panel:], k[((q.K0+j0)*s.Hkv+g)*s.D:], s.Hkv*s.D, s.D, nk, mult, row)
		}
	})
	return buf, off
}

// attnWorkers is how many goroutines parallel.For runs: the backward's choice of schedule.
var attnWorkers = func() int { return runtime.GOMAXPROCS(0) }

// attentionCPU is the forward on host slices: out [rows, Hq, D], lse [rows, Hq] or nil.
func attentionCPU[E attnElem](s nnref.AttnShape, seqs []nnref.Seq, q, k, v, out []E, lse []float32) {
	if decodeCall(s, seqs) {
		attentionDecodeCPU(s, seqs, q, k, v, out, lse)
		return
	}
	attentionPackedCPU(s, seqs, q, k, v, out, lse)
}

// attentionPackedCPU is the tiled forward on packed key panels (see the comment at the top).
func attentionPackedCPU[E attnElem](s nnref.AttnShape, seqs []nnref.Seq, q, k, v, out []E, lse []float32) {
	group, d := s.Hq/s.Hkv, s.D
	ktBuf, off := kvPanels(s, seqs, k, float32(s.Scale))
	defer putF32(ktBuf)
	kt := *ktBuf
	vf, vBase, vBuf := visibleValues(s, seqs, v)
	if vBuf != nil {
		defer putF32(vBuf)
	}
	type job struct{ seq, g, r0, r1 int }
	var jobs []job
	for b, sq := range seqs {
		n := sq.QN * group
		for g := range s.Hkv {
			// last blocks first: under a causal mask they see the most keys
			for r0 := (n - 1) / attnRows * attnRows; n > 0 && r0 >= 0; r0 -= attnRows {
				jobs = append(jobs, job{b, g, r0, min(r0+attnRows, n)})
			}
		}
	}
	parallel.For(len(jobs), 1, func(lo, hi int) {
		wb := getF32(attnRows * (2*d + attnKeys + 2))
		defer putF32(wb)
		w := *wb
		qb, o, sc := w[:attnRows*d], w[attnRows*d:2*attnRows*d], w[2*attnRows*d:][:attnRows*attnKeys]
		ms, ls := w[attnRows*(2*d+attnKeys):][:attnRows], w[attnRows*(2*d+attnKeys+1):][:attnRows]
		var lims [attnRows]int
		for _, jb := range jobs[lo:hi] {
			sq := seqs[jb.seq]
			n := jb.r1 - jb.r0
			for r := range n {
				t, h := (jb.r0+r)/group, jb.g*group+(jb.r0+r)%group
				loadRow(qb[r*d:(r+1)*d], q[((sq.Q0+t)*s.Hq+h)*d:])
				lims[r] = keyLimit(s, sq, t)
				ms[r], ls[r] = float32(math.Inf(-1)), 0
			}
			clear(o[:n*d])
			maxLim := lims[n-1]
			panels := kt[off[jb.seq*s.Hkv+jb.g]*d*attnKeys:]
			// head g's first value row in vf, and the rows' stride; only read where keys are seen
			kv0, ld := vBase[jb.seq]+jb.g*d, s.Hkv*d
			r0 := 0 // rows before r0 see none of the current panel's keys
			for j0 := 0; j0 < maxLim; j0 += attnKeys {
				for r0 < n && lims[r0] <= j0 {
					r0++
				}
				nk := min(attnKeys, maxLim-j0)
				panel := panels[j0*d:][:d*attnKeys]
				for r := r0; r < n; r += gemm.MR {
					gemm.Tile(min(gemm.MR, n-r), d, qb[r*d:], d, panel, attnKeys, sc[r*attnKeys:], attnKeys, attnKeys, false)
				}
				for r := r0; r < n; r++ {
					row := sc[r*attnKeys : (r+1)*attnKeys]
					c := min(lims[r]-j0, attnKeys)
					for i := c; i < attnKeys; i++ {
						row[i] = float32(math.Inf(-1))
					}
					m0 := ms[r]
					m1, sum := softmaxRow(row, m0)
					clear(row[c:])
					switch {
					case math.IsInf(float64(m0), -1):
						ls[r] = sum
					case m1 != m0:
						a := float32(math.Exp(float64(m0 - m1)))
						ls[r] = ls[r]*a + sum
						for i := range o[r*d : (r+1)*d] {
							o[r*d+i] *= a
						}
					default:
						ls[r] += sum
					}
					ms[r] = m1
				}
				for r := r0; r < n; r += gemm.MR {
					gemm.Tile(min(gemm.MR, n-r), nk, sc[r*attnKeys:], attnKeys, vf[kv0+j0*ld:], ld, o[r*d:], d, d, true)
				}
			}
			for r := range n {
				t, h := (jb.r0+r)/group, jb.g*group+(jb.r0+r)%group
				row := (sq.Q0+t)*s.Hq + h
				dst := out[row*d : (row+1)*d]
				if lims[r] == 0 {
					clear(dst)
					if lse != nil {
						lse[row] = float32(math.Inf(-1))
					}
					continue
				}
				storeRow(dst, o[r*d:(r+1)*d], 1/ls[r])
				if lse != nil {
					lse[row] = ms[r] + float32(math.Log(float64(ls[r])))
				}
			}
		}
	})
}

// bwdPlan is the packed state of one backward call.
type bwdPlan struct {
	s                   nnref.AttnShape
	seqs                []nnref.Seq
	q, k, v, dout       []float32
	dq, dk, dv          []float32
	kt                  []float32 // key panels [D][attnKeys], unscaled
	kOff                []int     // first key panel of unit u = seq·Hkv + g
	qt, dot, dqt        []float32 // per query block [D][attnBwdRows]: scale·Qᵀ, scale·dOᵀ, dQᵀ
	lseC, dltC          []float32 // per query block [attnBwdRows]: lse, scale·(dO·O)
	bOff                []int     // first query block of unit u; a unit's blocks are head-major
	tokenBlocks         []int     // query blocks per head of sequence b
	bufs                []*[]float32
	group, panel, nUnit int
}

// attentionBackwardCPU writes dq, dk and dv for the forward's q, k, v, out, lse and dout. For
// bfloat16 it runs the float32 backward on widened copies and rounds the gradients.
func attentionBackwardCPU[E attnElem](s nnref.AttnShape, seqs []nnref.Seq, q, k, v, out []E, lse []float32, dout, dq, dk, dv []E) {
	if _, ok := bf16View(q); !ok {
		attentionBackwardF32(s, seqs, f32View(q), f32View(k), f32View(v), f32View(out), lse, f32View(dout), f32View(dq), f32View(dk), f32View(dv))
		return
	}
	var bufs []*[]float32
	wide := func(x []E) []float32 {
		b := widenAll(x)
		bufs = append(bufs, b)
		return *b
	}
	scratch := func(n int) []float32 {
		b := getF32(n)
		bufs = append(bufs, b)
		return *b
	}
	dq32, dk32, dv32 := scratch(len(dq)), scratch(len(dk)), scratch(len(dv))
	attentionBackwardF32(s, seqs, wide(q), wide(k), wide(v), wide(out), lse, wide(dout), dq32, dk32, dv32)
	roundAll(dq, dq32)
	roundAll(dk, dk32)
	roundAll(dv, dv32)
	for _, b := range bufs {
		putF32(b)
	}
}

// attentionBackwardF32 is the float32 backward (see the comment at the top).
func attentionBackwardF32(s nnref.AttnShape, seqs []nnref.Seq, q, k, v, out, lse, dout, dq, dk, dv []float32) {
	p := &bwdPlan{s: s, seqs: seqs, q: q, k: k, v: v, dout: dout, dq: dq, dk: dk, dv: dv,
		group: s.Hq / s.Hkv, panel: s.D * attnBwdRows, nUnit: len(seqs) * s.Hkv}
	ktBuf, kOff := kvPanels(s, seqs, k, 1)
	p.kt, p.kOff, p.bufs = *ktBuf, kOff, []*[]float32{ktBuf}
	defer func() {
		for _, b := range p.bufs {
			putF32(b)
		}
	}()
	p.bOff = make([]int, p.nUnit+1)
	p.tokenBlocks = make([]int, len(seqs))
	for b, sq := range seqs {
		p.tokenBlocks[b] = (sq.QN + attnBwdRows - 1) / attnBwdRows
		for g := range s.Hkv {
			u := b*s.Hkv + g
			p.bOff[u+1] = p.bOff[u] + p.tokenBlocks[b]*p.group
		}
	}
	nb := p.bOff[p.nUnit]
	alloc := func(n int) []float32 {
		b := getF32(n)
		p.bufs = append(p.bufs, b)
		return *b
	}
	p.qt, p.dot, p.dqt = alloc(nb*p.panel), alloc(nb*p.panel), alloc(nb*p.panel)
	p.lseC, p.dltC = alloc(nb*attnBwdRows), alloc(nb*attnBwdRows)
	sc := float32(s.Scale)
	// Pack the query blocks and clear dK and dV: parallel over blocks, then units.
	parallel.For(nb, 1, func(lo, hi int) {
		for ib := lo; ib < hi; ib++ {
			sq, t0, h, rv := p.block(ib)
			qt, dot := p.qt[ib*p.panel:][:p.panel], p.dot[ib*p.panel:][:p.panel]
			lc, dc := p.lseC[ib*attnBwdRows:][:attnBwdRows], p.dltC[ib*attnBwdRows:][:attnBwdRows]
			clear(qt)
			clear(dot)
			clear(lc)
			clear(dc)
			clear(p.dqt[ib*p.panel:][:p.panel])
			for c := range rv {
				row := (sq.Q0+t0+c)*s.Hq + h
				qr, dr, or := q[row*s.D:][:s.D], dout[row*s.D:][:s.D], out[row*s.D:][:s.D]
				var delta float32
				for i := range s.D {
					qt[i*attnBwdRows+c] = sc * qr[i]
					dot[i*attnBwdRows+c] = sc * dr[i]
					delta += dr[i] * or[i]
				}
				lc[c], dc[c] = lse[row], sc*delta
			}
		}
	})
	parallel.For(p.nUnit, 1, func(lo, hi int) {
		for u := lo; u < hi; u++ {
			sq, g := seqs[u/s.Hkv], u%s.Hkv
			for j := range sq.KN {
				clear(dk[((sq.K0+j)*s.Hkv+g)*s.D:][:s.D])
				clear(dv[((sq.K0+j)*s.Hkv+g)*s.D:][:s.D])
			}
		}
	})
	tile := func(w []float32, u, jp, ib int, kv, dQ bool) {
		p.tile(w[:attnKeys*attnBwdRows], w[attnKeys*attnBwdRows:], u, jp, ib, kv, dQ)
	}
	if p.nUnit >= attnWorkers() {
		// One pass per unit: every tile once, dK/dV and dQ together.
		parallel.For(p.nUnit, 1, func(lo, hi int) {
			wb := getF32(2 * attnKeys * attnBwdRows)
			defer putF32(wb)
			for u := lo; u < hi; u++ {
				for jp := range p.kOff[u+1] - p.kOff[u] {
					for ib := p.bOff[u]; ib < p.bOff[u+1]; ib++ {
						tile(*wb, u, jp, ib, true, true)
					}
				}
			}
		})
	} else {
		// dK and dV parallel over key panels, then dQ parallel over query blocks.
		parallel.For(p.kOff[p.nUnit], 1, func(lo, hi int) {
			wb := getF32(2 * attnKeys * attnBwdRows)
			defer putF32(wb)
			for kp := lo; kp < hi; kp++ {
				u := p.unitOf(p.kOff, kp)
				for ib := p.bOff[u]; ib < p.bOff[u+1]; ib++ {
					tile(*wb, u, kp-p.kOff[u], ib, true, false)
				}
			}
		})
		parallel.For(nb, 1, func(lo, hi int) {
			wb := getF32(2 * attnKeys * attnBwdRows)
			defer putF32(wb)
			for i := lo; i < hi; i++ {
				ib := nb - 1 - i // last blocks first: under a causal mask they see the most keys
				u := p.unitOf(p.bOff, ib)
				for jp := range p.kOff[u+1] - p.kOff[u] {
					tile(*wb, u, jp, ib, false, true)
				}
			}
		})
	}
	// dQ: transpose the blocks back.
	parallel.For(nb, 1, func(lo, hi int) {
		for ib := lo; ib < hi; ib++ {
			sq, t0, h, rv := p.block(ib)
			dqt := p.dqt[ib*p.panel:][:p.panel]
			for c := range rv {
				row := (sq.Q0+t0+c)*s.Hq + h
				dst := dq[row*s.D:][:s.D]
				for i := range dst {
					dst[i] = dqt[i*attnBwdRows+c]
				}
			}
		}
	})
}

// unitOf returns the unit whose range of off holds index i.
func (p *bwdPlan) unitOf(off []int, i int) int {
	lo, hi := 0, p.nUnit-1
	for lo < hi {
		m := (lo + hi + 1) / 2
		if off[m] <= i {
			lo = m
		} else {
			hi = m - 1
		}
	}
	return lo
}

// block returns query block ib's sequence, first token, query head and number of tokens.
func (p *bwdPlan) block(ib int) (sq nnref.Seq, t0, h, rv int) {
	u := p.unitOf(p.bOff, ib)
	b, g := u/p.s.Hkv, u%p.s.Hkv
	sq = p.seqs[b]
	i := ib - p.bOff[u]
	hh, tb := i/p.tokenBlocks[b], i%p.tokenBlocks[b]
	t0 = tb * attnBwdRows
	return sq, t0, g*p.group + hh, min(attnBwdRows, sq.QN-t0)
}

// tile runs key panel jp of unit u against query block ib: Sᵀ and dPᵀ into st and dpt
// ([attnKeys][attnBwdRows]), the row step, then dK and dV (kv) and dQᵀ (dQ).
func (p *bwdPlan) tile(st, dpt []float32, u, jp, ib int, kv, dQ bool) {
	s, d := p.s, p.s.D
	sq, t0, h, rv := p.block(ib)
	g := u % s.Hkv
	j0 := jp * attnKeys
	// Keys past what the block's last query sees are visible to none of its queries.
	nk := min(attnKeys, keyLimit(s, sq, t0+rv-1)-j0)
	if nk <= 0 {
		return
	}
	ldk, ldq := s.Hkv*d, s.Hq*d
	kr, vr := p.k[((sq.K0+j0)*s.Hkv+g)*d:], p.v[((sq.K0+j0)*s.Hkv+g)*d:]
	qt, dot := p.qt[ib*p.panel:][:p.panel], p.dot[ib*p.panel:][:p.panel]
	for j := 0; j < nk; j += gemm.MR {
		mr := min(gemm.MR, nk-j)
		gemm.Tile(mr, d, kr[j*ldk:], ldk, qt, attnBwdRows, st[j*attnBwdRows:], attnBwdRows, attnBwdRows, false)
		gemm.Tile(mr, d, vr[j*ldk:], ldk, dot, attnBwdRows, dpt[j*attnBwdRows:], attnBwdRows, attnBwdRows, false)
	}
	lc, dc := p.lseC[ib*attnBwdRows:][:attnBwdRows], p.dltC[ib*attnBwdRows:][:attnBwdRows]
	for j := range nk {
		pr, dr := st[j*attnBwdRows:][:attnBwdRows], dpt[j*attnBwdRows:][:attnBwdRows]
		bwdRow(pr, dr, lc, dc)
		// Queries before c0 do not see key j0+j (causal): zero their probability and gradient.
		c0 := 0
		if s.Causal {
			c0 = min(attnBwdRows, max(0, j0+j-(sq.KN-sq.QN)-t0))
		}
		clear(pr[:c0])
		clear(dr[:c0])
	}
	if kv {
		qr, dr := p.q[((sq.Q0+t0)*s.Hq+h)*d:], p.dout[((sq.Q0+t0)*s.Hq+h)*d:]
		dkr, dvr := p.dk[((sq.K0+j0)*s.Hkv+g)*d:], p.dv[((sq.K0+j0)*s.Hkv+g)*d:]
		for j := 0; j < nk; j += gemm.MR {
			mr := min(gemm.MR, nk-j)
			gemm.Tile(mr, rv, st[j*attnBwdRows:], attnBwdRows, dr, ldq, dvr[j*ldk:], ldk, d, true)
			gemm.Tile(mr, rv, dpt[j*attnBwdRows:], attnBwdRows, qr, ldq, dkr[j*ldk:], ldk, d, true)
		}
	}
	if dQ {
		kt := p.kt[(p.kOff[u]+jp)*d*attnKeys:][:d*attnKeys]
		dqt := p.dqt[ib*p.panel:][:p.panel]
		for i := 0; i < d; i += gemm.MR {
			gemm.Tile(min(gemm.MR, d-i), nk, kt[i*attnKeys:], attnKeys, dpt, attnBwdRows, dqt[i*attnBwdRows:], attnBwdRows, attnBwdRows, true)
		}
	}
}

// attnDecodeRows is the most query rows per key/value head and sequence (queries times the
// GQA group) the unpacked decode path takes. Packing Kᵀ for the micro-kernels costs a strided
// pass over every visible key, which a block of rows sharing the keys repays; one or two rows do
// not (the toy VLM's decode: the packing was four times the cost of the scores it fed), while
// the scalar dot products of the unpacked path lose to the packed tiles from about four rows
// (a 7-head GQA group: 3× slower).
const attnDecodeRows = 2

// decodeCall reports whether the unpacked decode path takes the call.
func decodeCall(s nnref.AttnShape, seqs []nnref.Seq) bool {
	if s.Hkv == 0 {
		return false
	}
	for _, q := range seqs {
		if q.QN*(s.Hq/s.Hkv) > attnDecodeRows {
			return false
		}
	}
	return true
}

// attentionDecodeCPU is the forward for calls whose sequences have few queries: for each query
// row the scores scale·q·K[j] are dot products with the cache's key rows read in place, one
// softmaxRow step over all of them (the exact maximum, so no rescaling), and the output the sum
// of p[j]·V[j] (axpy over the value rows in place). Nothing is packed.
func attentionDecodeCPU[E attnElem](s nnref.AttnShape, seqs []nnref.Seq, q, k, v, out []E, lse []float32) {
	group, d, ld := s.Hq/s.Hkv, s.D, s.Hkv*s.D
	type job struct{ seq, t, h int }
	var jobs []job
	for b, sq := range seqs {
		for t := range sq.QN {
			for h := range s.Hq {
				jobs = append(jobs, job{b, t, h})
			}
		}
	}
	scale := float32(s.Scale)
	parallel.For(len(jobs), 8, func(lo, hi int) {
		var buf *[]float32
		defer func() {
			if buf != nil {
				putF32(buf)
			}
		}()
		for _, jb := range jobs[lo:hi] {
			sq := seqs[jb.seq]
			row := (sq.Q0+jb.t)*s.Hq + jb.h
			dst := out[row*d : (row+1)*d]
			lim := keyLimit(s, sq, jb.t)
			if lim == 0 {
				clear(dst)
				if lse != nil {
					lse[row] = float32(math.Inf(-1))
				}
				continue
			}
			n := (lim + 15) &^ 15
			if buf == nil || cap(*buf) < n+3*d {
				if buf != nil {
					putF32(buf)
				}
				buf = getF32(n + 3*d)
			}
			sc := (*buf)[:n]
			kv0 := (sq.K0*s.Hkv + jb.h/group) * d
			// float32 reads q, K and V in place and sums into out; bfloat16 widens q and each
			// K and V row into w and sums in acc
			qr, acc, w := (*buf)[n:n+d], (*buf)[n+d:n+2*d], (*buf)[n+2*d:n+3*d]
			of, f32 := f32Row(out[row*d : (row+1)*d])
			if f32 {
				qr, acc = f32View(q[row*d:(row+1)*d]), of
			} else {
				loadRow(qr, q[row*d:(row+1)*d])
			}
			for j := range lim {
				kr := k[kv0+j*ld:][:d]
				if f32 {
					sc[j] = scale * dotF32(qr, f32View(kr))
				} else {
					loadRow(w, kr)
					sc[j] = scale * dotF32(qr, w)
				}
			}
			for j := lim; j < n; j++ {
				sc[j] = float32(math.Inf(-1))
			}
			m, sum := softmaxRow(sc, float32(math.Inf(-1)))
			clear(acc)
			for j := range lim {
				vr := v[kv0+j*ld:][:d]
				if f32 {
					axpyF32(sc[j], f32View(vr), acc)
				} else {
					loadRow(w, vr)
					axpyF32(sc[j], w, acc)
				}
			}
			storeRow(dst, acc, 1/sum)
			if lse != nil {
				lse[row] = m + float32(math.Log(float64(sum)))
			}
		}
	})
}

// dotF32 is Σ x[i]·y[i] over len(x) elements, in four interleaved partial sums.
func dotF32(x, y []float32) float32 {
	y = y[:len(x)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(x); i += 4 {
		s0 += x[i] * y[i]
		s1 += x[i+1] * y[i+1]
		s2 += x[i+2] * y[i+2]
		s3 += x[i+3] * y[i+3]
	}
	for ; i < len(x); i++ {
		s0 += x[i] * y[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// axpyF32 is y += a·x.
func axpyF32(a float32, x, y []float32) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] += a * v
	}
}

// attnElem is the element type of the CPU attention's operands and outputs: float32, or
// bfloat16 computed in float32.
type attnElem interface{ float32 | BF16 }

// bf16View returns x as bfloat16 elements, ok when E is BF16.
func bf16View[E attnElem](x []E) (b []BF16, ok bool) {
	var z E
	if unsafe.Sizeof(z) != 2 {
		return nil, false
	}
	return unsafe.Slice((*BF16)(unsafe.Pointer(unsafe.SliceData(x))), len(x)), true
}

// f32Row returns x as float32 elements, ok when E is float32.
func f32Row[E attnElem](x []E) (f []float32, ok bool) {
	var z E
	if unsafe.Sizeof(z) != 4 {
		return nil, false
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(x))), len(x)), true
}

// f32View is f32Row for callers that know E is float32.
func f32View[E attnElem](x []E) []float32 {
	f, _ := f32Row(x)
	return f
}

// loadRow writes the first len(dst) elements of src into dst, widened when E is BF16.
func loadRow[E attnElem](dst []float32, src []E) {
	if b, ok := bf16View(src); ok {
		widenBF16(dst, b[:len(dst)])
		return
	}
	copy(dst, f32View(src))
}

// storeRow writes dst[i] = src[i]·mul, rounded once to bfloat16 when E is BF16 (dst may be
// src when E is float32).
func storeRow[E attnElem](dst []E, src []float32, mul float32) {
	if b, ok := bf16View(dst); ok {
		if mul == 1 {
			roundBF16(b, src[:len(b)])
			return
		}
		for i, x := range src[:len(b)] {
			b[i] = BF16FromFloat32(x * mul)
		}
		return
	}
	f := f32View(dst)
	for i, x := range src[:len(f)] {
		f[i] = x * mul
	}
}

// attnConvGrain is how many elements one goroutine widens or rounds at a time.
const attnConvGrain = 1 << 14

// widenAll returns a pooled float32 copy of x (put it back with putF32).
func widenAll[E attnElem](x []E) *[]float32 {
	buf := getF32(len(x))
	dst := *buf
	parallel.For(len(x), attnConvGrain, func(lo, hi int) { loadRow(dst[lo:hi], x[lo:hi]) })
	return buf
}

// roundAll writes src into dst, rounded to dst's element type.
func roundAll[E attnElem](dst []E, src []float32) {
	parallel.For(len(dst), attnConvGrain, func(lo, hi int) { storeRow(dst[lo:hi], src[lo:hi], 1) })
}

// visibleValues returns v as float32 for the forward's P·V tiles, which read it in place, and
// where each sequence's first value row starts in it (base[b]; the rows keep their stride): v
// itself when E is float32, else a pooled buffer (buf, for putF32) holding only the widened value
// rows the queries see, sequence after sequence (a decode step's cache capacity past its lengths
// is neither widened nor given memory).
func visibleValues[E attnElem](s nnref.AttnShape, seqs []nnref.Seq, v []E) (vf []float32, base []int, buf *[]float32) {
	row := s.Hkv * s.D
	base = make([]int, len(seqs)+1)
	if f, ok := f32Row(v); ok {
		for b, q := range seqs {
			base[b] = q.K0 * row
		}
		return f, base, nil
	}
	for b, q := range seqs {
		base[b+1] = base[b] + visibleKeys(s, q)*row
	}
	n := base[len(seqs)]
	buf = getF32(n)
	vf = *buf
	widen := func(lo, hi int) {
		for b, q := range seqs[lo:hi] {
			loadRow(vf[base[lo+b]:base[lo+b+1]], v[q.K0*row:])
		}
	}
	if n < attnConvGrain { // a few decode rows: not worth a goroutine
		widen(0, len(seqs))
	} else {
		parallel.For(len(seqs), 1, widen)
	}
	return vf, base, buf
}
