package inventory

// The detail sweep (deviceSweep): the details of the VMs' devices, read one object at a time
// where the operator asks for them (collect.device_details_interval): what the lists lack — a
// disk's bus, type and snapshots, an interface's link_state — at a pace that reads each disk and
// interface once per interval, so that the cost is spread evenly over it and shares the
// controller's budget with the rest. It reads the store's snapshots and hands what it read to
// the store (Store.storeDetails); its own state is the sweep running, in its goroutine.

import (
	"context"
	"errors"
	"maps"
	"strings"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"

	"github.com/veil-exporter/veil-exporter/veil"
)

// collDetails is the run status of the detail sweep (veil_collector_*{collector="device_details"}).
const collDetails = "device_details"

// DeviceDetail is what a detail adds to a disk or an interface row; -1 and "" are not carried.
type DeviceDetail struct {
	Bus, Type string
	Snapshots int
	Up        int
}

// detailPublishEvery is how often the details read so far reach /metrics during a sweep: a
// render of every device family per detail read would cost more than the reads.
const detailPublishEvery = 30 * time.Second

// detailTarget is one object to read: a disk or an interface.
type detailTarget struct {
	id   string
	disk bool
}

// deviceSweep reads the details of the devices each snapshot lists.
type deviceSweep struct {
	client   *veil.Client
	every    time.Duration // collect.device_details_interval; 0: off
	logger   log.Logger
	snapshot func() *Snapshot // the store's latest
	// store publishes the details known so far and the sweep's run status (since start: fails
	// failures, the last lastErr).
	store func(known map[string]DeviceDetail, start time.Time, fails int, lastErr string)
}

// run reads, until ctx is done, the detail of every disk and interface the last listing
// named, each once per collect.device_details_interval, paced evenly. An object gone (404) is
// forgotten; any other failure keeps what was read of it before and is counted in the sweep's
// run status. It returns at once when the interval is 0 (the default: off).
func (w *deviceSweep) run(ctx context.Context) {
	every := w.every
	if every <= 0 {
		return
	}
	for ctx.Err() == nil {
		targets, known := w.targets()
		if len(targets) == 0 {
			// Nothing listed yet (or no devices): look again a little later.
			if !sleepCtx(ctx, min(every, 10*time.Second)) {
				return
			}
			continue
		}
		w.sweep(ctx, targets, known)
	}
}

// targets lists the disks and interfaces of the snapshot, and the details read so far of those
// still listed.
func (w *deviceSweep) targets() ([]detailTarget, map[string]DeviceDetail) {
	snap := w.snapshot()
	targets := make([]detailTarget, 0, len(snap.Vdisks)+len(snap.Interfaces))
	known := make(map[string]DeviceDetail, len(snap.Details))
	keep := func(id string, disk bool) {
		targets = append(targets, detailTarget{id: id, disk: disk})
		if d, ok := snap.Details[id]; ok {
			known[id] = d
		}
	}
	for i := range snap.Vdisks {
		keep(snap.Vdisks[i].ID, true)
	}
	for i := range snap.Interfaces {
		keep(snap.Interfaces[i].ID, false)
	}
	return targets, known
}

// sweep reads targets once, one every every/len(targets), publishing what it read every
// detailPublishEvery and at its end.
func (w *deviceSweep) sweep(ctx context.Context, targets []detailTarget, known map[string]DeviceDetail) {
	start := time.Now()
	pace := w.every / time.Duration(len(targets))
	// The first read is published at once, with the sweep's status: before it, a sweep of an
	// hour would show its collector as never run for the first 30 s.
	var published time.Time
	fails, lastErr := 0, ""
	t := time.NewTicker(max(pace, time.Millisecond))
	defer t.Stop()
	for _, tg := range targets {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		d, err := w.read(ctx, tg)
		switch {
		case err == nil:
			known[tg.id] = d
		case errors.Is(err, veil.ErrNotFound):
			delete(known, tg.id) // deleted since it was listed
		case errors.As(err, new(*veil.DecodeError)):
			// Its answer does not decode: the client counted and said it (an object rejected);
			// that costs this object its detail, not the sweep its success.
			delete(known, tg.id)
		case ctx.Err() != nil:
			return
		default:
			fails++
			lastErr = err.Error()
		}
		if time.Since(published) >= detailPublishEvery {
			w.store(known, start, fails, lastErr)
			published = time.Now()
		}
	}
	w.store(known, start, fails, lastErr)
	if fails > 0 {
		level.Warn(w.logger).Log("msg", "device details: some could not be read; what was read of them before is kept", "failed", fails, "of", len(targets), "err", lastErr)
	}
}

// read reads the detail of one disk or interface.
func (w *deviceSweep) read(ctx context.Context, tg detailTarget) (DeviceDetail, error) {
	d := DeviceDetail{Snapshots: -1, Up: -1}
	if tg.disk {
		v, err := w.client.Vdisk(ctx, tg.id)
		if err != nil {
			return d, err
		}
		d.Bus, d.Type = v.TargetBus, v.DiskType
		if v.Snapshots != nil {
			d.Snapshots = len(v.Snapshots)
		}
		return d, nil
	}
	v, err := w.client.VMachineInf(ctx, tg.id)
	if err != nil {
		return d, err
	}
	d.Up = linkUp(v.LinkState)
	return d, nil
}

// linkUp is 1 for link_state up, 0 for down, -1 for anything else (not carried).
func linkUp(s string) int {
	switch strings.ToLower(s) {
	case "up":
		return 1
	case "down":
		return 0
	}
	return -1
}

// storeDetails stores a snapshot whose details are a copy of known, and the detail sweep's run
// status, which it sets from what the sweep read so far each time what it read is published: a
// sweep lasts the whole interval (an hour, say), and its status should not wait for its end (nor
// say "failed" until then, as a run not yet ended does).
func (s *Store) storeDetails(known map[string]DeviceDetail, start time.Time, fails int, lastErr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := s.snap.next()
	next.Details = maps.Clone(known)
	next.DevicesGen++
	s.publish(next)
	s.record.sweptDetails(start, fails, lastErr)
}

// WithDetail fills what a disk row's list item lacked from its detail.
func (r Vdisk) WithDetail(details map[string]DeviceDetail) Vdisk {
	d, ok := details[r.ID]
	if !ok {
		return r
	}
	if r.Bus == "" {
		r.Bus = d.Bus
	}
	if r.Type == "" {
		r.Type = d.Type
	}
	if r.Snapshots < 0 {
		r.Snapshots = d.Snapshots
	}
	return r
}

// WithDetail fills an interface row's link state from its detail where the list lacked it.
func (r Interface) WithDetail(details map[string]DeviceDetail) Interface {
	if d, ok := details[r.ID]; ok && r.Up < 0 {
		r.Up = d.Up
	}
	return r
}
