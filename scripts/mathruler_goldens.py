#!/usr/bin/python3
"""Goldens for the trainer's Go port of mathruler's grade_answer (EasyR1's math reward).

mathruler.grader.grade_answer is the PRM800K grader: an answer is right when the MATH
dataset's normalisation (Hendrycks' _strip_string) makes it equal to the ground truth, or when
PRM800K's own normalisation (units, words, LaTeX to text with pylatexenc) does, or when sympy
simplifies their difference to 0 (per element of a tuple or interval, with rules for integers
and unreduced fractions). This script is a transcription of that grader, run with Debian's
python3-sympy (1.11) and python3-pylatexenc (2.10); it writes, for each case of CASES, both
normalisations of both sides and the grade:

    /usr/bin/python3 scripts/mathruler_goldens.py > examples/trainer/testdata/mathruler_goldens.json

The Go side (examples/trainer/mathruler.go) reads that file in its tests.
"""

import json
import re
import sys

import sympy
from pylatexenc import latex2text
from sympy.parsing import sympy_parser

# --- the MATH dataset's normalisation (mathd) -------------------------------------------------


def _fix_fracs(s):
    parts = s.split("\\frac")
    out = parts[0]
    for part in parts[1:]:
        out += "\\frac"
        if part[0] == "{":  # IndexError on an empty part: the caller's except
            out += part
            continue
        if len(part) < 2:
            return s
        a, b, rest = part[0], part[1], part[2:]
        if b != "{":
            out += "{" + a + "}{" + b + "}" + rest
        else:
            out += "{" + a + "}" + b + rest
    return out


def _fix_a_slash_b(s):
    if len(s.split("/")) != 2:
        return s
    a, b = s.split("/")
    try:
        ia, ib = int(a), int(b)
        if s != "{}/{}".format(ia, ib):
            return s
        return "\\frac{" + str(ia) + "}{" + str(ib) + "}"
    except ValueError:
        return s


def _remove_right_units(s):
    if "\\text{ " in s:
        parts = s.split("\\text{ ")
        assert len(parts) == 2
        return parts[0]
    return s


def _fix_sqrt(s):
    if "\\sqrt" not in s:
        return s
    parts = s.split("\\sqrt")
    out = parts[0]
    for part in parts[1:]:
        if part[0] != "{":  # IndexError on an empty part: the caller's except
            out += "\\sqrt{" + part[0] + "}" + part[1:]
        else:
            out += "\\sqrt" + part
    return out


def _strip_string(s):
    s = s.replace("\n", "").replace("\\!", "").replace("\\\\", "\\")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac")
    s = s.replace("\\left", "").replace("\\right", "")
    s = s.replace("^{\\circ}", "").replace("^\\circ", "")
    s = s.replace("\\$", "")
    s = _remove_right_units(s)
    s = s.replace("\\%", "")
    s = s.replace(" .", " 0.").replace("{.", "{0.")
    if len(s) == 0:
        return s
    if s[0] == ".":
        s = "0" + s
    if len(s.split("=")) == 2 and len(s.split("=")[0]) <= 2:
        s = s.split("=")[1]
    s = _fix_sqrt(s)
    s = s.replace(" ", "")
    s = _fix_fracs(s)
    if s == "0.5":
        s = "\\frac{1}{2}"
    return _fix_a_slash_b(s)


def mathd_normalize(answer):
    answer = answer.strip()
    try:
        m = re.search(r"^\\text\{(?P<text>.+?)\}$", answer)
        if m is not None:
            answer = m.group("text").strip()
        return _strip_string(answer)
    except Exception:
        return answer


# --- PRM800K's normalisation -------------------------------------------------------------------

UNITS = ["degree", "cm", "centimeter", "meter", "mile", "second", "minute", "hour", "day", "week",
         "month", "year", "foot", "feet", "inch", "yard"]


def _parse_latex(expr):
    expr = expr.replace("\\tfrac", "\\frac").replace("\\dfrac", "\\frac").replace("\\frac", " \\frac")
    expr = latex2text.LatexNodes2Text().latex_to_text(expr)
    for a, b in [("√", "sqrt"), ("π", "pi"), ("∞", "inf"), ("∪", "U"), ("·", "*"), ("×", "*")]:
        expr = expr.replace(a, b)
    return expr.strip()


def _is_float(s):
    try:
        float(s)
        return True
    except ValueError:
        return False


def _is_int(x):
    try:
        return abs(x - int(round(x))) <= 1e-7
    except Exception:
        return False


def _is_frac(s):
    return bool(re.search(r"^-?[0-9]+.?/0*[1-9][0-9]*.?$", s))


def _strip_commas(s):
    p = re.compile(r"(\d)(,)(\d\d\d)($|\D)")
    while True:
        t = p.sub("\\1\\3\\4", s)
        if t == s:
            return t
        s = t


def _str_is_int(s):
    try:
        x = float(_strip_commas(s))
        return abs(x - int(round(x))) <= 1e-7
    except Exception:
        return False


def normalize(expr):
    m = re.search(r"^\\text\{(?P<text>.+?)\}$", expr)
    if m is not None:
        expr = m.group("text")
    expr = expr.replace("\\%", "%").replace("\\$", "$").replace("$", "").replace("%", "")
    expr = expr.replace(" or ", " , ").replace(" and ", " , ")
    expr = expr.replace("million", "*10^6").replace("billion", "*10^9").replace("trillion", "*10^12")
    for unit in UNITS:
        expr = re.sub(f"{unit}(es)?(s)? *(\\^[0-9]+)?", "", expr)
    expr = re.sub(r"\^ *\\circ", "", expr)
    if len(expr) > 0 and expr[0] == "{" and expr[-1] == "}":
        expr = expr[1:-1]
    expr = re.sub(r",\\! *", "", expr)
    if _is_float(expr) and _is_int(float(expr)):
        expr = str(int(round(float(expr))))
    if "\\" in expr:
        try:
            expr = _parse_latex(expr)
        except Exception:
            pass
    expr = re.sub("- *", "-", expr)
    expr = re.sub("([0-9]) +([0-9])", "\\1+\\2", expr)  # a mixed number: 7 3/4 is 7+3/4
    expr = expr.replace(" ", "").replace("{", "").replace("}", "").lower()
    if _str_is_int(expr):
        expr = str(int(float(expr.replace(",", ""))))
    return expr


# --- equality ----------------------------------------------------------------------------------


def should_allow_eval(expr):
    letters = set(x for x in expr.replace("sqrt", "").replace("frac", "") if x.isalpha())
    if len(letters) > 2:
        return False
    if "^{" in expr or "^(" in expr:
        return False
    return re.search(r"\^[0-9]+\^", expr) is None and re.search(r"\^[0-9][0-9]+", expr) is None


def equal_under_sympy(truth, given):
    try:
        expr = f"({truth})-({given})"
        if should_allow_eval(expr):
            diff = sympy_parser.parse_expr(
                expr.replace("^", "**"),
                transformations=sympy_parser.standard_transformations + (sympy_parser.implicit_multiplication_application,))
            return sympy.simplify(diff) == 0
    except Exception:
        pass
    return False


def split_tuple(expr):
    expr = _strip_commas(expr)
    if len(expr) == 0:
        return []
    if len(expr) > 2 and expr[0] in "()[]" and expr[-1] in "()[]" and all(ch not in expr[1:-1] for ch in "()[]"):
        return [e.strip() for e in expr[1:-1].split(",")]
    return [expr]


def grade_answer(given, truth):
    if mathd_normalize(truth) == mathd_normalize(given):
        return True
    t, g = normalize(truth), normalize(given)
    if t == g:
        return True
    if len(g) == 0:
        return False
    te, ge = split_tuple(t), split_tuple(g)
    if len(te) > 1 and (t[0] != g[0] or t[-1] != g[-1]):
        return False
    if len(te) != len(ge):
        return False
    for a, b in zip(te, ge):
        if _is_frac(a) and _is_frac(b):
            ok = a == b  # an unreduced fraction is not the reduced one
        elif _str_is_int(a) != _str_is_int(b):
            ok = False
        else:
            ok = equal_under_sympy(a, b)
        if not ok:
            return False
    return True


def extract_boxed(text):
    """mathruler.grader.extract_boxed_content: the last \\boxed{...}, stripped, or "None"."""
    at = text.rfind("\\boxed{")
    if at < 0:
        return "None"
    depth = 0
    content = text[at + len("\\boxed{"):]
    for i, ch in enumerate(content):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if depth == -1:
            return content[:i].strip()
    return "None"


# (given, ground truth)
CASES = [
    ("7", "7"), ("7.0", "7"), ("7.5", "7"), ("1,000", "1000"), ("1000", "1,000"), ("1,000,000", "10^6"),
    ("0.5", "\\frac{1}{2}"), ("1/2", "\\frac{1}{2}"), ("\\frac12", "\\frac{1}{2}"), ("\\dfrac{1}{2}", "0.5"),
    ("2/4", "1/2"), ("\\frac{2}{4}", "\\frac{1}{2}"), ("0.50", "1/2"), (".5", "0.5"), ("0.333", "\\frac{1}{3}"),
    ("\\frac{3}{4}", "0.75"), ("3/4", "0.75"), ("-\\frac{1}{2}", "-0.5"), ("- 1/2", "-1/2"), ("7 3/4", "31/4"),
    ("7\\frac{3}{4}", "\\frac{31}{4}"), ("\\sqrt{2}/2", "\\frac{\\sqrt{2}}{2}"), ("\\frac{1}{\\sqrt{2}}", "\\frac{\\sqrt{2}}{2}"),
    ("\\sqrt2", "\\sqrt{2}"), ("2\\sqrt{3}", "\\sqrt{12}"), ("\\sqrt{8}", "2\\sqrt{2}"), ("3\\sqrt{2}", "\\sqrt{18}"),
    ("2\\pi", "2 \\pi"), ("\\pi/2", "\\frac{\\pi}{2}"), ("90^\\circ", "90"), ("90^{\\circ}", "90"), ("90 degrees", "90"),
    ("50\\%", "50"), ("50%", "0.5"), ("\\$5", "5"), ("5 dollars", "5"), ("\\text{5 cm}", "5"), ("5 \\text{ cm}", "5"),
    ("12 inches", "12"), ("3 hours", "3"), ("\\text{(B)}", "B"), ("B", "b"), ("\\text{B}", "B"), ("(B)", "B"),
    ("x = 3", "3"), ("x=3", "3"), ("y = 2x + 1", "2x+1"), ("k = \\frac{1}{2}", "1/2"), ("3", "x = 3"),
    ("x+1", "1+x"), ("2x+2", "2(x+1)"), ("x^2-1", "(x-1)(x+1)"), ("x^2+2x+1", "(x+1)^2"), ("x^2", "x*x"),
    ("\\frac{x^2-1}{x-1}", "x+1"), ("\\sqrt{x^2}", "x"), ("2x", "x2"), ("xy", "yx"), ("a+b", "b+a"),
    ("(1,2)", "(1, 2)"), ("(1,2)", "[1,2]"), ("(2,1)", "(1,2)"), ("(1, 2, 3)", "(1,2,3)"), ("[0, 1)", "[0,1)"),
    ("(0,\\frac{1}{2})", "(0, 0.5)"), ("(1,2)", "(1,2,3)"), ("1, 2", "1,2"), ("2, 1", "1, 2"), ("1 and 2", "1, 2"),
    ("3 or 4", "3,4"), ("\\{1,2\\}", "1,2"), ("2 million", "2000000"), ("1.5 billion", "1500000000"),
    ("10^6", "1000000"), ("1e6", "1000000"), ("2^{10}", "1024"), ("2^10", "1024"), ("3!", "6"), ("\\infty", "\\infty"),
    ("-\\infty", "-inf"), ("\\pi", "3.14"), ("3.14159", "\\pi"), ("0.1+0.2", "0.3"), ("1/3", "0.3333333333"),
    ("\\frac{1}{3}", "1/3"), ("1/3", "2/6"), ("4/2", "2"), ("2", "4/2"), ("6/3", "\\frac{6}{3}"),
    ("\\left(1,2\\right)", "(1,2)"), ("\\left[ 0, 1\\right]", "[0,1]"), ("\\mathrm{cm}", "cm"), ("\\textbf{5}", "5"),
    ("\\boxed{5}", "5"), ("5.", "5"), ("12.", "12"), ("None", "5"), ("", "5"), ("  7 ", "7"), ("−3", "-3"),
    ("-3", "-3"), ("- 3", "-3"), ("3-", "3"), ("i", "\\sqrt{-1}"), ("2i", "2 i"), ("e", "e"), ("\\sqrt{-4}", "2i"),
    ("\\frac{1}{0}", "1"), ("1/0", "zoo"), ("x^22", "x^22"), ("x^{22}", "x^22"), ("x^2^3", "x^8"), ("2^(3)", "8"),
    ("三", "3"), ("答案是3", "3"), ("\\text{三角形}", "三角形"), ("7", "七"), ("abc", "ABC"), ("abc", "acb"),
    ("xyz", "zyx"), ("x+y+z", "z+y+x"), ("\\alpha", "\\alpha"), ("\\sin x", "\\sin(x)"), ("\\cos^2 x + \\sin^2 x", "1"),
    ("\\frac{\\sqrt{3}}{2}", "0.866"), ("\\sqrt{3}/2", "\\sqrt{3} / 2"), ("5\\sqrt{2}", "\\sqrt{50}"),
    ("\\frac{5}{\\sqrt{5}}", "\\sqrt{5}"), ("(1+\\sqrt{5})/2", "\\frac{1+\\sqrt{5}}{2}"), ("1.5", "3/2"),
    ("1.5", "\\frac{3}{2}"), ("15/10", "3/2"), ("2.0", "2"), ("2.00001", "2"), ("100", "1e2"), ("0", "-0"),
    ("0.0", "0"), ("10", "10.0000000001"), ("x \\in [0,1]", "[0,1]"), ("x \\le 3", "x \\leq 3"), ("(-\\infty, 3)", "(-inf,3)"),
    ("x^2-y^2", "(x-y)(x+y)"), ("(x+y)^2", "x^2+2xy+y^2"), ("1/x+1/y", "(x+y)/(xy)"), ("x/x^2", "1/x"),
    ("\\frac{x}{x^2}", "\\frac{1}{x}"), ("\\sqrt{4x^2}", "2x"), ("0.5x", "x/2"), ("0.1x+0.2x", "0.3x"), ("2^0.5", "\\sqrt{2}"),
    ("x^0.5", "\\sqrt{x}"), ("\\frac{\\pi}{4}", "0.785"), ("\\sqrt{2}", "1.41421356237"), ("0.5\\pi", "\\frac{\\pi}{2}"),
    ("\\frac{1}{1+\\sqrt{2}}", "\\sqrt{2}-1"), ("\\sqrt{3+2\\sqrt{2}}", "1+\\sqrt{2}"), ("\\sqrt{12}", "3.4641016151377544"),
    ("(-8)^(1/3)", "-2"), ("\\sqrt[3]{8}", "2"), ("8^{1/3}", "2"), ("x^3/x", "x^2"), ("x^-1", "1/x"), ("2^-1", "0.5"),
    ("-x^2", "-(x^2)"), ("(-x)^2", "x^2"), ("5!", "120"), ("x!", "x!"), ("4!/2", "12"), ("2j", "2*i"), ("1/3+1/6", "1/2"),
    ("1/3+1/6", "0.5"), ("\\frac{2}{3}", "0.6666666666666666"), ("\\frac{2}{3}", "0.67"), ("e^2", "ee"), ("2e", "e+e"),
    ("1e-3", "0.001"), ("2.5e2", "250"), ("\\frac{x+1}{x}", "1+1/x"), ("x(x+1)", "x^2+x"), ("(x+1)(x-1)", "x^2-1"),
    ("\\sqrt{x}\\sqrt{x}", "x"), ("\\sqrt{x^2}", "-x"), ("\\frac{\\sqrt{2}}{2}", "\\frac{\\sqrt{8}}{4}"), ("\\pi^2", "\\pi\\pi"),
    ("2\\pi r", "2r\\pi"), ("\\pi r^2", "r^2\\pi"), ("a^2+b^2", "b^2+a^2"), ("ab", "ba"), ("a/b", "\\frac{a}{b}"), ("y", "y+0"),
    ("\\frac{1}{2}\\text{ cm}", "\\frac12"), ("\\text{ cm}", ""), ("\\sqrt", "\\sqrt"), ("\\frac", "\\frac"), ("\\frac1", "1"),
]

BOXED = [
    "so the answer is \\boxed{7}.", "\\boxed{\\frac{1}{2}} and \\boxed{ 3 }", "\\boxed{a{b}c}", "\\boxed{unclosed",
    "no box here", "\\boxed{}", "\\boxed {5}", "<think>x</think> \\boxed{\\text{B}}",
]


# LaTeX rendered to text by pylatexenc (None: it raises).
LATEX = [
    r"\frac{1}{2}", r" \frac{x+1}{2}", r"\frac12", r"\frac 1 2", r"\frac{1}2", r"\frac\pi2", r"\frac{a}", r"\frac",
    r"\frac{\frac{1}{2}}{3}", r"\sqrt{2}", r"\sqrt[3]{8}", r"\sqrt3", r"\sqrt 2", r"\sqrt", r"\sqrt{", r"\sqrt\frac12",
    r"2\pi", r"\pi r^2", r"a\cdot b", r"\cdot5", r"3\times 4", r"a \div b", r"\text{abc} d", r"\text{a}\text{b}",
    r"\textbf{a} b", r"\mathrm{cm}", r"\operatorname{sign}(x)", r"\boxed{3}", r"\mbox{x}", r"\texttt{x}",
    r"\left( 1, 2 \right)", r"\left[ 0, 1\right)", r"a\left.b", r"x^{2}", r"x_{1}", r"x^", r"\le", r"\ge \neq \pm",
    r"\ne 3", r"\{1,2\}", r"\{ x", r"\$5", r"50\%", r"a%c", r"a\,b", r"a\;b", r"a\!b", r"\, x", r"a\quad x",
    r"a\qquad b", r"a\ b", r"a\\ b", r"\alpha\beta", r"\Delta", r"\sin  x", r"\log_2 8", r"\binom{5}{2}",
    r"\foo{3}", r"\hbox{3}", r"\mathbf{ab1}", r"\mathbb{R}", r"\infty", r"\emptyset", r"x \in [0,1)",
    r"\lbrace x\rbrace", r"\lfloor x \rfloor", r"{x}", r"{a", r"a}b", r"\displaystyle \frac{1}{2}", r"\triangle",
    r"90^\circ", r"\(x\)", r"~", r"\to", r"\cup", r"\varepsilon\epsilon\phi\varphi", r"\textdegree",
]


def latex_text(s):
    try:
        return latex2text.LatexNodes2Text().latex_to_text(s)
    except Exception:
        return None


def main():
    strings = sorted({s for pair in CASES for s in pair})
    out = {
        "tool": "scripts/mathruler_goldens.py with sympy %s and pylatexenc (Debian)" % sympy.__version__,
        "normalized": [{"s": s, "mathd": mathd_normalize(s), "prm800k": normalize(s)} for s in strings],
        "grades": [{"given": g, "truth": t, "correct": grade_answer(g, t)} for g, t in CASES],
        "boxed": [{"text": b, "content": extract_boxed(b)} for b in BOXED],
        "latex": [{"latex": x, "text": latex_text(x)} for x in LATEX],
    }
    json.dump(out, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
