package veiltest

// Conformance of the two profiles through raw HTTP: where the vendor's
// clients disagree, the default profile sends one shape and Options.Profile "alternative" the
// other (the vendor's clients disagree): "entity" (a uuid) instead of "_entity", number percentages, tags
// as strings instead of objects, and the detail objects of the vendor's mock.

import (
	"testing"
	"time"
)

func TestProfilesServeBothVendorShapes(t *testing.T) {
	for _, profile := range []string{ProfileDefault, ProfileAlternative} {
		alt := profile == ProfileAlternative
		t.Run(profile, func(t *testing.T) {
			s, c := newSim(t, Options{Profile: profile, VMs: 20, Templates: -1, RunningFraction: 1, TaskDuration: time.Hour})
			vm := s.DomainIDs()[0]

			env := c.json("POST", "/api/domains/"+vm+"/shutdown/?async=1", nil, 202)
			_, under := env["_entity"].(map[string]any)
			plain, _ := env["entity"].(string)
			if under == alt || (plain == vm) != alt {
				t.Fatalf("envelope %v: want _entity object %v, entity uuid %v", env, !alt, alt)
			}

			for _, p := range []string{"/api/nodes/", "/api/clusters/", "/api/domains/"} {
				for _, o := range results(t, c.json("GET", p, nil, 200)) {
					_, isString := o["cpu_used_percent_user"].(string)
					_, isNumber := o["cpu_used_percent_user"].(float64)
					if isString == alt || isNumber != alt {
						t.Fatalf("%s percentage %#v in profile %s", p, o["cpu_used_percent_user"], profile)
					}
				}
			}

			var tagged bool
			list := results(t, c.json("GET", "/api/domains/", nil, 200))
			for _, d := range list {
				rp, isObj := d["resource_pool"].(map[string]any)
				if isObj != alt || (alt && rp["id"] == "") || (!alt && d["resource_pool"] != nil) {
					t.Fatalf("resource_pool %v in profile %s", d["resource_pool"], profile)
				}
				for _, tag := range d["tags"].([]any) {
					tagged = true
					obj, isObj := tag.(map[string]any)
					// Objects by default (the vendor's Go client fails on strings), strings in the alternative.
					if _, isStr := tag.(string); isStr != alt || isObj == alt || (!alt && (obj["colour"] == nil || obj["verbose_name"] == nil)) {
						t.Fatalf("tag %#v in profile %s", tag, profile)
					}
				}
			}
			if !tagged {
				t.Fatal("no VM has tags")
			}
			wantInPool := 0
			if alt {
				wantInPool = len(list)
				rp := list[0]["resource_pool"].(map[string]any)["id"].(string)
				if v := c.json("GET", "/api/domains/?limit=0&resource_pool="+rp, nil, 200); v["count"] != float64(wantInPool) {
					t.Fatalf("resource_pool filter: %v", v["count"])
				}
			}

			other := s.DomainIDs()[1]
			d := c.json("GET", "/api/domains/"+other+"/", nil, 200)
			_, hasCPU := d["cpu_count"]
			topo, _ := d["cpu_topology"].(map[string]any)
			up, upObj := d["uptime_on_current_node"].(map[string]any)
			_, upNum := d["uptime_on_current_node"].(float64)
			_, permObj := d["permissions"].(map[string]any)
			_, permArr := d["permissions"].([]any)
			if alt {
				if hasCPU || topo["cpu_count"] != list[1]["cpu_count"] || !upObj || up["start_time"] == nil || up["uptime"] == nil || up["system_time"] == nil || !permObj {
					t.Fatalf("alternative detail: %v", d)
				}
			} else if !hasCPU || !upNum || !permArr {
				t.Fatalf("default detail: %v", d)
			}
		})
	}
}
