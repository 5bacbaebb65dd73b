package veil

// The property that holds the fast page decoder to encoding/json: every field of every type it
// reads (plainTables: the listed types and every type they hold) is filled by reflection with
// random values, the page is marshalled by encoding/json with the platform's shapes of the
// lenient types and odd key spellings, repeated and unknown members, and the two decoders must
// agree exactly. Seeded: a failure prints its seed, VEIL_PLAIN_SEED replays it.

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/internal/jsonscan"
	"github.com/veil-exporter/veil-exporter/internal/jsonscan/jsonscantest"
)

// plainPropertyCases is how many pages of each listed type one ordinary run decodes.
const plainPropertyCases = 100

func TestFastPathDecodesAsEncodingJSON(t *testing.T) {
	seed := uint64(rand.Int64())
	if v := os.Getenv("VEIL_PLAIN_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seed %d (VEIL_PLAIN_SEED=%d replays it)", seed, seed)
		}
	})
	g := &pageGen{r: rand.New(rand.NewPCG(seed, 7)), set: map[fieldRef]bool{}}
	g.check(t, checkPage[Domain])
	g.check(t, checkPage[Vdisk])
	g.check(t, checkPage[VMachineInf])
	g.check(t, checkPage[Datapool])
	g.check(t, checkPage[Node])
	if t.Failed() {
		return
	}
	// Every field of every table (and of Tag, read through tagObject's) was decoded to a value other than its zero at least once:
	// a field the generator never fills would be a field the property does not hold.
	for _, typ := range append(slices.Collect(maps.Keys(plainTables)), reflect.TypeFor[Tag]()) {
		if !coverable(typ) {
			continue
		}
		for _, f := range jsonscan.Fields(typ) {
			if !g.set[fieldRef{typ, f.Name}] {
				t.Errorf("%v.%s (%q) was never decoded to a non-zero value", typ, f.StructField.Name, f.Name)
			}
		}
	}
}

func (g *pageGen) check(t *testing.T, page func(*testing.T, *pageGen) bool) {
	t.Helper()
	for range plainPropertyCases {
		if !page(t, g) {
			return
		}
	}
}

// checkPage generates a page of T and compares the two decoders.
func checkPage[T any](t *testing.T, g *pageGen) bool {
	t.Helper()
	results := make([]T, 1+g.r.IntN(3))
	for i := range results {
		g.fill(reflect.ValueOf(&results[i]).Elem(), 0)
	}
	wire := make([]any, len(results))
	for i := range results {
		wire[i] = g.wire(reflect.ValueOf(results[i]))
	}
	b, err := json.Marshal(map[string]any{"count": len(results), "results": wire})
	if err != nil {
		t.Fatal(err)
	}
	body := jsonscantest.OddKeys(g.r, b)
	got, ok := decodePagePlain[T](body)
	want, wok := viaEncodingJSON[T](body)
	if !ok || !wok {
		t.Errorf("%T: fast path ok %v, encoding/json ok %v for %s", results, ok, wok, body)
		return false
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%T: page %s\nfast path     %+v\nencoding/json %+v", results, body, got, want)
		return false
	}
	for i := range want.Results {
		g.record(reflect.ValueOf(want.Results[i]))
	}
	return true
}

// coverable reports whether the fields of t are held to be decoded: those of the tables but
// tagObject's, a tag's wire shape, whose fields are Tag's.
func coverable(t reflect.Type) bool {
	_, ok := plainTables[t]
	return ok && t != reflect.TypeFor[tagObject]() || t == reflect.TypeFor[Tag]()
}

type fieldRef struct {
	typ  reflect.Type
	name string
}

type pageGen struct {
	r   *rand.Rand
	set map[fieldRef]bool // the fields of tables seen decoded to a non-zero value
}

// record notes which fields of table types v holds are not zero.
func (g *pageGen) record(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			g.record(v.Elem())
		}
	case reflect.Slice:
		for i := range v.Len() {
			g.record(v.Index(i))
		}
	case reflect.Struct:
		if !coverable(v.Type()) {
			return
		}
		for _, f := range jsonscan.Fields(v.Type()) {
			fv := v.FieldByIndex(f.Index)
			if !fv.IsZero() {
				g.set[fieldRef{v.Type(), f.Name}] = true
			}
			g.record(fv)
		}
	}
}

var timeType = reflect.TypeFor[Time]()

// fill sets every field v holds to a random value (pointers and slices nil, empty or not).
func (g *pageGen) fill(v reflect.Value, depth int) {
	if v.Type() == timeType {
		if g.r.IntN(4) > 0 {
			tm := time.Unix(g.r.Int64N(4e9), g.r.Int64N(1e9)).UTC()
			if g.r.IntN(2) == 0 {
				tm = tm.In(time.FixedZone("", 3*3600))
			}
			v.Set(reflect.ValueOf(Time{tm}))
		}
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(jsonscantest.String(g.r))
	case reflect.Bool:
		v.SetBool(g.r.IntN(2) == 0)
	case reflect.Float64:
		v.SetFloat(jsonscantest.Float(g.r))
	case reflect.Pointer:
		if g.r.IntN(3) > 0 {
			v.Set(reflect.New(v.Type().Elem()))
			g.fill(v.Elem(), depth+1)
		}
	case reflect.Slice:
		if v.Type() == reflect.TypeFor[json.RawMessage]() {
			v.SetBytes(jsonscantest.RawJSON(g.r, depth))
			return
		}
		switch n := g.r.IntN(5); {
		case n == 0 || depth > 3: // nil
		default:
			v.Set(reflect.MakeSlice(v.Type(), n-1, n-1))
			for i := range n - 1 {
				g.fill(v.Index(i), depth+1)
			}
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				g.fill(v.Field(i), depth+1)
			}
		}
	default:
		panic(fmt.Sprintf("pageGen.fill: no random %v: teach the property test this type", v.Type()))
	}
}

// wire is v in the shapes the platform sends: Number a number or a numeric string, Ref an
// object or a bare uuid, Tag a string or an object, Uptime seconds or an object, Permissions a
// list or an object; a struct an object of its JSON names.
func (g *pageGen) wire(v reflect.Value) any {
	switch x := v.Interface().(type) {
	case Number:
		if g.r.IntN(3) == 0 {
			return strconv.FormatFloat(float64(x), 'f', -1, 64)
		}
		return float64(x)
	case Time, json.RawMessage:
		return x
	case Ref:
		if x.VerboseName == "" && g.r.IntN(2) == 0 {
			return x.ID
		}
	case Tag:
		if x.Colour == "" && g.r.IntN(2) == 0 {
			return x.Name
		}
		return map[string]any{"verbose_name": x.Name, "colour": x.Colour}
	case Uptime:
		if g.r.IntN(2) == 0 {
			return g.wire(reflect.ValueOf(x.Seconds))
		}
		return map[string]any{"uptime": g.wire(reflect.ValueOf(x.Seconds)), "start_time": x.StartTime,
			"system_time": x.SystemTime, "timezone": x.Timezone}
	case Permissions:
		if x != nil && g.r.IntN(2) == 0 {
			m := map[string]bool{}
			for _, p := range x {
				m[p] = true
			}
			return m
		}
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return nil
		}
		return g.wire(v.Elem())
	case reflect.Slice:
		if v.IsNil() {
			return nil
		}
		out := make([]any, v.Len())
		for i := range out {
			out[i] = g.wire(v.Index(i))
		}
		return out
	case reflect.Struct:
		m := map[string]any{}
		for _, f := range jsonscan.Fields(v.Type()) {
			m[f.Name] = g.wire(v.FieldByIndex(f.Index))
		}
		return m
	}
	return v.Interface()
}

// TestSmallObjectsAreFlat: the objects read for every listed VM (Ref, GuestUtils, a tag) keep
// tables of strings, bools and string lists, which whole reads without a heap allocation; a
// field of another type would send each of them to encoding/json.
func TestSmallObjectsAreFlat(t *testing.T) {
	for _, tab := range []*plainTable{refTable, guestUtilsTable, tagObjectTable} {
		if !tab.flat {
			t.Errorf("%v has a field other than a string, a bool or a []string", tab.typ)
		}
	}
}
