package veil_test

// One bad object costs that object: the rest of its page and collection are used, and the
// object is told to Config.Rejected.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/veil-exporter/veil-exporter/veil"
)

// rejections records what a client was told.
type rejections struct {
	mu  sync.Mutex
	all []veil.Rejection
}

func (r *rejections) add(x veil.Rejection) {
	r.mu.Lock()
	r.all = append(r.all, x)
	r.mu.Unlock()
}

func (r *rejections) list() []veil.Rejection {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.all)
}

// pagedServer serves /api/domains/ from items (raw JSON objects), paged by limit and offset;
// count, when set, overrides the count a page announces.
func pagedServer(t *testing.T, items []string, count func(offset int) int) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		offset, _ := strconv.Atoi(r.URL.Query().Get("offset"))
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		n := len(items)
		if count != nil {
			n = count(offset)
		}
		page := []json.RawMessage{}
		for i := offset; i < offset+limit && i < n; i++ {
			page = append(page, json.RawMessage(items[i%len(items)]))
		}
		b, _ := json.Marshal(map[string]any{"count": n, "next": nil, "previous": nil, "results": page})
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestOneOddVMCostsOnlyItself: among 250 VMs on three pages, one whose memory_count is "n/a",
// one without an id and one that is not an object are skipped and told; every other VM is listed.
func TestOneOddVMCostsOnlyItself(t *testing.T) {
	var items []string
	for i := range 250 {
		items = append(items, fmt.Sprintf(`{"id":"vm-%03d","verbose_name":"vm%d","memory_count":"4096","cpu_count":2,"node":{"id":"n1","verbose_name":"node1"},"guest_utils":{}}`, i, i))
	}
	items[7] = `{"id":"vm-007","verbose_name":"odd","memory_count":"n/a","cpu_count":2}`
	items[120] = `{"verbose_name":"nameless","memory_count":1}`
	items[201] = `["not","an","object"]`
	var told rejections
	c, err := veil.New(veil.Config{URL: pagedServer(t, items, nil), Token: "t", MaxRetries: -1, Rejected: told.add})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Domains(context.Background(), nil)
	if err != nil {
		t.Fatalf("the listing failed: %v", err)
	}
	if len(got) != 247 {
		t.Fatalf("%d VMs listed, want the 247 good ones", len(got))
	}
	for _, d := range got {
		if d.ID == "vm-007" || d.ID == "" || d.MemoryCount != 4096 {
			t.Fatalf("listed %+v", d)
		}
	}
	rs := told.list()
	slices.SortFunc(rs, func(a, b veil.Rejection) int { return len(a.Reason) - len(b.Reason) })
	want := []veil.Rejection{
		{Collection: "domains", ID: "vm-007", Field: "memory_count", Reason: veil.RejectType, Count: 1},
		{Collection: "domains", Reason: veil.RejectDecode, Count: 1},
		{Collection: "domains", Field: "id", Reason: veil.RejectMissingID, Count: 1},
	}
	if len(rs) != len(want) {
		t.Fatalf("told %+v, want %+v", rs, want)
	}
	for i := range rs {
		if rs[i].Err == nil {
			t.Errorf("rejection %+v says nothing", rs[i])
		}
		rs[i].Err = nil
	}
	slices.SortFunc(want, func(a, b veil.Rejection) int { return len(a.Reason) - len(b.Reason) })
	if !slices.Equal(rs, want) {
		t.Fatalf("told %+v, want %+v", rs, want)
	}
}

// TestAListingIsBoundedByItsFirstCount: a collection whose count grows with every page read
// (a controller in a loop, a hostile proxy) is listed up to 4 times its first count and a page,
// then the listing stops, and the objects beyond are told as over_limit.
func TestAListingIsBoundedByItsFirstCount(t *testing.T) {
	// Each id is unique per offset: the pages all differ.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		offset, _ := strconv.Atoi(r.URL.Query().Get("offset"))
		page := make([]json.RawMessage, 0, 100)
		for i := offset; i < offset+100; i++ {
			page = append(page, json.RawMessage(fmt.Sprintf(`{"id":"vm-%d"}`, i)))
		}
		b, _ := json.Marshal(map[string]any{"count": offset + 300, "results": page})
		w.Write(b)
	}))
	t.Cleanup(srv.Close)
	var told rejections
	c, err := veil.New(veil.Config{URL: srv.URL, Token: "t", MaxRetries: -1, Rejected: told.add})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Domains(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if limit := 4*300 + 100; len(got) != limit {
		t.Fatalf("%d VMs listed, want the limit %d", len(got), limit)
	}
	rs := told.list()
	if len(rs) != 1 || rs[0].Reason != veil.RejectOverLimit || rs[0].Collection != "domains" || rs[0].Count != 100 {
		t.Fatalf("told %+v, want one over_limit of the page past the limit", rs)
	}
}

// TestAGuestEntryCostsOnlyItself: a filesystem entry of guest-get-fsinfo whose size is not a
// number is skipped and told; the other filesystems are read.
func TestAGuestEntryCostsOnlyItself(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"guest-get-fsinfo":[{"name":"vda1","mountpoint":"/","type":"ext4","used-bytes":1,"total-bytes":2},` +
			`{"name":"vdb","mountpoint":"/data","type":"xfs","used-bytes":"lots","total-bytes":2},` +
			`{"name":"vdc","mountpoint":"/srv","type":"xfs","used-bytes":3,"total-bytes":4}]}`))
	}))
	t.Cleanup(srv.Close)
	var told rejections
	c, err := veil.New(veil.Config{URL: srv.URL, Token: "t", MaxRetries: -1, Rejected: told.add})
	if err != nil {
		t.Fatal(err)
	}
	fs, err := c.GuestFSInfo(context.Background(), "vm-1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 2 || fs[0].Name != "vda1" || fs[1].Name != "vdc" {
		t.Fatalf("read %+v, want vda1 and vdc", fs)
	}
	rs := told.list()
	if len(rs) != 1 || rs[0].Collection != "guest-get-fsinfo" || rs[0].ID != "vm-1" || rs[0].Field != "used-bytes" || rs[0].Reason != veil.RejectType {
		t.Fatalf("told %+v", rs)
	}
}

// TestADetailThatDoesNotDecodeIsTold: a disk's detail with a size that is not a number fails
// the read with a *veil.DecodeError, told as that disk rejected.
func TestADetailThatDoesNotDecodeIsTold(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"id":"disk-1","size":"n/a","target_bus":"virtio"}`))
	}))
	t.Cleanup(srv.Close)
	var told rejections
	c, err := veil.New(veil.Config{URL: srv.URL, Token: "t", MaxRetries: -1, Rejected: told.add})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Vdisk(context.Background(), "disk-1")
	var de *veil.DecodeError
	if !errors.As(err, &de) || de.Field != "size" {
		t.Fatalf("err = %v, want a DecodeError of size", err)
	}
	rs := told.list()
	if len(rs) != 1 || rs[0].Collection != "vdisks" || rs[0].ID != "disk-1" || rs[0].Field != "size" || rs[0].Reason != veil.RejectType {
		t.Fatalf("told %+v", rs)
	}
}
