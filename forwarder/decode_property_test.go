// The property holding the forwarder's event walk to veil.Event's decoding: every field of
// veil.Event and veil.EventEntity is filled by reflection with random values, pages of them are
// marshalled by encoding/json with odd member names, repeated and unknown members, and each
// event must decode as veil.Event decodes it, but for the fields forwarding does not read.
// Seeded: a failure prints its seed, FORWARDER_DECODE_SEED replays it.

package forwarder

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/internal/jsonscan"
	"github.com/veil-exporter/veil-exporter/internal/jsonscan/jsonscantest"
	"github.com/veil-exporter/veil-exporter/veil"
)

// unreadEventFields are the members of an event decodeEvent leaves out (nothing forwarded is
// built from them; the body is Raw). A field added to veil.Event is either read by decodeEvent
// or named here: the property fails until it is.
var unreadEventFields = map[string]bool{"message": true, "user": true, "task": true}

func TestDecodeEventMatchesEncodingJSON(t *testing.T) {
	seed := uint64(rand.Int64())
	if v := os.Getenv("FORWARDER_DECODE_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seed %d (FORWARDER_DECODE_SEED=%d replays it)", seed, seed)
		}
	})
	r := rand.New(rand.NewPCG(seed, 11))
	set := map[string]bool{} // the fields seen decoded to a non-zero value
	for range 300 {
		events := make([]veil.Event, 1+r.IntN(3))
		for i := range events {
			fillEvent(r, reflect.ValueOf(&events[i]).Elem())
		}
		b, err := json.Marshal(map[string]any{"count": len(events), "results": events})
		if err != nil {
			t.Fatal(err)
		}
		body := jsonscantest.OddKeys(r, b)
		page, err := veil.DecodePage[json.RawMessage](eventsPath, body, 0)
		if err != nil {
			t.Fatalf("page %s: %v", body, err)
		}
		for _, raw := range page.Results {
			var got, want veil.Event
			gerr := decodeEvent(raw, &got)
			werr := json.Unmarshal(raw, &want)
			if (gerr == nil) != (werr == nil) {
				t.Fatalf("event %s: error %v, veil.Event says %v", raw, gerr, werr)
			}
			wv := reflect.ValueOf(&want).Elem()
			for _, f := range jsonscan.Fields(wv.Type()) {
				if unreadEventFields[f.Name] {
					wv.FieldByIndex(f.Index).SetZero()
				}
			}
			gv := reflect.ValueOf(got)
			for i := range gv.NumField() {
				if g, w := gv.Field(i).Interface(), wv.Field(i).Interface(); !reflect.DeepEqual(g, w) {
					t.Fatalf("event %s: %s: walk %#v, veil.Event %#v", raw, gv.Type().Field(i).Name, g, w)
				}
			}
			recordSet(reflect.ValueOf(got), set)
		}
	}
	for _, typ := range []reflect.Type{reflect.TypeFor[veil.Event](), reflect.TypeFor[veil.EventEntity]()} {
		for _, f := range jsonscan.Fields(typ) {
			if !unreadEventFields[f.Name] && !set[typ.Name()+"."+f.Name] {
				t.Errorf("%s.%s was never decoded to a non-zero value", typ.Name(), f.Name)
			}
		}
	}
}

// fillEvent sets every field of an event (or an entity) v to a random value.
func fillEvent(r *rand.Rand, v reflect.Value) {
	for _, f := range jsonscan.Fields(v.Type()) {
		fv := v.FieldByIndex(f.Index)
		switch fv.Interface().(type) {
		case string:
			fv.SetString(jsonscantest.String(r))
		case veil.Time:
			if r.IntN(5) > 0 {
				fv.Set(reflect.ValueOf(veil.Time{Time: time.Unix(r.Int64N(4e9), r.Int64N(1e9)).UTC()}))
			}
		case []veil.EventEntity:
			if n := r.IntN(4); n > 0 {
				ents := make([]veil.EventEntity, n-1)
				for i := range ents {
					fillEvent(r, reflect.ValueOf(&ents[i]).Elem())
				}
				fv.Set(reflect.ValueOf(ents))
			}
		default:
			panic("fillEvent: no random " + fv.Type().String() + ": teach the property test this type")
		}
	}
}

// recordSet notes the fields of events and entities v holds that are not zero.
func recordSet(v reflect.Value, set map[string]bool) {
	for _, f := range jsonscan.Fields(v.Type()) {
		fv := v.FieldByIndex(f.Index)
		if !fv.IsZero() {
			set[v.Type().Name()+"."+f.Name] = true
		}
		if ents, ok := fv.Interface().([]veil.EventEntity); ok {
			for _, e := range ents {
				recordSet(reflect.ValueOf(e), set)
			}
		}
	}
}
