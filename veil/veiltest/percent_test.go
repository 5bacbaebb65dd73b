package veiltest

// Conformance of usage percentages through raw HTTP: nodes, clusters and
// domains send cpu_used_percent_user and mem_used_percent_user as decimal strings by default,
// as the vendor's Go client expects, and as JSON numbers with Options.PercentNumbers.

import (
	"regexp"
	"strconv"
	"testing"
)

var decimalString = regexp.MustCompile(`^[0-9]+\.[0-9]{2}$`)

func TestUsagePercentagesAreDecimalStringsByDefault(t *testing.T) {
	for _, numbers := range []bool{false, true} {
		name := "strings by default"
		if numbers {
			name = "numbers with PercentNumbers"
		}
		t.Run(name, func(t *testing.T) {
			s, c := newSim(t, Options{Nodes: 4, Clusters: 2, VMs: 20, PercentNumbers: numbers})
			var objs []map[string]any
			for _, p := range []string{"/api/nodes/", "/api/clusters/", "/api/domains/"} {
				objs = append(objs, results(t, c.json("GET", p, nil, 200))...)
			}
			objs = append(objs,
				c.json("GET", "/api/nodes/"+s.NodeIDs()[0]+"/", nil, 200),
				c.json("GET", "/api/clusters/"+s.ClusterIDs()[0]+"/", nil, 200),
				c.json("GET", "/api/domains/"+s.DomainIDs()[0]+"/", nil, 200))
			var nonZero bool
			for _, o := range objs {
				for _, f := range []string{"cpu_used_percent_user", "mem_used_percent_user"} {
					switch v := o[f].(type) {
					case string:
						if numbers || !decimalString.MatchString(v) {
							t.Fatalf("%s of %v is %q", f, o["verbose_name"], v)
						}
						if x, _ := strconv.ParseFloat(v, 64); x > 0 {
							nonZero = true
						}
					case float64:
						if !numbers {
							t.Fatalf("%s of %v is the number %v, want a decimal string", f, o["verbose_name"], v)
						}
						nonZero = nonZero || v > 0
					default:
						t.Fatalf("%s of %v is %T %v", f, o["verbose_name"], v, v)
					}
				}
			}
			if !nonZero {
				t.Fatal("every percentage is zero")
			}
		})
	}
}
