// The status page on / and its JSON (?format=json): what the components report, redacted and
// capped, rendered whole before it is sent.

package web

import (
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"fmt"
	"html/template"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/veil-exporter/veil-exporter/collector"
	"github.com/veil-exporter/veil-exporter/config"
)

// statusOf is st as the page and its JSON show it: URLs redacted, problems sorted and capped,
// every text cut to statusTextMax.
func statusOf(st Status) statusData {
	s := statusData{
		Version: st.Version, Started: st.Started, ConfigFile: st.ConfigFile, LastReload: st.LastReload, LastReloadError: st.LastReloadError,
		Controllers: make([]controllerStatus, 0, len(st.Controllers)), // [] rather than null when none run
	}
	if st.NATS != nil {
		s.NATS = natsView(*st.NATS)
	}
	if st.Replicas != nil {
		s.Replicas = replicasView(*st.Replicas)
	}
	for _, c := range st.Controllers {
		s.Controllers = append(s.Controllers, controllerOf(c))
	}
	capStrings(reflect.ValueOf(&s).Elem())
	return s
}

// controllerOf is one controller's part of the page.
func controllerOf(c Controller) controllerStatus {
	cs := controllerView(c.Name, config.RedactURL(c.URL), c.Inventory)
	for _, st := range c.Runs {
		cs.Collectors = append(cs.Collectors, collectorView(st))
	}
	ps := slices.Clone(c.Problems)
	collector.SortProblems(ps)
	cs.Problems, cs.ProblemsTotal = problemsView(ps)
	if c.Push != nil {
		cs.Inventory.Push = pushView(*c.Push)
	}
	if c.KV != nil {
		cs.Inventory.KV = kvView(*c.KV)
	}
	if c.Guest != nil {
		cs.Guest = guestView(*c.Guest)
	}
	if c.Events != nil {
		cs.Events = eventsView(*c.Events)
	}
	return cs
}

// capStrings cuts every string reachable from v (fields, pointers, slices, map values) to
// statusTextMax: whatever a part adds to the status, a long text costs one line of the page.
// A slice, pointer or map that holds a long text is copied before it is cut: the views may
// share them with the parts' own status.
func capStrings(v reflect.Value) {
	if !v.CanSet() || !tooLong(v) {
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(capText(v.String(), statusTextMax))
	case reflect.Pointer:
		c := reflect.New(v.Type().Elem())
		c.Elem().Set(v.Elem())
		v.Set(c)
		capStrings(c.Elem())
	case reflect.Struct:
		for i := range v.NumField() {
			capStrings(v.Field(i))
		}
	case reflect.Array:
		for i := range v.Len() {
			capStrings(v.Index(i))
		}
	case reflect.Slice:
		c := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		reflect.Copy(c, v)
		v.Set(c)
		for i := range c.Len() {
			capStrings(c.Index(i))
		}
	case reflect.Map:
		c := reflect.MakeMapWithSize(v.Type(), v.Len())
		for it := v.MapRange(); it.Next(); {
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(it.Value())
			capStrings(e)
			c.SetMapIndex(it.Key(), e)
		}
		v.Set(c)
	}
}

// tooLong says whether a string reachable from v is longer than statusTextMax.
func tooLong(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.String:
		return v.Len() > statusTextMax
	case reflect.Pointer:
		return !v.IsNil() && tooLong(v.Elem())
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() && tooLong(v.Field(i)) {
				return true
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			if tooLong(v.Index(i)) {
				return true
			}
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			if tooLong(it.Value()) {
				return true
			}
		}
	}
	return false
}

// ago says how long before now t was, to the precision a person reads at a glance.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := now.Sub(t)
	suffix := " ago"
	if d < 0 {
		d, suffix = -d, " from now" // clock skew between the controller and us
	}
	switch {
	case d < time.Second:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds%s", int(d/time.Second), suffix)
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds%s", int(d/time.Minute), int(d%time.Minute/time.Second), suffix)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm%s", int(d/time.Hour), int(d%time.Hour/time.Minute), suffix)
	}
	return fmt.Sprintf("%dd%02dh%s", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour), suffix)
}

//go:embed status.html
var statusHTML string

var statusPage = template.Must(template.New("status").Funcs(template.FuncMap{
	"when": when,
	"abs":  absTime,
	"sub":  func(a, b int) int { return a - b },
}).Parse(statusHTML))

// statusCSP is the status page's Content-Security-Policy: its one inline <style> (by its
// hash, so that markup slipped into a page could add no other), nothing else to load, no frame
// to be shown in. The page has no script.
var statusCSP = "default-src 'none'; style-src '" + styleHash(statusHTML) + "'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// styleHash is the CSP source of the text of page's <style> element.
func styleHash(page string) string {
	_, rest, ok := strings.Cut(page, "<style>")
	css, _, ok2 := strings.Cut(rest, "</style>")
	if !ok || !ok2 || strings.Contains(css, "{{") {
		panic("status.html needs one <style> element without template actions")
	}
	sum := sha256.Sum256([]byte(css))
	return "sha256-" + base64.StdEncoding.EncodeToString(sum[:])
}

// statusTextMax bounds a text the status page (and its JSON) shows: errors and problems come
// from the controller and the guests, whose texts may be of any length.
const statusTextMax = 512

// capText is s cut to at most max bytes (on a rune boundary) with an ellipsis when it was
// longer.
func capText(s string, max int) string {
	if len(s) <= max {
		return s
	}
	const ellipsis = "…"
	cut := max - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}

func absTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000000 UTC") }

// when shows t as "3s ago" with the absolute time in the title. The markup is built here
// because it holds nothing but formatted times.
func when(now, t time.Time) template.HTML {
	if t.IsZero() {
		return `<span class="dim">never</span>`
	}
	return template.HTML(fmt.Sprintf(`<time datetime="%s" title="%s">%s</time>`,
		t.UTC().Format(time.RFC3339Nano), absTime(t), ago(now, t))) //nolint:gosec // only formatted times
}

// statusPageData is what the template renders: the status and the one instant every "ago" on
// the page is measured from.
type statusPageData struct {
	statusData
	Now time.Time
}
