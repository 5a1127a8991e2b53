package main

import (
	"math"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// This file is EasyR1's math accuracy reward in Go: mathruler.grader.grade_answer, which is
// PRM800K's grader. An answer is right when the MATH dataset's normalisation (Hendrycks'
// _strip_string: mathdNormalize) makes it equal to the ground truth, or PRM800K's own
// (prm800kNormalize: units, words, LaTeX as pylatexenc renders it to text) does, or when sympy
// simplifies their difference to 0 — per element of a tuple or interval, never for two
// fractions (an unreduced one is wrong) nor for an integer against a non-integer. sympy is
// replaced by symbolicEqual; docs/trainer.md says what this port does not cover. The goldens
// of scripts/mathruler_goldens.py (the Python grader run with sympy and pylatexenc) test it.

// extractBoxedContent is mathruler's extract_boxed_content: the content of the last
// \boxed{…} (braces balanced), trimmed, or "None" when there is none.
func extractBoxedContent(text string) string {
	at := strings.LastIndex(text, `\boxed{`)
	if at < 0 {
		return "None"
	}
	content := text[at+len(`\boxed{`):]
	depth := 0
	for i := 0; i < len(content); i++ {
		switch content[i] {
		case '{':
			depth++
		case '}':
			if depth--; depth == -1 {
				return pyStrip(content[:i])
			}
		}
	}
	return "None"
}

// gradeAnswer is mathruler's grade_answer(given, truth).
func gradeAnswer(given, truth string) bool {
	if mathdNormalize(truth) == mathdNormalize(given) {
		return true
	}
	t, g := prm800kNormalize(truth), prm800kNormalize(given)
	if t == g {
		return true
	}
	if g == "" {
		return false
	}
	te, ge := splitTuple(t), splitTuple(g)
	if len(te) > 1 && (firstRune(t) != firstRune(g) || lastRune(t) != lastRune(g)) {
		return false
	}
	if len(te) != len(ge) {
		return false
	}
	for i := range te {
		a, b := te[i], ge[i]
		var ok bool
		switch {
		case isFrac(a) && isFrac(b):
			ok = a == b // an unreduced fraction is not the reduced one
		case strIsInt(a) != strIsInt(b):
			ok = false
		default:
			ok = symbolicEqual(a, b)
		}
		if !ok {
			return false
		}
	}
	return true
}

func firstRune(s string) rune { r, _ := utf8.DecodeRuneInString(s); return r }
func lastRune(s string) rune  { r, _ := utf8.DecodeLastRuneInString(s); return r }

// pyStrip is Python's str.strip(): Unicode white space off both ends.
func pyStrip(s string) string { return strings.TrimFunc(s, pyIsSpace) }

func pyIsSpace(r rune) bool { return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f) }

// textWrapRE is the graders' "^\\text\{(?P<text>.+?)\}$" (Python's $ also matches before a final
// newline).
var textWrapRE = regexp.MustCompile(`^\\text\{(.+?)\}\n?$`)

// mathdNormalize is mathruler's mathd_normalize_answer: strip, an enclosing \text{…} off, then
// _strip_string; where the Python raises (a \sqrt or \frac at the very end, two "\text{ "
// units), the answer as it was before _strip_string.
func mathdNormalize(answer string) string {
	answer = pyStrip(answer)
	if m := textWrapRE.FindStringSubmatch(answer); m != nil {
		answer = pyStrip(m[1])
	}
	s, ok := stripString(answer)
	if !ok {
		return answer
	}
	return s
}

// stripString is Hendrycks' _strip_string; ok is false where the Python raises.
func stripString(s string) (string, bool) {
	s = strings.NewReplacer("\n", "", `\!`, "").Replace(s)
	s = strings.ReplaceAll(s, `\\`, `\`)
	s = strings.NewReplacer("tfrac", "frac", "dfrac", "frac").Replace(s)
	s = strings.ReplaceAll(strings.ReplaceAll(s, `\left`, ""), `\right`, "")
	s = strings.ReplaceAll(strings.ReplaceAll(s, `^{\circ}`, ""), `^\circ`, "")
	s = strings.ReplaceAll(s, `\$`, "")
	if strings.Contains(s, `\text{ `) { // units on the right
		parts := strings.Split(s, `\text{ `)
		if len(parts) != 2 {
			return "", false
		}
		s = parts[0]
	}
	s = strings.ReplaceAll(s, `\%`, "")
	s = strings.ReplaceAll(strings.ReplaceAll(s, " .", " 0."), "{.", "{0.")
	if s == "" {
		return s, true
	}
	if s[0] == '.' {
		s = "0" + s
	}
	if parts := strings.Split(s, "="); len(parts) == 2 && utf8.RuneCountInString(parts[0]) <= 2 {
		s = parts[1]
	}
	if strings.Contains(s, `\sqrt`) { // \sqrt3 → \sqrt{3}
		parts := strings.Split(s, `\sqrt`)
		var b strings.Builder
		b.WriteString(parts[0])
		for _, p := range parts[1:] {
			if p == "" {
				return "", false
			}
			r, n := utf8.DecodeRuneInString(p)
			if r != '{' {
				b.WriteString(`\sqrt{` + p[:n] + "}" + p[n:])
			} else {
				b.WriteString(`\sqrt` + p)
			}
		}
		s = b.String()
	}
	s = strings.ReplaceAll(s, " ", "")
	s, ok := fixFracs(s)
	if !ok {
		return "", false
	}
	if s == "0.5" {
		s = `\frac{1}{2}`
	}
	return fixASlashB(s), true
}

// fixFracs is _fix_fracs: \frac12 → \frac{1}{2}, \frac1{b} → \frac{1}{b}.
func fixFracs(s string) (string, bool) {
	parts := strings.Split(s, `\frac`)
	var b strings.Builder
	b.WriteString(parts[0])
	for _, p := range parts[1:] {
		b.WriteString(`\frac`)
		if p == "" {
			return "", false // IndexError in the Python
		}
		if p[0] == '{' {
			b.WriteString(p)
			continue
		}
		rs := []rune(p)
		if len(rs) < 2 {
			return s, true
		}
		a, c, rest := string(rs[0]), string(rs[1]), string(rs[2:])
		if c != "{" {
			b.WriteString("{" + a + "}{" + c + "}" + rest)
		} else {
			b.WriteString("{" + a + "}" + c + rest)
		}
	}
	return b.String(), true
}

var canonicalIntRE = regexp.MustCompile(`^(0|-?[1-9][0-9]*)$`)

// fixASlashB is _fix_a_slash_b: "a/b" of two integers as Python prints them → \frac{a}{b}.
func fixASlashB(s string) string {
	parts := strings.Split(s, "/")
	if len(parts) != 2 || !canonicalIntRE.MatchString(parts[0]) || !canonicalIntRE.MatchString(parts[1]) {
		return s
	}
	return `\frac{` + parts[0] + "}{" + parts[1] + "}"
}

var (
	unitREs = func() []*regexp.Regexp {
		var out []*regexp.Regexp
		for _, u := range []string{"degree", "cm", "centimeter", "meter", "mile", "second", "minute", "hour", "day",
			"week", "month", "year", "foot", "feet", "inch", "yard"} {
			out = append(out, regexp.MustCompile(u+`(es)?(s)? *(\^[0-9]+)?`))
		}
		return out
	}()
	circRE      = regexp.MustCompile(`\^ *\\circ`)
	commaBangRE = regexp.MustCompile(`,\\! *`)
	minusRE     = regexp.MustCompile(`- *`)
	mixedRE     = regexp.MustCompile(`([0-9]) +([0-9])`)
	commasRE    = regexp.MustCompile(`(\p{Nd})(,)(\p{Nd}\p{Nd}\p{Nd})($|\P{Nd})`)
	intFracRE   = regexp.MustCompile(`^-?[0-9]+.?/0*[1-9][0-9]*.?\n?$`)
)

// prm800kNormalize is PRM800K's _normalize: an enclosing \text{…} off; $, %, units, "or"/"and",
// million/billion/trillion, degrees and thousands separators rewritten; a float that is an
// integer printed as one; LaTeX rendered to text as pylatexenc does (latexToText); spaces and
// braces dropped, lower case, an integer printed as one.
func prm800kNormalize(expr string) string {
	if m := textWrapRE.FindStringSubmatch(expr); m != nil {
		expr = m[1]
	}
	expr = strings.NewReplacer(`\%`, "%", `\$`, "$").Replace(expr)
	expr = strings.NewReplacer("$", "", "%", "").Replace(expr)
	expr = strings.ReplaceAll(strings.ReplaceAll(expr, " or ", " , "), " and ", " , ")
	expr = strings.ReplaceAll(expr, "million", "*10^6")
	expr = strings.ReplaceAll(expr, "billion", "*10^9")
	expr = strings.ReplaceAll(expr, "trillion", "*10^12")
	for _, re := range unitREs {
		expr = re.ReplaceAllString(expr, "")
	}
	expr = circRE.ReplaceAllString(expr, "")
	if len(expr) > 0 && expr[0] == '{' && expr[len(expr)-1] == '}' {
		expr = expr[1 : len(expr)-1]
	}
	expr = commaBangRE.ReplaceAllString(expr, "")
	if x, ok := pyFloat(expr); ok && isIntFloat(x) {
		expr = intString(math.RoundToEven(x))
	}
	if strings.Contains(expr, `\`) {
		if t, ok := parseLaTeX(expr); ok {
			expr = t
		}
	}
	expr = minusRE.ReplaceAllString(expr, "-")
	expr = mixedRE.ReplaceAllString(expr, "$1+$2") // a mixed number: 7 3/4 is 7+3/4
	expr = strings.NewReplacer(" ", "", "{", "", "}", "").Replace(expr)
	expr = strings.ToLower(expr)
	if strIsInt(expr) {
		x, _ := pyFloat(strings.ReplaceAll(expr, ",", ""))
		expr = intString(math.Trunc(x))
	}
	return expr
}

// parseLaTeX is the grader's _parse_latex: pylatexenc's text of expr with √, π, ∞, ∪, · and ×
// spelled for sympy; false where pylatexenc raises.
func parseLaTeX(expr string) (string, bool) {
	expr = strings.NewReplacer(`\tfrac`, `\frac`, `\dfrac`, `\frac`).Replace(expr)
	expr = strings.ReplaceAll(expr, `\frac`, ` \frac`)
	expr, ok := latexToText(expr)
	if !ok {
		return "", false
	}
	expr = strings.NewReplacer("√", "sqrt", "π", "pi", "∞", "inf", "∪", "U", "·", "*", "×", "*").Replace(expr)
	return pyStrip(expr), true
}

// pyFloat is Python's float(s) on the strings the grader meets: decimal numbers with an
// optional sign and exponent, inf and nan, surrounded by white space.
func pyFloat(s string) (float64, bool) {
	s = pyStrip(s)
	if s == "" || strings.ContainsAny(s, "_xXpP") {
		return 0, false
	}
	x, err := strconv.ParseFloat(s, 64)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
			return x, true // Python overflows to inf and underflows to 0 as well
		}
		return 0, false
	}
	return x, true
}

// isIntFloat is _is_int: within 1e-7 of round(x) (false for inf and nan, which Python cannot
// round to an int).
func isIntFloat(x float64) bool {
	if math.IsInf(x, 0) || math.IsNaN(x) {
		return false
	}
	return math.Abs(x-math.RoundToEven(x)) <= 1e-7
}

// intString is str(int(x)) of an integral float: exact, as Python's big integers.
func intString(x float64) string {
	i, _ := big.NewFloat(x).Int(nil)
	return i.String()
}

// stripCommas is _strip_properly_formatted_commas: 1,000,000 → 1000000, tuples left alone.
func stripCommas(s string) string {
	for {
		t := commasRE.ReplaceAllString(s, "$1$3$4")
		if t == s {
			return t
		}
		s = t
	}
}

// strIsInt is _str_is_int.
func strIsInt(s string) bool {
	x, ok := pyFloat(stripCommas(s))
	return ok && isIntFloat(x)
}

// isFrac is _is_frac: an integer over a positive integer.
func isFrac(s string) bool { return intFracRE.MatchString(s) }

// splitTuple is split_tuple: the elements of (a,b), [a,b), … (brackets only at the ends).
func splitTuple(expr string) []string {
	expr = stripCommas(expr)
	if expr == "" {
		return nil
	}
	rs := []rune(expr)
	isB := func(r rune) bool { return strings.ContainsRune("()[]", r) }
	if len(rs) > 2 && isB(rs[0]) && isB(rs[len(rs)-1]) && !strings.ContainsAny(string(rs[1:len(rs)-1]), "()[]") {
		parts := strings.Split(string(rs[1:len(rs)-1]), ",")
		for i, p := range parts {
			parts[i] = pyStrip(p)
		}
		return parts
	}
	return []string{expr}
}
