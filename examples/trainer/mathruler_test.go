package main

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// mathrulerGoldens is testdata/mathruler_goldens.json, written by scripts/mathruler_goldens.py:
// the Python grader run with sympy and pylatexenc.
type mathrulerGoldens struct {
	Normalized []struct{ S, Mathd, Prm800k string }
	Grades     []struct {
		Given, Truth string
		Correct      bool
	}
	Boxed []struct{ Text, Content string }
	Latex []struct {
		Latex string
		Text  *string
	}
}

func loadMathrulerGoldens(t *testing.T) mathrulerGoldens {
	t.Helper()
	data, err := os.ReadFile("testdata/mathruler_goldens.json")
	require.NoError(t, err)
	var g mathrulerGoldens
	require.NoError(t, json.Unmarshal(data, &g))
	require.NotEmpty(t, g.Grades)
	return g
}

// TestMathrulerGoldens: both normalisations, the boxed answer, pylatexenc's text and the grade
// of every golden case equal the Python grader's.
func TestMathrulerGoldens(t *testing.T) {
	g := loadMathrulerGoldens(t)
	for _, c := range g.Latex {
		got, ok := latexToText(c.Latex)
		if c.Text == nil {
			assert.False(t, ok, "latexToText(%q) = %q, pylatexenc raises", c.Latex, got)
			continue
		}
		if assert.True(t, ok, "latexToText(%q) failed, pylatexenc gives %q", c.Latex, *c.Text) {
			assert.Equal(t, *c.Text, got, "latexToText(%q)", c.Latex)
		}
	}
	for _, c := range g.Normalized {
		assert.Equal(t, c.Mathd, mathdNormalize(c.S), "mathd_normalize_answer(%q)", c.S)
		assert.Equal(t, c.Prm800k, prm800kNormalize(c.S), "_normalize(%q)", c.S)
	}
	for _, c := range g.Boxed {
		assert.Equal(t, c.Content, extractBoxedContent(c.Text), "extract_boxed_content(%q)", c.Text)
	}
	for _, c := range g.Grades {
		assert.Equal(t, c.Correct, gradeAnswer(c.Given, c.Truth), "grade_answer(%q, %q)", c.Given, c.Truth)
	}
}

// FuzzGradeAnswer: any pair of strings grades without a panic, and an answer is right against
// itself.
func FuzzGradeAnswer(f *testing.F) {
	for _, s := range []string{`\frac{1}{2}`, `\sqrt[3]{8}`, "(1,2)", "x^2+1", `\text{ cm}`, "2^-1", "0.5", `\boxed{\frac`, "5!", "1e400"} {
		f.Add(s, "1/2")
	}
	f.Fuzz(func(t *testing.T, given, truth string) {
		gradeAnswer(given, truth)
		extractBoxedContent(given)
		if !gradeAnswer(truth, truth) {
			t.Fatalf("grade_answer(%q, %q) is false", truth, truth)
		}
	})
}
