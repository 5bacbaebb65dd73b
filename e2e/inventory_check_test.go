package e2e

// The inventory bucket judged against the simulators: after a run with faults, every object a
// controller lists is in the bucket as it lists it, nothing else is, and the history of each key
// is the controller's own sequence of that object's values, skipping at most some (coalesced
// while no writer could write) and never storing one twice in a row.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// invCanon is the object's JSON decoded with numbers as written and encoded again (object keys
// sorted): an independent canonical form.
func invCanon(t *testing.T, b []byte) string {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	var out bytes.Buffer
	e := json.NewEncoder(&out)
	e.SetEscapeHTML(false)
	e.Encode(v)
	return strings.TrimSpace(out.String())
}

var invClasses = map[string]string{"/nodes/": "node", "/clusters/": "cluster", "/data-pools/": "datapool", "/domains/": "domain"}

// simListed is what the simulator lists now, by key of the bucket.
func simListed(t *testing.T, controller string, sim *veiltest.Server) map[string]string {
	t.Helper()
	client, err := veil.New(veil.Config{URL: sim.URL, Token: sim.Token})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for path, class := range invClasses {
		page, err := veil.ListPage[json.RawMessage](context.Background(), client, veil.PageRequest{Path: "/api" + path, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, raw := range page.Results {
			var o struct {
				ID string `json:"id"`
			}
			json.Unmarshal(raw, &o)
			out[controller+"."+class+"."+o.ID] = invCanon(t, raw)
		}
	}
	return out
}

// bucketHeld is what the bucket holds now for a controller, by key (nil when it cannot be read
// now: a server of the cluster just came back).
func bucketHeld(kv jetstream.KeyValue, controller string) map[string]string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lister, err := kv.ListKeysFiltered(ctx, controller+".>")
	if err != nil {
		return nil
	}
	out := map[string]string{}
	for k := range lister.Keys() {
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil
		}
		out[k] = string(e.Value())
	}
	return out
}

func sameInventory(a, b map[string]string) bool {
	if a == nil || b == nil || len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// checkInventoryBucket waits until the bucket holds what each simulator lists, then judges every
// key's history against the simulator's change log (kept from its start).
func checkInventoryBucket(t *testing.T, kv jetstream.KeyValue, sims map[string]*veiltest.Server) {
	t.Helper()
	for name, sim := range sims {
		testutil.Eventually(t, 60*time.Second, func() bool { return sameInventory(simListed(t, name, sim), bucketHeld(kv, name)) },
			"the inventory bucket to hold what %s lists", name)
		// The values each object took, in order, as the simulator made them.
		made := map[string][]string{}
		for _, c := range sim.Changes(0) {
			class := invClasses[c.Resource]
			if class == "" {
				continue
			}
			k := name + "." + class + "." + c.ID
			v := "DEL"
			if c.Event != veiltest.ChangeDeleted {
				v = invCanon(t, c.Object)
			}
			if l := made[k]; len(l) == 0 || l[len(l)-1] != v {
				made[k] = append(made[k], v)
			}
		}
		checked, skipped := 0, 0
		for k, vals := range made {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			es, err := kv.History(ctx, k)
			cancel()
			if err != nil {
				t.Fatalf("history of %s: %v", k, err)
			}
			var got []string
			for _, e := range es {
				v := "DEL"
				if e.Operation() == jetstream.KeyValuePut {
					v = string(e.Value())
				}
				got = append(got, v)
			}
			for i := 1; i < len(got); i++ {
				if got[i] == got[i-1] {
					t.Errorf("%s: the same value stored twice in a row: %.120s", k, got[i])
				}
			}
			// After its first value (the listing at the start may predate the log), the history
			// is the made values in order, some skipped.
			j := 0
			for _, v := range got[1:] {
				for j < len(vals) && vals[j] != v {
					j++
					skipped++
				}
				if j == len(vals) {
					t.Errorf("%s: stored a value the controller never made, or out of order: %.120s", k, v)
					break
				}
				j++
			}
			checked++
		}
		t.Logf("inventory of %s: %d keys changed during the run, checked; %d values skipped (coalesced while no writer could write)", name, checked, skipped)
	}
}
