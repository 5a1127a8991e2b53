package main

import (
	"errors"
	"math"
	"math/big"
	"math/cmplx"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// symbolicEqual stands in for the grader's are_equal_under_sympy(truth, given): whether
// sympy.simplify((truth)-(given)) is 0, after parse_expr with the standard transformations and
// implicit multiplication and application on the text with ^ as **. The same guards apply (at
// most two distinct letters besides sqrt and frac; no ^{, ^( or ^NN). The expression is read
// as sympy reads it (Python's numbers, names split into one-letter symbols, implicit
// products, n!, sqrt, pi), then decided instead of simplified: exactly with rationals when
// only integers and fractions are involved; with the symbols at fixed rational points
// (exactly, or in complex float64 once sqrt, pi or a decimal number takes part); decimals
// alone follow sympy's 53-bit Float arithmetic (0.1+0.2 is not 0.3). What it does not read
// (other sympy functions, relations, tuples) is unequal, as a sympy exception is.
func symbolicEqual(truth, given string) bool {
	expr := "(" + truth + ")-(" + given + ")"
	if !shouldAllowEval(expr) {
		return false
	}
	a, errA := parseSympy(truth)
	b, errB := parseSympy(given)
	if errA != nil || errB != nil {
		return false
	}
	syms := map[string]bool{}
	a.symbols(syms)
	b.symbols(syms)
	if len(syms) == 0 {
		return sameValue(a, b, nil)
	}
	names := make([]string, 0, len(syms))
	for s := range syms {
		names = append(names, s)
	}
	evaluated := 0
	for _, pt := range symbolPoints {
		env := map[string]value{}
		for i, n := range names {
			env[n] = exactValue(big.NewRat(pt[i%len(pt)][0], pt[i%len(pt)][1]))
		}
		va, errA := a.eval(env)
		vb, errB := b.eval(env)
		if errA != nil || errB != nil {
			continue // a pole: try the next point
		}
		if !equalValues(va, vb) {
			return false
		}
		evaluated++
	}
	return evaluated >= 2
}

// symbolPoints are the rational points the symbols take (a second symbol takes the second
// coordinate): of both signs, so that sqrt(x^2) is not x.
var symbolPoints = [][2][2]int64{
	{{7, 3}, {-5, 2}}, {{-11, 7}, {13, 5}}, {{17, 11}, {19, 13}}, {{-23, 9}, {-3, 17}}, {{29, 4}, {31, 6}},
}

func sameValue(a, b *node, env map[string]value) bool {
	va, err := a.eval(env)
	if err != nil {
		return false
	}
	vb, err := b.eval(env)
	if err != nil {
		return false
	}
	return equalValues(va, vb)
}

// equalValues decides a − b = 0: exactly for rationals, exactly in float64 once a decimal
// took part (sympy's Float arithmetic is float64's, and it does not cancel a Float against an
// irrational), within 1e-9 relative for irrationals alone.
func equalValues(a, b value) bool {
	if a.exact != nil && b.exact != nil {
		return a.exact.Cmp(b.exact) == 0
	}
	x, y := a.complex(), b.complex()
	if cmplx.IsNaN(x) || cmplx.IsNaN(y) || cmplx.IsInf(x) || cmplx.IsInf(y) {
		return false
	}
	close := cmplx.Abs(x-y) <= 1e-9*max(1, cmplx.Abs(x), cmplx.Abs(y))
	switch {
	case a.irrational != b.irrational && (a.float || b.float):
		return false // sympy does not cancel a Float against sqrt(2) or pi
	case a.irrational != b.irrational:
		return close // an irrational-looking side that is rational: sqrt(2)*sqrt(8)/8 is 1/2
	case a.float || b.float || !a.irrational:
		return x-y == 0
	}
	return close
}

var badPowRE = regexp.MustCompile(`\^[0-9]+\^|\^[0-9][0-9]+`)

// shouldAllowEval is the grader's should_allow_eval.
func shouldAllowEval(expr string) bool {
	letters := map[rune]bool{}
	for _, r := range strings.ReplaceAll(strings.ReplaceAll(expr, "sqrt", ""), "frac", "") {
		if unicode.IsLetter(r) {
			letters[r] = true
		}
	}
	return len(letters) <= 2 && !strings.Contains(expr, "^{") && !strings.Contains(expr, "^(") && !badPowRE.MatchString(expr)
}

// value is a number: exact (a rational) or complex float64; irrational says that an irrational
// such as sqrt(2) or pi took part, float that a decimal number (sympy's Float) did.
type value struct {
	exact             *big.Rat
	c                 complex128
	irrational, float bool
}

func exactValue(r *big.Rat) value { return value{exact: r} }

func (v value) complex() complex128 {
	if v.exact != nil {
		f, _ := v.exact.Float64()
		return complex(f, 0)
	}
	return v.c
}

var errEval = errors.New("not evaluable")

// node is a parsed expression.
type node struct {
	op   byte // 'n' number, 's' symbol, 'p' pi, '+', '-', '*', '/', '^', 'u' (negation), '!', 'r' (sqrt)
	num  value
	name string
	a, b *node
}

func (n *node) symbols(dst map[string]bool) {
	if n == nil {
		return
	}
	if n.op == 's' {
		dst[n.name] = true
	}
	n.a.symbols(dst)
	n.b.symbols(dst)
}

func (n *node) eval(env map[string]value) (value, error) {
	switch n.op {
	case 'n':
		return n.num, nil
	case 's':
		v, ok := env[n.name]
		if !ok {
			return value{}, errEval
		}
		return v, nil
	case 'p':
		return value{c: complex(math.Pi, 0), irrational: true}, nil
	}
	x, err := n.a.eval(env)
	if err != nil {
		return value{}, err
	}
	switch n.op {
	case 'u':
		if x.exact != nil {
			return exactValue(new(big.Rat).Neg(x.exact)), nil
		}
		return value{c: -x.c, irrational: x.irrational, float: x.float}, nil
	case 'r':
		return power(x, exactValue(big.NewRat(1, 2)))
	case '!':
		if x.exact == nil || !x.exact.IsInt() || x.exact.Sign() < 0 || x.exact.Num().Cmp(big.NewInt(1000)) > 0 {
			return value{}, errEval
		}
		return exactValue(new(big.Rat).SetInt(new(big.Int).MulRange(1, x.exact.Num().Int64()))), nil
	}
	y, err := n.b.eval(env)
	if err != nil {
		return value{}, err
	}
	if n.op == '^' {
		return power(x, y)
	}
	if x.exact != nil && y.exact != nil {
		r := new(big.Rat)
		switch n.op {
		case '+':
			r.Add(x.exact, y.exact)
		case '-':
			r.Sub(x.exact, y.exact)
		case '*':
			r.Mul(x.exact, y.exact)
		case '/':
			if y.exact.Sign() == 0 {
				return value{}, errEval // zoo in sympy: never 0
			}
			r.Quo(x.exact, y.exact)
		}
		return exactValue(r), nil
	}
	p, q := x.complex(), y.complex()
	out := value{irrational: x.irrational || y.irrational, float: x.float || y.float}
	switch n.op {
	case '+':
		out.c = p + q
	case '-':
		out.c = p - q
	case '*':
		out.c = p * q
	case '/':
		if q == 0 {
			return value{}, errEval
		}
		out.c = p / q
	}
	return out, nil
}

// power is x**y: exact for a rational to an integer power and for exact roots of rationals
// (sympy's 4**(1/2) is 2), else the principal complex value.
func power(x, y value) (value, error) {
	if x.exact != nil && y.exact != nil {
		if x.exact.Sign() == 0 && y.exact.Sign() < 0 {
			return value{}, errEval // zoo
		}
		p, q := y.exact.Num(), y.exact.Denom()
		if p.IsInt64() && q.IsInt64() && abs64(p.Int64()) <= 4096 && q.Int64() <= 64 {
			if r, ok := exactRoot(x.exact, q.Int64()); ok {
				return exactValue(ratPow(r, p.Int64())), nil
			}
		}
	}
	if x.exact != nil && x.exact.Sign() == 0 {
		if y.exact != nil && y.exact.Sign() > 0 {
			return exactValue(new(big.Rat)), nil
		}
	}
	v := cmplx.Pow(x.complex(), y.complex())
	return value{c: v, irrational: x.irrational || y.irrational || (y.exact != nil && !y.exact.IsInt()), float: x.float || y.float}, nil
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// exactRoot is the rational q-th root of a non-negative x when there is one.
func exactRoot(x *big.Rat, q int64) (*big.Rat, bool) {
	if q == 1 {
		return x, true
	}
	if x.Sign() < 0 {
		return nil, false
	}
	num, ok1 := intRoot(x.Num(), q)
	den, ok2 := intRoot(x.Denom(), q)
	if !ok1 || !ok2 {
		return nil, false
	}
	return new(big.Rat).SetFrac(num, den), true
}

func intRoot(n *big.Int, q int64) (*big.Int, bool) {
	if n.Sign() == 0 {
		return new(big.Int), true
	}
	f, _ := new(big.Float).SetInt(n).Float64()
	guess := math.Round(math.Pow(f, 1/float64(q)))
	for _, d := range []float64{0, -1, 1} {
		r := big.NewInt(int64(guess + d))
		if r.Sign() <= 0 {
			continue
		}
		if new(big.Int).Exp(r, big.NewInt(q), nil).Cmp(n) == 0 {
			return r, true
		}
	}
	return nil, false
}

func ratPow(x *big.Rat, n int64) *big.Rat {
	e := big.NewInt(abs64(n))
	num := new(big.Int).Exp(x.Num(), e, nil)
	den := new(big.Int).Exp(x.Denom(), e, nil)
	if n < 0 {
		num, den = den, num
	}
	if den.Sign() == 0 {
		return new(big.Rat) // unreachable: 0 to a negative power is refused before
	}
	return new(big.Rat).SetFrac(num, den)
}

// token kinds of the Python tokenizer as parse_expr sees them.
type token struct {
	kind byte // 'n' number, 'a' name, 'o' operator
	text string
}

var pyNumberRE = regexp.MustCompile(`^(?:(?:[0-9](?:_?[0-9])*\.(?:[0-9](?:_?[0-9])*)?|\.[0-9](?:_?[0-9])*)(?:[eE][-+]?[0-9](?:_?[0-9])*)?|[0-9](?:_?[0-9])*[eE][-+]?[0-9](?:_?[0-9])*|[0-9](?:_?[0-9])*)[jJ]?`)

// sympyNames are the lowercase names of `from sympy import *` with at most two distinct letters
// (what the letter guard lets through) that this port does not evaluate; pi and sqrt it does.
var sympyNames = map[string]bool{"csc": true, "eye": true, "ff": true, "fft": true, "fu": true, "gff": true, "hn1": true,
	"hn2": true, "im": true, "jn": true, "li": true, "ln": true, "nan": true, "ntt": true, "oo": true, "re": true,
	"rf": true, "yn": true, "zoo": true}

// greekNames are not split into letters by sympy's split_symbols.
var greekNames = map[string]bool{"alpha": true, "beta": true, "gamma": true, "delta": true, "epsilon": true, "zeta": true,
	"eta": true, "theta": true, "iota": true, "kappa": true, "lambda": true, "mu": true, "nu": true, "xi": true,
	"omicron": true, "rho": true, "sigma": true, "tau": true, "upsilon": true, "phi": true, "chi": true, "psi": true, "omega": true}

var pyKeywords = map[string]bool{"and": true, "as": true, "assert": true, "async": true, "await": true, "break": true,
	"class": true, "continue": true, "def": true, "del": true, "elif": true, "else": true, "except": true, "finally": true,
	"for": true, "from": true, "global": true, "if": true, "import": true, "in": true, "is": true, "lambda": true,
	"nonlocal": true, "not": true, "or": true, "pass": true, "raise": true, "return": true, "try": true, "while": true,
	"with": true, "yield": true}

// tokenize splits s as Python's tokenizer does, for the subset parse_expr evaluates here.
func tokenize(s string) ([]token, error) {
	var out []token
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == ' ' || r == '\t':
			i += size
		case r >= '0' && r <= '9' || (r == '.' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9'):
			m := pyNumberRE.FindString(s[i:])
			if m == "" {
				return nil, errEval
			}
			out = append(out, token{'n', m})
			i += len(m)
		case r == '_' || unicode.IsLetter(r):
			j := i + size
			for j < len(s) {
				r2, n2 := utf8.DecodeRuneInString(s[j:])
				if r2 != '_' && !unicode.IsLetter(r2) && !unicode.IsDigit(r2) {
					break
				}
				j += n2
			}
			out = append(out, token{'a', s[i:j]})
			i = j
		case strings.HasPrefix(s[i:], "**"):
			out = append(out, token{'o', "**"})
			i += 2
		case strings.ContainsRune("+-*/()!", r):
			out = append(out, token{'o', string(r)})
			i += size
		default:
			return nil, errEval // tuples, relations, lists, …: sympy raises or cannot subtract
		}
	}
	return out, nil
}

// parseSympy reads s as parse_expr with the standard transformations and
// implicit_multiplication_application does (^ is **).
func parseSympy(s string) (*node, error) {
	toks, err := tokenize(strings.ReplaceAll(s, "^", "**"))
	if err != nil {
		return nil, err
	}
	// auto_symbol and split_symbols: a name is pi, sqrt, a Greek letter's name or one with _ (a
	// symbol), or split into one-letter symbols and integers.
	var atoms []token
	for _, t := range toks {
		if t.kind != 'a' {
			atoms = append(atoms, t)
			continue
		}
		switch {
		case pyKeywords[t.text] || sympyNames[t.text]:
			return nil, errEval
		case t.text == "pi" || t.text == "sqrt" || greekNames[t.text] || strings.Contains(t.text, "_") || utf8.RuneCountInString(t.text) == 1:
			atoms = append(atoms, t)
		default:
			rs := []rune(t.text)
			for i := 0; i < len(rs); i++ {
				if unicode.IsDigit(rs[i]) {
					j := i
					for j < len(rs) && unicode.IsDigit(rs[j]) {
						j++
					}
					atoms = append(atoms, token{'n', string(rs[i:j])})
					i = j - 1
					continue
				}
				atoms = append(atoms, token{'a', string(rs[i])})
			}
		}
	}
	// implicit multiplication: between a value's end and a value's start.
	var seq []token
	for i, t := range atoms {
		if i > 0 {
			p := atoms[i-1]
			ends := p.kind == 'n' || (p.kind == 'a' && p.text != "sqrt") || p.text == ")" || p.text == "!"
			starts := t.kind == 'n' || t.kind == 'a' || t.text == "("
			if ends && starts {
				seq = append(seq, token{'o', "*"})
			}
		}
		seq = append(seq, t)
	}
	p := &sympyParser{toks: seq}
	n, err := p.expr()
	if err != nil {
		return nil, err
	}
	if p.i != len(p.toks) {
		return nil, errEval
	}
	return n, nil
}

type sympyParser struct {
	toks []token
	i    int
}

func (p *sympyParser) peek() string {
	if p.i < len(p.toks) && p.toks[p.i].kind == 'o' {
		return p.toks[p.i].text
	}
	return ""
}

func (p *sympyParser) expr() (*node, error) {
	n, err := p.term()
	for err == nil {
		op := p.peek()
		if op != "+" && op != "-" {
			return n, nil
		}
		p.i++
		var r *node
		if r, err = p.term(); err == nil {
			n = &node{op: op[0], a: n, b: r}
		}
	}
	return nil, err
}

func (p *sympyParser) term() (*node, error) {
	n, err := p.unary()
	for err == nil {
		op := p.peek()
		if op != "*" && op != "/" {
			return n, nil
		}
		p.i++
		var r *node
		if r, err = p.unary(); err == nil {
			n = &node{op: op[0], a: n, b: r}
		}
	}
	return nil, err
}

func (p *sympyParser) unary() (*node, error) {
	switch p.peek() {
	case "-":
		p.i++
		n, err := p.unary()
		if err != nil {
			return nil, err
		}
		return &node{op: 'u', a: n}, nil
	case "+":
		p.i++
		return p.unary()
	}
	return p.power()
}

func (p *sympyParser) power() (*node, error) {
	n, err := p.postfix()
	if err != nil {
		return nil, err
	}
	if p.peek() == "**" {
		p.i++
		e, err := p.unary() // Python: the exponent is a unary expression, right-associative
		if err != nil {
			return nil, err
		}
		return &node{op: '^', a: n, b: e}, nil
	}
	return n, nil
}

func (p *sympyParser) postfix() (*node, error) {
	n, err := p.atom()
	for err == nil && p.peek() == "!" {
		p.i++
		n = &node{op: '!', a: n}
	}
	return n, err
}

func (p *sympyParser) atom() (*node, error) {
	if p.i >= len(p.toks) {
		return nil, errEval
	}
	t := p.toks[p.i]
	p.i++
	switch {
	case t.kind == 'n':
		return numberNode(t.text)
	case t.kind == 'a' && t.text == "pi":
		return &node{op: 'p'}, nil
	case t.kind == 'a' && t.text == "sqrt":
		if p.peek() != "(" {
			return nil, errEval
		}
		p.i++
		a, err := p.expr()
		if err != nil || p.peek() != ")" {
			return nil, errEval
		}
		p.i++
		return &node{op: 'r', a: a}, nil
	case t.kind == 'a':
		return &node{op: 's', name: t.text}, nil
	case t.text == "(":
		n, err := p.expr()
		if err != nil || p.peek() != ")" {
			return nil, errEval
		}
		p.i++
		return n, nil
	}
	return nil, errEval
}

// numberNode is auto_number: an integer is exact, a decimal a Float (float64: sympy's default
// 15 digits are 53 bits; with more digits sympy keeps more, so it is kept exact), a j suffix
// imaginary.
func numberNode(text string) (*node, error) {
	text = strings.ReplaceAll(text, "_", "")
	imag := strings.HasSuffix(text, "j") || strings.HasSuffix(text, "J")
	text = strings.TrimRight(text, "jJ")
	if !imag && !strings.ContainsAny(text, ".eE") {
		r, ok := new(big.Rat).SetString(text)
		if !ok {
			return nil, errEval
		}
		return &node{op: 'n', num: exactValue(r)}, nil
	}
	f, ok := pyFloat(text)
	if !ok {
		return nil, errEval
	}
	if mant, _, _ := strings.Cut(strings.ToLower(text), "e"); !imag && len(strings.TrimLeft(strings.ReplaceAll(mant, ".", ""), "0")) > 15 {
		r, ok := new(big.Rat).SetString(text)
		if !ok {
			return nil, errEval
		}
		return &node{op: 'n', num: value{exact: r, float: true}}, nil
	}
	if imag {
		return &node{op: 'n', num: value{c: complex(0, f), float: true}}, nil
	}
	return &node{op: 'n', num: value{c: complex(f, 0), float: true}}, nil
}
