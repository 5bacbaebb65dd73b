// This file holds the ha section: replicas that share the controllers through leases in a
// NATS JetStream key-value bucket (package ha), its defaults and its validation.

package config

import (
	"regexp"
	"time"
)

// HA configures high availability: replicas with the same config share the controllers, each
// run by the one replica that holds its lease in Bucket.
type HA struct {
	Enabled bool   `yaml:"enabled"`
	Bucket  string `yaml:"bucket"`
	// LeaseTTL bounds how long a dead replica's controllers stay without an owner.
	LeaseTTL time.Duration `yaml:"lease_ttl"`
	// Instance names this replica in the bucket; empty means hostname-pid.
	Instance string `yaml:"instance"`
	// Replicas is the bucket's replica count on the NATS cluster (3 on a 3-node cluster).
	Replicas int `yaml:"replicas"`
}

// MinLeaseTTL is the shortest ha.lease_ttl accepted: leases are renewed every third of it, and a
// renewal must fit in that time on a loaded NATS cluster.
const MinLeaseTTL = 3 * time.Second

func defaultHA() HA {
	return HA{Bucket: "VEIL_EXPORTER_LEASES", LeaseTTL: 15 * time.Second, Replicas: 1}
}

var (
	bucketRE   = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)
	instanceRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
)

// ha checks the ha section and how it combines with events and nats; a disabled section is
// not checked.
func (v *validator) ha(c *Config) {
	h := c.HA
	if !h.Enabled {
		return
	}
	if !bucketRE.MatchString(h.Bucket) {
		v.add("ha.bucket", "%q is not a key-value bucket name (letters, digits, '_' or '-')", h.Bucket)
	}
	if h.LeaseTTL < MinLeaseTTL {
		v.add("ha.lease_ttl", "%v is too short: at least %v (leases are renewed every lease_ttl/3)", h.LeaseTTL, MinLeaseTTL)
	}
	if h.Instance != "" && !instanceRE.MatchString(h.Instance) {
		v.add("ha.instance", "%q must be 1-64 letters, digits, '_' or '-' (it is a key in the lease bucket)", h.Instance)
	}
	if h.Replicas < 1 || h.Replicas > 5 {
		v.add("ha.replicas", "%d is out of range 1..5 (the bucket's replicas on the NATS cluster)", h.Replicas)
	}
	if c.NATS.Embedded.Enabled {
		v.add("ha.enabled", "cannot be used with nats.embedded.enabled: the embedded NATS server is a single node "+
			"(it has no cluster settings), so the replicas' leases would live and die with one process; "+
			"set nats.embedded.enabled: false and point nats.url at a NATS cluster")
	}
	if c.Events.Enabled {
		if c.Events.Checkpoint.Store == "file" {
			v.add("ha.enabled", "with events.enabled needs events.checkpoint.store: nats_kv, not file: "+
				"a file position is not shared, so the next owner of a controller would re-read or skip events")
		}
		if !c.NATS.JetStream.Enabled {
			v.add("ha.enabled", "with events.enabled needs nats.jetstream.enabled: true: "+
				"the position lives in a key-value bucket and Nats-Msg-Id drops what two owners both published")
		}
	} else {
		// Without events nothing else checks the NATS settings the leases need.
		v.nats(&c.NATS)
	}
}
