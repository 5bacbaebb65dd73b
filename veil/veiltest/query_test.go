package veiltest

// Conformance of collection queries through raw HTTP: the filters the
// vendor's clients send (nodes cluster; domains node, cluster, datapool, resource_pool,
// template, status, power_state, ids, name; data-pools node, cluster; tasks parent, status;
// events type, user, task), ordering on every collection and fields= on every collection and
// detail. A filter value that names nothing gives an empty list, not an error.

import (
	"net/url"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

func ids(rs []map[string]any) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r["id"].(string)
	}
	return out
}

// where selects the items for which pred holds.
func where(rs []map[string]any, pred func(map[string]any) bool) []map[string]any {
	var out []map[string]any
	for _, r := range rs {
		if pred(r) {
			out = append(out, r)
		}
	}
	return out
}

func refID(v any) string {
	switch x := v.(type) {
	case map[string]any:
		s, _ := x["id"].(string)
		return s
	case string:
		return x
	}
	return ""
}

func TestFiltersSelectAndUnknownValuesGiveEmptyLists(t *testing.T) {
	s, c := newSim(t, Options{Seed: 9, Nodes: 6, Clusters: 2, Datapools: 4, VMs: 60, Templates: 3, InitialEvents: 50,
		TaskDuration: 10 * time.Millisecond})
	vm := pickVM(t, s, func(d DomainInfo) bool { return !d.Template })
	c.json("POST", "/api/domains/"+vm+"/shutdown/", nil, 200) // a task with known events

	nodes := all(t, c, "/api/nodes/")
	domains := all(t, c, "/api/domains/")
	pools := all(t, c, "/api/data-pools/")
	tasks := all(t, c, "/api/tasks/")
	events := all(t, c, "/api/events/")
	cl := s.ClusterIDs()[1]
	node := s.NodeIDs()[1]
	nodeCluster := map[string]string{}
	for _, n := range nodes {
		nodeCluster[n["id"].(string)] = refID(n["cluster"])
	}
	poolID := s.DatapoolIDs()[0]
	poolOfVM := poolsOfVMs(s, c)
	shutdownTask := tasks[0]["id"].(string) // newest first: the shutdown above
	const unknown = "00000000-0000-4000-8000-000000000000"

	for _, tc := range []struct {
		path string
		want []map[string]any
	}{
		{"/api/nodes/?cluster=" + cl, where(nodes, func(n map[string]any) bool { return refID(n["cluster"]) == cl })},
		{"/api/nodes/?cluster=" + unknown, nil},
		{"/api/domains/?node=" + node, where(domains, func(d map[string]any) bool { return refID(d["node"]) == node })},
		{"/api/domains/?node=" + unknown, nil},
		{"/api/domains/?cluster=" + cl, where(domains, func(d map[string]any) bool { return nodeCluster[refID(d["node"])] == cl })},
		{"/api/domains/?datapool=" + poolID, where(domains, func(d map[string]any) bool { return poolOfVM[d["id"].(string)] == poolID })},
		{"/api/domains/?resource_pool=" + unknown, nil},
		{"/api/domains/?template=true", where(domains, func(d map[string]any) bool { return d["template"] == true })},
		{"/api/domains/?template=false", where(domains, func(d map[string]any) bool { return d["template"] == false })},
		{"/api/domains/?template=perhaps", nil},
		{"/api/domains/?status=ACTIVE", where(domains, func(d map[string]any) bool { return d["status"] == "ACTIVE" })},
		{"/api/domains/?status=NOPE", nil},
		{"/api/domains/?power_state=3", where(domains, func(d map[string]any) bool { return d["user_power_state"] == float64(3) })},
		{"/api/domains/?power_state=off", where(domains, func(d map[string]any) bool { return d["user_power_state"] == float64(1) })},
		{"/api/domains/?power_state=sideways", nil},
		{"/api/domains/?ids=" + domains[3]["id"].(string) + "," + domains[7]["id"].(string) + "," + unknown, []map[string]any{domains[3], domains[7]}},
		{"/api/domains/?name=" + url.QueryEscape(domains[5]["verbose_name"].(string)), where(domains, func(d map[string]any) bool {
			return strings.Contains(d["verbose_name"].(string), domains[5]["verbose_name"].(string))
		})},
		{"/api/domains/?name=no-such-vm", nil},
		{"/api/domains/?node=" + node + "&power_state=3", where(domains, func(d map[string]any) bool {
			return refID(d["node"]) == node && d["user_power_state"] == float64(3)
		})},
		{"/api/data-pools/?node=" + node, where(pools, func(p map[string]any) bool { return connectedTo(p, func(id string) bool { return id == node }) })},
		{"/api/data-pools/?cluster=" + cl, where(pools, func(p map[string]any) bool {
			return connectedTo(p, func(id string) bool { return nodeCluster[id] == cl })
		})},
		{"/api/data-pools/?node=" + unknown, nil},
		{"/api/tasks/?status=SUCCESS", where(tasks, func(x map[string]any) bool { return x["status"] == "SUCCESS" })},
		{"/api/tasks/?status=FAILED", where(tasks, func(x map[string]any) bool { return x["status"] == "FAILED" })},
		{"/api/tasks/?parent=" + unknown, nil},
		{"/api/events/?type=warning", where(events, func(e map[string]any) bool { return e["type"] == "warning" })},
		{"/api/events/?user=admin", where(events, func(e map[string]any) bool { return e["user"] == "admin" })},
		{"/api/events/?user=nobody", nil},
		{"/api/events/?task=" + shutdownTask, where(events, func(e map[string]any) bool { return e["task"] == shutdownTask })},
		{"/api/events/?task=" + unknown, nil},
	} {
		t.Run(tc.path, func(t *testing.T) {
			got := all(t, c, tc.path)
			if strings.Join(ids(got), ",") != strings.Join(ids(tc.want), ",") {
				t.Fatalf("got %d items %v, want %d %v", len(got), ids(got), len(tc.want), ids(tc.want))
			}
			if v := c.json("GET", tc.path+"&limit=0", nil, 200); v["count"] != float64(len(tc.want)) {
				t.Fatalf("count %v, want %d", v["count"], len(tc.want))
			}
		})
	}
	// The filters above are not vacuous.
	if len(where(domains, func(d map[string]any) bool { return d["template"] == true })) == 0 ||
		len(all(t, c, "/api/events/?task="+shutdownTask)) != 2 || len(all(t, c, "/api/nodes/?cluster="+cl)) == 0 {
		t.Fatal("the inventory does not exercise the filters")
	}
}

// sortKey is what the test compares for an ordering field.
func sortKey(v any) string {
	switch x := v.(type) {
	case float64:
		return strconv.FormatFloat(x+1e12, 'f', 6, 64) // fixed width for the magnitudes here
	case string:
		if f, err := strconv.ParseFloat(x, 64); err == nil && strings.Contains(x, ".") {
			return strconv.FormatFloat(f+1e12, 'f', 6, 64)
		}
		return x
	case map[string]any:
		s, _ := x["verbose_name"].(string)
		return s
	}
	return ""
}

func TestOrderingOnEveryCollection(t *testing.T) {
	_, c := newSim(t, Options{Seed: 3, Nodes: 8, Clusters: 3, Datapools: 5, VMs: 150, InitialEvents: 120, InitialTasks: 30})
	for _, tc := range []struct{ path, field string }{
		{"/api/nodes/", "verbose_name"},
		{"/api/nodes/", "cpu_used_percent_user"},
		{"/api/clusters/", "verbose_name"},
		{"/api/clusters/", "nodes_count"},
		{"/api/data-pools/", "size"},
		{"/api/data-pools/", "verbose_name"},
		{"/api/domains/", "verbose_name"},
		{"/api/domains/", "memory_count"},
		{"/api/domains/", "node"},
		{"/api/tasks/", "created"},
		{"/api/tasks/", "name"},
		{"/api/events/", "created"},
		{"/api/events/", "type"},
	} {
		for _, desc := range []bool{false, true} {
			ord := tc.field
			if desc {
				ord = "-" + ord
			}
			t.Run(tc.path+"?ordering="+ord, func(t *testing.T) {
				got := all(t, c, tc.path+"?ordering="+ord)
				if len(got) < 3 {
					t.Fatalf("only %d items", len(got))
				}
				keys := make([]string, len(got))
				for i, x := range got {
					keys[i] = sortKey(x[tc.field])
				}
				ok := sort.StringsAreSorted(keys)
				if desc {
					ok = sort.SliceIsSorted(keys, func(i, j int) bool { return keys[i] > keys[j] })
				}
				if !ok {
					t.Fatalf("not ordered by %s: %v", ord, keys)
				}
			})
		}
	}
	t.Run("-created reverses the domains' default order", func(t *testing.T) {
		fwd, rev := ids(all(t, c, "/api/domains/")), ids(all(t, c, "/api/domains/?ordering=-created"))
		for i := range fwd {
			if fwd[i] != rev[len(rev)-1-i] {
				t.Fatalf("position %d: %s vs %s", i, fwd[i], rev[len(rev)-1-i])
			}
		}
	})
	t.Run("an unknown field changes nothing", func(t *testing.T) {
		if a, b := ids(all(t, c, "/api/nodes/")), ids(all(t, c, "/api/nodes/?ordering=no_such_field")); strings.Join(a, ",") != strings.Join(b, ",") {
			t.Fatalf("%v vs %v", a, b)
		}
	})
}

func TestFieldsKeepOnlyThoseKeys(t *testing.T) {
	s, c := newSim(t, Options{VMs: 10, InitialEvents: 10, InitialTasks: 5})
	tasks := results(t, c.json("GET", "/api/tasks/", nil, 200))
	events := results(t, c.json("GET", "/api/events/", nil, 200))
	for _, tc := range []struct {
		path   string
		fields []string
	}{
		{"/api/nodes/", []string{"id", "verbose_name"}},
		{"/api/nodes/" + s.NodeIDs()[0] + "/", []string{"id", "cpu_topology"}},
		{"/api/clusters/", []string{"id", "nodes_count"}},
		{"/api/clusters/" + s.ClusterIDs()[0] + "/", []string{"verbose_name"}},
		{"/api/data-pools/", []string{"id", "free_space"}},
		{"/api/data-pools/" + s.DatapoolIDs()[0] + "/", []string{"id", "nodes_connected"}},
		{"/api/domains/", []string{"id", "verbose_name", "guest_utils"}},
		{"/api/domains/" + s.DomainIDs()[0] + "/", []string{"id", "os_type"}},
		{"/api/tasks/", []string{"id", "status"}},
		{"/api/tasks/" + tasks[0]["id"].(string) + "/", []string{"id", "events"}},
		{"/api/events/", []string{"id", "message", "entities"}},
		{"/api/events/" + events[0]["id"].(string) + "/", []string{"id", "created"}},
	} {
		t.Run(tc.path, func(t *testing.T) {
			v := c.json("GET", tc.path+"?fields="+strings.Join(tc.fields, ","), nil, 200)
			objs := []map[string]any{v}
			if _, ok := v["results"]; ok {
				objs = results(t, v)
				if v["count"] == nil || len(objs) == 0 {
					t.Fatalf("collection envelope lost: %v", v)
				}
			}
			for _, o := range objs {
				if len(o) != len(tc.fields) {
					t.Fatalf("keys %v, want %v", o, tc.fields)
				}
				for _, f := range tc.fields {
					if _, ok := o[f]; !ok {
						t.Fatalf("%s missing in %v", f, o)
					}
				}
			}
		})
	}
	t.Run("errors pass unchanged", func(t *testing.T) {
		st, b := c.do("GET", "/api/domains/nope/?fields=id", nil)
		if st != 404 || errorOf(t, b)["code"] != "50004" {
			t.Fatalf("%d %s", st, b)
		}
	})
}

// connectedTo says whether a data pool is connected to a node that pred accepts.
func connectedTo(p map[string]any, pred func(string) bool) bool {
	for _, x := range p["nodes_connected"].([]any) {
		if pred(x.(map[string]any)["id"].(string)) {
			return true
		}
	}
	return false
}

// poolsOfVMs maps each VM to its data pool, as its detail says.
func poolsOfVMs(s *Server, c *client) map[string]string {
	poolOfVM := map[string]string{}
	for _, id := range s.DomainIDs() {
		d := c.json("GET", "/api/domains/"+id+"/", nil, 200)
		poolOfVM[id] = refID(d["datapool"])
	}
	return poolOfVM
}
