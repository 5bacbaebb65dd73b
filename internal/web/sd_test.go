package web

import (
	"maps"
	"testing"

	"github.com/veil-exporter/veil-exporter/collector"
	"github.com/veil-exporter/veil-exporter/veil"
)

// TestAppendSD: the JSON of the target groups is what encoding/json reads back, with names
// that need escaping, labels present only when known, IPv6 hosts in brackets, one target per
// port tag, and per family the address it asks for (any: IPv4, else IPv6, and says which).
func TestAppendSD(t *testing.T) {
	a := &veil.Domain{ID: "id-a", VerboseName: `web "1" <&> ünï`, Node: veil.Ref{ID: "n1"}, GuestUtils: veil.GuestUtils{Hostname: "web1\tx"}}
	b := &veil.Domain{ID: "id-b", VerboseName: "db", Node: veil.Ref{ID: "n2"}}
	c := &veil.Domain{ID: "id-c", VerboseName: "v6only", Node: veil.Ref{ID: "n2"}}
	srcs := []sdSource{
		{controller: "prod", targets: []collector.GuestTarget{
			{Domain: a, IPv4: "10.0.0.1", Node: "node-1", Tags: ",db,prod,"},
			{Domain: b, IPv4: "10.0.0.2", IPv6: "2001:db8::2", Node: "", Ports: []string{"8080", "9100"}},
			{Domain: c, Node: "node-2"},
		}, osIDs: map[string]string{"id-a": "ubuntu"}, ipv6: map[string]string{"id-c": "fd00::c"}},
		{controller: "test"},
	}
	labelsA := map[string]string{
		"__meta_veil_controller": "prod", "__meta_veil_domain_id": "id-a", "__meta_veil_domain": `web "1" <&> ünï`,
		"__meta_veil_node_id": "n1", "__meta_veil_node": "node-1", "__meta_veil_power_state": "on",
		"__meta_veil_guest_hostname": "web1\tx", "__meta_veil_tags": ",db,prod,", "__meta_veil_os_id": "ubuntu",
	}
	labelsB := map[string]string{
		"__meta_veil_controller": "prod", "__meta_veil_domain_id": "id-b", "__meta_veil_domain": "db",
		"__meta_veil_node_id": "n2", "__meta_veil_node": "", "__meta_veil_power_state": "on",
	}
	labelsC := map[string]string{
		"__meta_veil_controller": "prod", "__meta_veil_domain_id": "id-c", "__meta_veil_domain": "v6only",
		"__meta_veil_node_id": "n2", "__meta_veil_node": "node-2", "__meta_veil_power_state": "on",
	}
	with := func(l map[string]string, k, v string) map[string]string {
		out := maps.Clone(l)
		out[k] = v
		return out
	}
	tests := []struct {
		name string
		q    sdQuery
		want []sdGroup
	}{
		{"ipv4", sdQuery{port: "9100", family: familyIPv4}, []sdGroup{
			{Targets: []string{"10.0.0.1:9100"}, Labels: labelsA},
			{Targets: []string{"10.0.0.2:8080", "10.0.0.2:9100"}, Labels: labelsB},
		}},
		{"ipv6: the guest's interfaces before guest_utils, in brackets", sdQuery{port: "9182", family: familyIPv6}, []sdGroup{
			{Targets: []string{"[2001:db8::2]:8080", "[2001:db8::2]:9100"}, Labels: labelsB},
			{Targets: []string{"[fd00::c]:9182"}, Labels: labelsC},
		}},
		{"any", sdQuery{port: "9100", family: familyAny}, []sdGroup{
			{Targets: []string{"10.0.0.1:9100"}, Labels: with(labelsA, "__meta_veil_ip_family", "ipv4")},
			{Targets: []string{"10.0.0.2:8080", "10.0.0.2:9100"}, Labels: with(labelsB, "__meta_veil_ip_family", "ipv4")},
			{Targets: []string{"[fd00::c]:9100"}, Labels: with(labelsC, "__meta_veil_ip_family", "ipv6")},
		}},
		{"tags: all of them", sdQuery{port: "9100", family: familyIPv4, tags: []string{",prod,", ",db,"}}, []sdGroup{
			{Targets: []string{"10.0.0.1:9100"}, Labels: labelsA},
		}},
		{"a tag no VM has", sdQuery{port: "9100", family: familyIPv4, tags: []string{",prod,", ",web,"}}, nil},
		{"node by name or id: any of them", sdQuery{port: "9100", family: familyAny, nodes: []string{"node-2", "n1"}}, []sdGroup{
			{Targets: []string{"10.0.0.1:9100"}, Labels: with(labelsA, "__meta_veil_ip_family", "ipv4")},
			{Targets: []string{"[fd00::c]:9100"}, Labels: with(labelsC, "__meta_veil_ip_family", "ipv6")},
		}},
		{"os_id: a VM without one does not match", sdQuery{port: "9100", family: familyAny, osIDs: []string{"debian", "ubuntu"}}, []sdGroup{
			{Targets: []string{"10.0.0.1:9100"}, Labels: with(labelsA, "__meta_veil_ip_family", "ipv4")},
		}},
		{"an unknown node", sdQuery{port: "9100", family: familyIPv4, nodes: []string{"nowhere"}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := decodeSD(t, string(appendSD(nil, srcs, &tt.q)))
			if diff := diffSD(got, tt.want); diff != "" {
				t.Error(diff)
			}
		})
	}
	if s := string(appendSD(nil, nil, &sdQuery{port: "9100", family: familyIPv4})); s != "[]" {
		t.Errorf("no targets = %q, want []", s)
	}
}
