package veil

import (
	"errors"
	"testing"
)

func stat(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestGuestDiskStatsDecoding: every statistic is optional and read as sent: numbers and numeric
// strings are values, anything else (absent, null, text, an object) is nil, never 0; entries
// that are not objects are skipped; a result that is not a list is ErrGuestAnswer.
func TestGuestDiskStatsDecoding(t *testing.T) {
	got, err := decodeGuestDiskStats(nil, "", []byte(`[
		{"name": "vda", "major": 252, "minor": 0, "stats": {"read-sectors": 2048, "write-sectors": "4096",
			"read-ios": 10, "write-ios": " 20 ", "read-ticks": 1500, "write-ticks": null, "total-ticks": {"v": 1},
			"ios-pgr": 0, "weight-ticks": -5, "flush-ios": "lots"}},
		{"name": "vdb"},
		42,
		{"name": "sda", "stats": []}
	]`))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("%d disks, want 3 (the number is skipped): %+v", len(got), got)
	}
	vda := got[0]
	for _, c := range []struct {
		name string
		got  *float64
		want any
	}{
		{"major", vda.Major, 252.0},
		{"minor", vda.Minor, 0.0},
		{"read-sectors", vda.Stats.ReadSectors, 2048.0},
		{"write-sectors as a string", vda.Stats.WriteSectors, 4096.0},
		{"read-ios", vda.Stats.ReadIOs, 10.0},
		{"write-ios as a padded string", vda.Stats.WriteIOs, 20.0},
		{"read-ticks", vda.Stats.ReadTicks, 1500.0},
		{"ios-pgr zero is a value", vda.Stats.IOsPgr, 0.0},
		{"negative kept for the caller", vda.Stats.WeightTicks, -5.0},
		{"write-ticks null", vda.Stats.WriteTicks, nil},
		{"total-ticks object", vda.Stats.TotalTicks, nil},
		{"flush-ios text", vda.Stats.FlushIOs, nil},
		{"discard-sectors absent", vda.Stats.DiscardSectors, nil},
	} {
		if stat(c.got) != c.want {
			t.Errorf("vda %s = %v, want %v", c.name, stat(c.got), c.want)
		}
	}
	if vda.Name != "vda" || got[1].Name != "vdb" || got[1].Stats != (GuestDiskStatValues{}) || got[2].Name != "sda" || got[2].Stats.ReadIOs != nil {
		t.Errorf("disks without stats: %+v", got[1:])
	}
	for _, bad := range []string{`{}`, `null`, `"x"`, `12`} {
		if _, err := decodeGuestDiskStats(nil, "", []byte(bad)); !errors.Is(err, ErrGuestAnswer) {
			t.Errorf("%s: err = %v, want ErrGuestAnswer", bad, err)
		}
	}
	if got, err := decodeGuestDiskStats(nil, "", []byte(`[]`)); err != nil || len(got) != 0 {
		t.Errorf("[] = %v, %v; want no disks", got, err)
	}
}

func TestGuestCPUStatsDecoding(t *testing.T) {
	got, err := decodeGuestCPUStats(nil, "", []byte(`[
		{"type": "linux", "cpu": 0, "user": 100, "nice": "2", "system": 30, "idle": 5000, "iowait": 7, "irq": 0,
			"softirq": 1, "steal": 0, "guest": 0, "guestnice": 0},
		{"type": "linux", "cpu": "1", "user": 120, "system": 35, "idle": 4900},
		{"type": "other", "cpu": 2, "user": 1}
	]`))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Type != "linux" || got[2].Type != "other" {
		t.Fatalf("got %+v", got)
	}
	if stat(got[0].Nice) != 2.0 || stat(got[0].IOWait) != 7.0 || stat(got[0].IRQ) != 0.0 || stat(got[0].GuestNice) != 0.0 {
		t.Errorf("cpu0 %+v", got[0])
	}
	if stat(got[1].CPU) != 1.0 || stat(got[1].User) != 120.0 || got[1].Nice != nil || got[1].IOWait != nil || got[1].Steal != nil {
		t.Errorf("cpu1 with fields left out: %+v", got[1])
	}
	if _, err := decodeGuestCPUStats(nil, "", []byte(`{"cpu": 0}`)); !errors.Is(err, ErrGuestAnswer) {
		t.Errorf("an object: err = %v, want ErrGuestAnswer", err)
	}
}

func TestGuestLoadDecoding(t *testing.T) {
	for _, c := range []struct {
		in      string
		want    [3]any
		wantErr bool
	}{
		{`{"load1": 0.5, "load5": 0.25, "load15": 0.125}`, [3]any{0.5, 0.25, 0.125}, false},
		{`{"load1": "1.5", "load15": null}`, [3]any{1.5, nil, nil}, false},
		{`{}`, [3]any{nil, nil, nil}, false},
		{`[0.5, 0.25, 0.125]`, [3]any{}, true},
		{`null`, [3]any{}, true},
	} {
		l, err := decodeGuestLoad([]byte(c.in))
		if c.wantErr {
			if !errors.Is(err, ErrGuestAnswer) {
				t.Errorf("%s: err = %v, want ErrGuestAnswer", c.in, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		if got := [3]any{stat(l.Load1), stat(l.Load5), stat(l.Load15)}; got != c.want {
			t.Errorf("%s = %v, want %v", c.in, got, c.want)
		}
	}
}

// TestGuestStatsEntriesThatAreNotObjectsAreTold: an entry of guest-get-diskstats or
// guest-get-cpustats that is not an object is skipped and told to the client's Rejected hook,
// once per entry, with the command as collection and the VM's id; the other entries are kept.
func TestGuestStatsEntriesThatAreNotObjectsAreTold(t *testing.T) {
	var got []Rejection
	c := &Client{rejected: func(r Rejection) { got = append(got, r) }}
	disks, err := decodeGuestDiskStats(c, "vm-1", []byte(`[{"name":"vda"}, 7, "x", {"name":"vdb"}]`))
	if err != nil || len(disks) != 2 {
		t.Fatalf("disks %v, %v; want vda and vdb", disks, err)
	}
	cpus, err := decodeGuestCPUStats(c, "vm-2", []byte(`[null, {"cpu":0}]`))
	if err != nil || len(cpus) != 1 {
		t.Fatalf("cpus %v, %v; want one", cpus, err)
	}
	if len(got) != 3 || got[0].Collection != "guest-get-diskstats" || got[0].ID != "vm-1" || got[2].Collection != "guest-get-cpustats" || got[2].ID != "vm-2" {
		t.Errorf("rejections %+v, want 2 of guest-get-diskstats (vm-1) and 1 of guest-get-cpustats (vm-2)", got)
	}
}
