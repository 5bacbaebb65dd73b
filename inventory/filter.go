package inventory

// The domain filter (domainFilter): domain_include and domain_exclude, applied to the VMs
// listed or pushed and to the VM each disk and interface belongs to (devices.go). Set once when
// the store is made and read without a lock.

import (
	"regexp"

	"github.com/veil-exporter/veil-exporter/veil"
)

// domainFilter selects VMs by name.
type domainFilter struct {
	include *regexp.Regexp // nil: every domain
	exclude *regexp.Regexp // nil: none
}

// keep applies domain_include/exclude to a VM's name.
func (f domainFilter) keep(name string) bool {
	if f.include != nil && !f.include.MatchString(name) {
		return false
	}
	return f.exclude == nil || !f.exclude.MatchString(name)
}

// domains returns the domains of all the filter keeps (all itself without a filter).
func (f domainFilter) domains(all []veil.Domain) []veil.Domain {
	if f.include == nil && f.exclude == nil {
		return all
	}
	out := make([]veil.Domain, 0, len(all))
	for _, d := range all {
		if f.include != nil && !f.include.MatchString(d.VerboseName) {
			continue
		}
		if f.exclude != nil && f.exclude.MatchString(d.VerboseName) {
			continue
		}
		out = append(out, d)
	}
	return out
}
