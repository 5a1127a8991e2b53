package main

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// latexToText renders LaTeX as text the way pylatexenc 2.10's LatexNodes2Text().latex_to_text
// does for what answers hold: \frac{a}{b} as a/b (no parentheses: \frac{x+1}{2} is x+1/2),
// \sqrt[n]{x} as √(x), symbols and Greek letters as their characters, text macros as their
// text, \mathbf letters in bold, braces dropped, the space after a macro's name swallowed.
// Macros it does not know vanish and their arguments read as plain groups, as pylatexenc does
// with unknown ones (so a macro pylatexenc knows and this table lacks renders differently;
// docs/trainer.md lists what is covered). ok is false where pylatexenc raises (\sqrt without
// an argument): the grader then keeps its input.
func latexToText(s string) (out string, ok bool) {
	p := &latexParser{s: s}
	var b strings.Builder
	if !p.render(&b, -1) {
		return "", false
	}
	return b.String(), true
}

type latexParser struct {
	s string
	i int
}

// latexSymbols are the macros without arguments and their text.
var latexSymbols = map[string]string{
	"pi": "π", "infty": "∞", "cdot": "·", "times": "×", "div": "÷", "pm": "±", "mp": "∓", "le": "≤", "leq": "≤",
	"ge": "≥", "geq": "≥", "neq": "≠", "approx": "≈", "sim": "∼", "cup": "∪", "cap": "∩", "in": "∈", "notin": "∉",
	"subset": "⊂", "subseteq": "⊆", "supset": "⊃", "emptyset": "∅", "varnothing": "∅", "circ": "∘", "angle": "∠",
	"perp": "⊥", "parallel": "∥", "mid": "|", "to": "→", "rightarrow": "→", "leftarrow": "←", "Rightarrow": "⇒",
	"Leftrightarrow": "⇔", "ldots": "…", "dots": "…", "cdots": "⋯", "lfloor": "⌊", "rfloor": "⌋", "lceil": "⌈",
	"rceil": "⌉", "lbrace": "{", "rbrace": "}", "langle": "⟨", "rangle": "⟩", "prime": "'", "textdegree": "°",
	"wedge": "∧", "vee": "∨", "forall": "∀", "exists": "∃", "partial": "∂", "nabla": "∇", "ell": "ℓ", "hbar": "ħ",
	"aleph": "ℵ", "quad": "  ", "qquad": "    ",
	"alpha": "α", "beta": "β", "gamma": "γ", "delta": "δ", "epsilon": "ϵ", "varepsilon": "ε", "zeta": "ζ", "eta": "η",
	"theta": "θ", "vartheta": "ϑ", "iota": "ι", "kappa": "κ", "lambda": "λ", "mu": "μ", "nu": "ν", "xi": "ξ",
	"rho": "ρ", "sigma": "σ", "tau": "τ", "upsilon": "υ", "phi": "ϕ", "varphi": "φ", "chi": "χ", "psi": "ψ",
	"omega": "ω", "Gamma": "Γ", "Delta": "Δ", "Theta": "Θ", "Lambda": "Λ", "Xi": "Ξ", "Pi": "Π", "Sigma": "Σ",
	"Upsilon": "Υ", "Phi": "Φ", "Psi": "Ψ", "Omega": "Ω",
	"sin": "sin", "cos": "cos", "tan": "tan", "log": "log", "ln": "ln", "exp": "exp", "lim": "lim", "max": "max",
	"min": "min", "arcsin": "arcsin", "arccos": "arccos", "arctan": "arctan", "sinh": "sinh", "cosh": "cosh", "tanh": "tanh",
}

// latexTextMacros take one argument and render as it; latexDropArg take one and render nothing.
var (
	latexTextMacros = map[string]bool{"text": true, "textrm": true, "textbf": true, "textit": true, "textnormal": true,
		"emph": true, "mathrm": true, "operatorname": true, "boxed": true, "overline": true, "underline": true,
		"underbrace": true, "cancel": true}
	latexDropArg = map[string]bool{"mbox": true, "textsf": true, "texttt": true}
	// latexDoubleStruck are \mathbb's letters with characters of their own.
	latexDoubleStruck = map[rune]rune{'C': 'ℂ', 'H': 'ℍ', 'N': 'ℕ', 'P': 'ℙ', 'Q': 'ℚ', 'R': 'ℝ', 'Z': 'ℤ'}
)

// render writes nodes until the end of the text or, at depth >= 0, the group's closing brace.
func (p *latexParser) render(b *strings.Builder, depth int) bool {
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == '}':
			p.i++
			if depth >= 0 {
				return true
			}
		case c == '{':
			p.i++
			if !p.render(b, depth+1) {
				return false
			}
		case c == '%':
			for p.i < len(p.s) && p.s[p.i] != '\n' {
				p.i++
			}
		case c == '\\':
			if !p.macro(b) {
				return false
			}
		case c == '~':
			p.i++
			b.WriteString("\u00a0")
		default:
			r, n := utf8.DecodeRuneInString(p.s[p.i:])
			p.i += n
			b.WriteRune(r)
		}
	}
	return true
}

// macro renders the macro at p.i (a backslash).
func (p *latexParser) macro(b *strings.Builder) bool {
	p.i++
	if p.i >= len(p.s) {
		return true
	}
	name := p.name()
	if name == "" { // a control symbol: \, \{ \% …; the space after it stays
		p.control(b)
		return true
	}
	p.skipSpace()
	switch {
	case name == "frac":
		num, ok1 := p.arg()
		den, ok2 := p.arg()
		if !ok1 || !ok2 {
			b.WriteString("%s/%s") // pylatexenc's failed substitution; the arguments follow as text
			if ok1 {
				b.WriteString(num)
			}
			return true
		}
		b.WriteString(num + "/" + den)
	case name == "sqrt":
		p.optional()
		x, ok := p.arg()
		if !ok {
			return false // pylatexenc raises
		}
		b.WriteString("√(" + x + ")")
	case latexTextMacros[name]:
		x, _ := p.arg()
		b.WriteString(x)
	case latexDropArg[name]:
		p.arg()
	case name == "mathbf":
		x, _ := p.arg()
		for _, r := range x {
			switch {
			case r >= 'a' && r <= 'z':
				r = 0x1D41A + (r - 'a')
			case r >= 'A' && r <= 'Z':
				r = 0x1D400 + (r - 'A')
			}
			b.WriteRune(r)
		}
	case name == "mathbb":
		x, _ := p.arg()
		for _, r := range x {
			if d, ok := latexDoubleStruck[r]; ok {
				r = d
			}
			b.WriteRune(r)
		}
	default:
		b.WriteString(latexSymbols[name]) // unknown macros render as nothing
	}
	return true
}

// control renders the control symbol after a backslash at p.i.
func (p *latexParser) control(b *strings.Builder) {
	r, n := utf8.DecodeRuneInString(p.s[p.i:])
	p.i += n
	switch r {
	case ',', ';', ':', ' ':
		b.WriteString(" ")
	case '\\':
		b.WriteString("\n")
	case '{', '}', '%', '$', '&', '#', '_':
		b.WriteRune(r)
	}
}

// name reads a macro's name (letters), or "" for a control symbol.
func (p *latexParser) name() string {
	j := p.i
	for j < len(p.s) && (p.s[j] >= 'a' && p.s[j] <= 'z' || p.s[j] >= 'A' && p.s[j] <= 'Z') {
		j++
	}
	n := p.s[p.i:j]
	p.i = j
	return n
}

func (p *latexParser) skipSpace() {
	for p.i < len(p.s) && unicode.IsSpace(rune(p.s[p.i])) {
		p.i++
	}
}

// optional skips a [...] argument.
func (p *latexParser) optional() {
	p.skipSpace()
	if p.i < len(p.s) && p.s[p.i] == '[' {
		if end := strings.IndexByte(p.s[p.i:], ']'); end >= 0 {
			p.i += end + 1
		}
	}
}

// arg reads a mandatory argument: a group, a macro (alone, without its own arguments) or one
// character, rendered; false at the end of the text or a closing brace.
func (p *latexParser) arg() (string, bool) {
	p.skipSpace()
	if p.i >= len(p.s) || p.s[p.i] == '}' {
		return "", false
	}
	var b strings.Builder
	switch c := p.s[p.i]; c {
	case '{':
		p.i++
		if !p.render(&b, 0) {
			return "", false
		}
	case '\\':
		p.i++
		switch name := p.name(); {
		case name == "" && p.i < len(p.s):
			p.control(&b)
		case name == "frac":
			p.skipSpace()
			b.WriteString("%s/%s")
		default:
			p.skipSpace()
			b.WriteString(latexSymbols[name])
		}
	default:
		r, n := utf8.DecodeRuneInString(p.s[p.i:])
		p.i += n
		b.WriteRune(r)
	}
	return b.String(), true
}
