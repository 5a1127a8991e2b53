// Package enum holds the methods every named integer enum of mtrl shares (String, Valid,
// MarshalText, UnmarshalText), so that each enum declares only its table of names and its Parse
// function (which keeps the enum's own aliases and error message).
//
// An enum declares a Table and one-line methods that call it:
//
//	var lossTypes = enum.Table[LossType]{Type: "ppo.LossType", Noun: "loss type",
//		Names: []string{Vanilla: "default", GSPO: "gspo"}, Errorf: tensor.Errorf, Sentinel: tensor.ErrParam}
//
//	func (l LossType) String() string                { return lossTypes.String(l) }
//	func (l LossType) Valid() bool                   { return lossTypes.Valid(l) }
//	func (l LossType) MarshalText() ([]byte, error) { return lossTypes.MarshalText(l) }
//	func (l *LossType) UnmarshalText(b []byte) error { return enum.UnmarshalText(l, b, ParseLossType) }
//
// The package does not import tensor (tensor.DType uses it), so a Table carries the error
// constructor and sentinel of its package.
package enum

import "strconv"

// Table describes an enum whose constants are First, First+1, …, First+len(Names)-1.
type Table[E ~int | ~uint8] struct {
	// Type is the qualified type name, e.g. "ppo.LossType": MarshalText errors name the op
	// Type+".MarshalText", and String prints an undefined value v as "LossType(v)".
	Type string
	// Noun is what one value is called in error messages, e.g. "loss type".
	Noun string
	// Names holds the canonical name of each constant, starting at First.
	Names []string
	First E
	// Errorf and Sentinel build MarshalText's error for an undefined value (tensor.Errorf with
	// the package's sentinel).
	Errorf   func(kind error, op, arg, format string, args ...any) error
	Sentinel error
}

// Valid reports whether v is one of the constants.
func (t *Table[E]) Valid(v E) bool { return v >= t.First && int(v-t.First) < len(t.Names) }

// String returns v's name, or "Name(v)" for a value outside the constants.
func (t *Table[E]) String(v E) string {
	if t.Valid(v) {
		return t.Names[v-t.First]
	}
	name := t.Type
	for i := len(name) - 1; i >= 0; i-- {
		if name[i] == '.' {
			name = name[i+1:]
			break
		}
	}
	return name + "(" + strconv.Itoa(int(v)) + ")"
}

// Lookup returns the constant whose canonical name is s (exact match).
func (t *Table[E]) Lookup(s string) (E, bool) {
	for i, n := range t.Names {
		if n == s {
			return t.First + E(i), true
		}
	}
	return 0, false
}

// MarshalText returns v's name; a value outside the constants is an error.
func (t *Table[E]) MarshalText(v E) ([]byte, error) {
	if !t.Valid(v) {
		return nil, t.Errorf(t.Sentinel, t.Type+".MarshalText", "", "unknown %s %d", t.Noun, int(v))
	}
	return []byte(t.Names[v-t.First]), nil
}

// UnmarshalText sets *p to parse(string(b)), leaving *p unchanged on error.
func UnmarshalText[E any](p *E, b []byte, parse func(string) (E, error)) error {
	v, err := parse(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}
