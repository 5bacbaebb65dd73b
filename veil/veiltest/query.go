package veiltest

// This file holds what every collection accepts besides paging: ordering=<field>[,-<field>...]
// on the fields of the list representation, and fields=<key>,<key> on every collection and
// detail, which keeps only those keys. Filters are per collection (api.go); a filter value
// that matches nothing gives an empty list, as on the platform.

import (
	"bytes"
	"encoding/json"
	"net/http"
	"sort"
	"strconv"
	"strings"
)

// orderItems sorts encoded items by an ordering parameter, stably. A field the representation
// lacks (created of a domain) sorts by the default order, so "-created" reverses it; nested
// objects sort by their verbose_name. Unknown fields change nothing, as DRF ignores them.
func orderItems(items [][]byte, ordering string) [][]byte {
	type key struct {
		name string
		desc bool
	}
	var keys []key
	for _, f := range strings.Split(ordering, ",") {
		f = strings.TrimSpace(f)
		desc := strings.HasPrefix(f, "-")
		f = strings.TrimPrefix(f, "-")
		if f != "" {
			keys = append(keys, key{f, desc})
		}
	}
	if len(keys) == 0 || len(items) < 2 {
		return items
	}
	type row struct {
		i    int
		vals []any
		b    []byte
	}
	rows := make([]row, len(items))
	for i, it := range items {
		var m map[string]json.RawMessage
		_ = json.Unmarshal(it, &m)
		r := row{i: i, b: it, vals: make([]any, len(keys))}
		for k, kk := range keys {
			r.vals[k] = sortValue(m[kk.name], i)
		}
		rows[i] = r
	}
	sort.SliceStable(rows, func(a, b int) bool {
		for k, kk := range keys {
			c := compareValues(rows[a].vals[k], rows[b].vals[k])
			if c == 0 {
				continue
			}
			if kk.desc {
				return c > 0
			}
			return c < 0
		}
		return false
	})
	out := make([][]byte, len(rows))
	for i, r := range rows {
		out[i] = r.b
	}
	return out
}

// sortValue is a comparable value of a JSON field: a float64, a string, or the item's default
// position when the field is absent.
func sortValue(raw json.RawMessage, pos int) any {
	if raw == nil {
		return float64(pos)
	}
	var v any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if d.Decode(&v) != nil {
		return ""
	}
	switch x := v.(type) {
	case json.Number:
		f, _ := x.Float64()
		return f
	case string:
		if f, err := strconv.ParseFloat(x, 64); err == nil && strings.Contains(x, ".") {
			return f // a decimal string ("12.50") sorts as its number
		}
		return x
	case bool:
		if x {
			return float64(1)
		}
		return float64(0)
	case map[string]any:
		s, _ := x["verbose_name"].(string)
		return s
	case nil:
		return ""
	}
	return string(raw)
}

func compareValues(a, b any) int {
	af, aNum := a.(float64)
	bf, bNum := b.(float64)
	switch {
	case aNum && bNum:
		switch {
		case af < bf:
			return -1
		case af > bf:
			return 1
		}
		return 0
	case aNum:
		return -1
	case bNum:
		return 1
	}
	return strings.Compare(a.(string), b.(string))
}

// fieldsWriter buffers a GET answer so that fields= can cut it down to the keys asked for.
type fieldsWriter struct {
	http.ResponseWriter
	status int
	buf    bytes.Buffer
}

func (w *fieldsWriter) WriteHeader(code int) { w.status = code }

func (w *fieldsWriter) language() lang { return langOf(w.ResponseWriter) }

func (w *fieldsWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.buf.Write(b)
}

// withFields serves h and keeps only the keys in fields of a detail object or of each item of
// a collection's results. Error answers pass unchanged.
func withFields(w http.ResponseWriter, r *http.Request, fields string, h http.HandlerFunc) {
	keep := map[string]bool{}
	for _, f := range strings.Split(fields, ",") {
		if f = strings.TrimSpace(f); f != "" {
			keep[f] = true
		}
	}
	fw := &fieldsWriter{ResponseWriter: w}
	h(fw, r)
	if fw.status == 0 {
		fw.status = http.StatusOK
	}
	var obj map[string]json.RawMessage
	if fw.status != http.StatusOK || len(keep) == 0 || json.Unmarshal(fw.buf.Bytes(), &obj) != nil {
		writeJSONBytes(w, fw.status, fw.buf.Bytes())
		return
	}
	cut := func(m map[string]json.RawMessage) map[string]json.RawMessage {
		out := make(map[string]json.RawMessage, len(keep))
		for k := range keep {
			if v, ok := m[k]; ok {
				out[k] = v
			}
		}
		return out
	}
	_, hasCount := obj["count"]
	rawResults, hasResults := obj["results"]
	if !hasCount || !hasResults {
		writeJSON(w, fw.status, cut(obj))
		return
	}
	var items []map[string]json.RawMessage
	if json.Unmarshal(rawResults, &items) != nil {
		writeJSONBytes(w, fw.status, fw.buf.Bytes())
		return
	}
	for i := range items {
		items[i] = cut(items[i])
	}
	obj["results"], _ = json.Marshal(items)
	writeJSON(w, fw.status, obj)
}
