package inventory

// This file derives a task's kind, the label of the task families, from its name. The real
// platform names a task with a sentence that names its objects ("Starting the virtual machine
// win_test."), so the kind replaces every entity's name by its class and never carries a name.

import (
	"encoding/json"
	"regexp"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// unknownKind is the kind of a task without a name.
const unknownKind = "unknown"

// minTemplateText is the fixed text, in characters, a kind needs to serve as a template.
const minTemplateText = 12

// taskEntity is one object a task is about.
type taskEntity struct {
	id, class string
}

// parseEntities reads a task's entities: {"<uuid>": "<class>"} as the platform sends, or a list
// of {entity_uuid, entity_class} as events carry. Anything else yields none.
func parseEntities(raw json.RawMessage) []taskEntity {
	if len(raw) == 0 {
		return nil
	}
	var m map[string]string
	if json.Unmarshal(raw, &m) == nil {
		out := make([]taskEntity, 0, len(m))
		for id, class := range m {
			out = append(out, taskEntity{id, class})
		}
		sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
		return out
	}
	var l []struct {
		UUID  string `json:"entity_uuid"`
		Class string `json:"entity_class"`
	}
	if json.Unmarshal(raw, &l) == nil {
		out := make([]taskEntity, 0, len(l))
		for _, e := range l {
			out = append(out, taskEntity{e.UUID, e.Class})
		}
		return out
	}
	return nil
}

// placeholder is what replaces an entity's name: "{domain}", "{node}"; a class the platform
// did not give becomes "{entity}". Only letters, digits and _ are kept of the class.
func placeholder(class string) string {
	c := strings.Map(func(r rune) rune {
		if r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) {
			return r
		}
		return -1
	}, class)
	if c == "" {
		c = "entity"
	}
	return "{" + c + "}"
}

// span is a part of the sentence to replace by a placeholder.
type span struct {
	start, end int
	repl       string
}

// nameChar reports whether r can continue a word, so that a name is only found as a whole
// word: "vm-1" is not found in "vm-10", "win" not in "win_test", "a" not in "machine".
func nameChar(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) }

// wholeWordSpans finds name in s where it is not part of a longer word.
func wholeWordSpans(s, name, repl string) []span {
	// Case-insensitive where lowering keeps byte offsets ("WIN_TEST" is the VM win_test).
	hay, needle := s, name
	if ls, ln := strings.ToLower(s), strings.ToLower(name); len(ls) == len(s) && len(ln) == len(name) {
		hay, needle = ls, ln
	}
	var out []span
	for from := 0; from <= len(hay)-len(needle); {
		i := strings.Index(hay[from:], needle)
		if i < 0 {
			break
		}
		start, end := from+i, from+i+len(name)
		before, _ := utf8.DecodeLastRuneInString(s[:start])
		after, _ := utf8.DecodeRuneInString(s[end:])
		first, _ := utf8.DecodeRuneInString(name)
		last, _ := utf8.DecodeLastRuneInString(name)
		// A boundary is only needed where the name itself starts or ends with a word character.
		okBefore := start == 0 || !nameChar(first) || !nameChar(before)
		okAfter := end == len(s) || !nameChar(last) || !nameChar(after)
		if okBefore && okAfter {
			out = append(out, span{start, end, repl})
			from = end
			continue
		}
		_, w := utf8.DecodeRuneInString(s[start:])
		from = start + w
	}
	return out
}

// applySpans replaces non-overlapping spans, the earliest (and then the longest) first.
func applySpans(s string, spans []span) string {
	sort.Slice(spans, func(i, j int) bool {
		if spans[i].start != spans[j].start {
			return spans[i].start < spans[j].start
		}
		return spans[i].end > spans[j].end
	})
	var b strings.Builder
	pos := 0
	for _, sp := range spans {
		if sp.start < pos {
			continue // overlaps a longer or earlier name already replaced
		}
		b.WriteString(s[pos:sp.start])
		b.WriteString(sp.repl)
		pos = sp.end
	}
	b.WriteString(s[pos:])
	return b.String()
}

// quotedRe finds quoted text in both languages of the platform: "…", '…', «…», “…”, „…“.
var quotedRe = regexp.MustCompile(`"[^"]+"|'[^']+'|«[^»]+»|“[^”]+”|„[^“”]+[“”]`)

// placeholderRe finds the placeholders of a kind, to turn a kind into a pattern.
var placeholderRe = regexp.MustCompile(`\{[\p{L}\p{N}_]+\}`)

// kindTemplate is a kind as a pattern: its placeholders match any text. A task whose entity
// the inventory does not know (a VM deleted by the task itself) takes the kind of the first
// template its name matches.
type kindTemplate struct {
	kind  string
	re    *regexp.Regexp
	fixed int // characters of fixed text: the most specific template is tried first
}

func newKindTemplate(kind string) (kindTemplate, bool) {
	locs := placeholderRe.FindAllStringIndex(kind, -1)
	if len(locs) == 0 {
		return kindTemplate{}, false // nothing to fill in: an equal name is the same kind anyway
	}
	// A template of little fixed text ("{domain}", "Copy {domain}") would match any sentence.
	if utf8.RuneCountInString(placeholderRe.ReplaceAllString(kind, "")) < minTemplateText {
		return kindTemplate{}, false
	}
	var b strings.Builder
	b.WriteString("^")
	pos := 0
	for _, l := range locs {
		b.WriteString(regexp.QuoteMeta(kind[pos:l[0]]))
		b.WriteString("(.+)")
		pos = l[1]
	}
	b.WriteString(regexp.QuoteMeta(kind[pos:]))
	b.WriteString("$")
	re, err := regexp.Compile(b.String())
	if err != nil {
		return kindTemplate{}, false
	}
	return kindTemplate{kind, re, utf8.RuneCountInString(placeholderRe.ReplaceAllString(kind, ""))}, true
}

// taskKind derives the kind of a task named name about entities; names gives the names the
// inventory knows (uuid -> name); templates are kinds already derived, tried in order when an
// entity's name is unknown. ok is false when no kind could be derived without risking a name
// in it: the caller counts the task as "other" then.
func taskKind(name string, entities []taskEntity, names func(id string) (string, bool), templates []kindTemplate) (kind string, ok bool) {
	name = strings.TrimSpace(strings.ToValidUTF8(name, "�"))
	if name == "" {
		return unknownKind, true
	}
	var spans []span
	var unknown []taskEntity
	for _, e := range entities {
		n, known := names(e.id)
		n = strings.TrimSpace(n)
		if !known || n == "" {
			unknown = append(unknown, e)
			continue
		}
		// A known name that is not in the sentence is not there to leak.
		spans = append(spans, wholeWordSpans(name, n, placeholder(e.class))...)
	}
	kind = applySpans(name, spans)
	if len(unknown) == 0 {
		return kind, true
	}
	// An entity whose name the inventory does not know may be named anywhere: take the kind
	// of a known template, else replace quoted text, else give up.
	for _, t := range templates {
		if t.re.MatchString(name) {
			return t.kind, true
		}
	}
	// Each unknown entity needs a quoted text of its own, or one of them may be named unquoted.
	if quoted := quotedRe.FindAllStringIndex(kind, -1); len(quoted) >= len(unknown) {
		repl := placeholder(unknown[0].class)
		if len(unknown) > 1 {
			repl = placeholder("entity")
		}
		var qs []span
		for _, q := range quoted {
			_, w1 := utf8.DecodeRuneInString(kind[q[0]:])
			_, w2 := utf8.DecodeLastRuneInString(kind[:q[1]])
			if inner := kind[q[0]+w1 : q[1]-w2]; placeholderRe.FindString(inner) != inner {
				qs = append(qs, span{q[0], q[1], repl})
			}
		}
		if len(qs) >= len(unknown) {
			return applySpans(kind, qs), true
		}
	}
	return "", false
}
