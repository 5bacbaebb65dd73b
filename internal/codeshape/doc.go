// Package codeshape holds only a test: the module's shape rules (no Go file over 600 lines, no
// function over 80, no comment citing "issue N"), checked over every .go file of the module.
package codeshape
