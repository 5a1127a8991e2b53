package enum_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/mtrl-go/mtrl/internal/enum"
)

type color uint8

var errBad = errors.New("bad")

var colors = enum.Table[color]{Type: "paint.color", Noun: "color", Names: []string{"red", "green"}, First: 1,
	Errorf: func(kind error, op, arg, format string, args ...any) error {
		return fmt.Errorf("%s: %s: %w", op, fmt.Sprintf(format, args...), kind)
	}, Sentinel: errBad}

func parseColor(s string) (color, error) {
	if c, ok := colors.Lookup(s); ok {
		return c, nil
	}
	return 0, fmt.Errorf("unknown color %q", s)
}

func TestTable(t *testing.T) {
	for v, want := range map[color]string{0: "color(0)", 1: "red", 2: "green", 3: "color(3)"} {
		if got := colors.String(v); got != want {
			t.Errorf("String(%d) = %q, want %q", v, got, want)
		}
		b, err := colors.MarshalText(v)
		if valid := v == 1 || v == 2; colors.Valid(v) != valid || (err == nil) != valid {
			t.Errorf("%d: Valid %v, MarshalText error %v; want valid %v", v, colors.Valid(v), err, valid)
		} else if valid && string(b) != want {
			t.Errorf("MarshalText(%d) = %q, want %q", v, b, want)
		} else if !valid && (!errors.Is(err, errBad) || err.Error() != fmt.Sprintf("paint.color.MarshalText: unknown color %d: bad", v)) {
			t.Errorf("MarshalText(%d): %v", v, err)
		}
	}
	c := color(2)
	if err := enum.UnmarshalText(&c, []byte("red"), parseColor); err != nil || c != 1 {
		t.Errorf("UnmarshalText(red) = %v, %v", c, err)
	}
	if err := enum.UnmarshalText(&c, []byte("blue"), parseColor); err == nil || c != 1 {
		t.Errorf("UnmarshalText(blue) = %v, %v; want an error and no change", c, err)
	}
}
