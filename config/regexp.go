package config

// Regexp: a regular expression of the configuration, compiled once when it is loaded.

import (
	"regexp"

	"gopkg.in/yaml.v3"
)

// Regexp is a regular expression read from the configuration, compiled as it is read; the
// empty expression is unset (nil from Regexp). One that does not compile is kept with its
// error, which Load reports with its key and line.
type Regexp struct {
	_    [0]func() // not comparable: == would compare compiled programs by address
	expr string
	re   *regexp.Regexp
	err  error
}

// NewRegexp compiles expr ("" is unset).
func NewRegexp(expr string) (Regexp, error) {
	r := compileRegexp(expr)
	return r, r.err
}

// MustRegexp is NewRegexp for expressions known to compile.
func MustRegexp(expr string) Regexp {
	r, err := NewRegexp(expr)
	if err != nil {
		panic(err)
	}
	return r
}

func compileRegexp(expr string) Regexp {
	r := Regexp{expr: expr}
	if expr != "" {
		r.re, r.err = regexp.Compile(expr)
	}
	return r
}

// Regexp is the compiled expression; nil when unset or invalid.
func (r Regexp) Regexp() *regexp.Regexp { return r.re }

// String is the expression as written.
func (r Regexp) String() string { return r.expr }

// UnmarshalYAML reads and compiles the expression.
func (r *Regexp) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return err
	}
	*r = compileRegexp(s)
	return nil
}

// MarshalYAML writes the expression as read.
func (r Regexp) MarshalYAML() (any, error) { return r.expr, nil }
