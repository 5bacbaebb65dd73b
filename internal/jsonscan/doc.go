// Package jsonscan reads JSON exactly as encoding/json reads it, for the hand-written fast
// decoders of veil (the pages of the large listings and the small objects nested in them) and of
// forwarder (the event walk of a catch-up): one scanner instead of one per decoder.
//
//   - Scanner walks a byte slice: it reads and validates one value at a time with JSON's grammar
//     (Skip, Value), the tokens the fast decoders set fields from (Plain, Str, Number, Word), and
//     objects member by member (Enter, Member); SkipValid crosses a value already validated
//     faster (the forwarder's walk over the results the client validated). It never decides a
//     field's value on its own: whatever it cannot read exactly as encoding/json would is
//     reported as false, and the caller then leaves the whole input to encoding/json.
//   - Unquote decodes a string token as encoding/json does (invalid UTF-8 and lone surrogates
//     become U+FFFD).
//   - Names matches an object's member name to a field the way encoding/json does: the exact
//     name first, then the first field whose name folds to the same (its Unicode simple folding,
//     so "ſ" is "s" and the Kelvin sign "k").
//
// The tests hold each of these to encoding/json itself.
package jsonscan
