package tensor

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error returned by mtrl's validated entry points wraps one of these, so
// callers can branch with errors.Is; the message names the op and the offending argument.
var (
	ErrShape     = errors.New("bad shape")
	ErrDType     = errors.New("bad dtype")
	ErrBackend   = errors.New("backend mismatch")
	ErrParam     = errors.New("invalid parameter")
	ErrNotFinite = errors.New("non-finite value")
	ErrDevice    = errors.New("device error")
	ErrClosed    = errors.New("backend closed")
)

// Error is the error type of validated ops: which op, which argument, what is wrong.
type Error struct {
	Op     string // e.g. "tensor.MaskedMean"
	Arg    string // e.g. "mask"; empty when the error concerns the op as a whole
	Detail string
	Err    error // the sentinel (or a backend error)
}

func (e *Error) Error() string {
	if e == nil {
		return "<nil>"
	}
	if e.Arg == "" {
		return fmt.Sprintf("%s: %s: %v", e.Op, e.Detail, e.Err)
	}
	return fmt.Sprintf("%s: %s: %s: %v", e.Op, e.Arg, e.Detail, e.Err)
}

func (e *Error) Unwrap() error {
	if e == nil {
		return nil
	}
	return e.Err
}

// Errorf builds an *Error wrapping kind (one of the sentinels above).
func Errorf(kind error, op, arg, format string, args ...any) error {
	return &Error{Op: op, Arg: arg, Detail: fmt.Sprintf(format, args...), Err: kind}
}
