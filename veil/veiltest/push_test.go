package veiltest

// This file holds the tests of the push channel /ws/ and of the change log: frames carry the
// objects as the lists render them, only for subscribed resources, in the change log's order;
// a refused token, the push faults and a slow client; and the change log, replayed over the
// lists taken before, gives the lists after a minute of background activity.

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// pushMsg is a frame of the push channel, decoded.
type pushMsg struct {
	MsgType  string          `json:"msg_type"`
	Resource string          `json:"resource"`
	Event    string          `json:"event"`
	ID       string          `json:"id"`
	Object   json.RawMessage `json:"object"`
	Text     string          `json:"text"`
	raw      string
}

// pushClient is a real coder/websocket client whose reader keeps every frame in order.
type pushClient struct {
	t      *testing.T
	c      *websocket.Conn
	frames chan pushMsg
	ended  chan struct{}
	err    error // why the reader stopped, once ended is closed
}

func pushURL(s *Server, token string) string {
	return "ws" + strings.TrimPrefix(s.URL, "http") + "/ws/?token=" + url.QueryEscape(token)
}

func dialPush(t *testing.T, s *Server, token string) *pushClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, pushURL(s, token), nil)
	if err != nil {
		t.Fatalf("dial /ws/: %v", err)
	}
	c.SetReadLimit(1 << 20)
	p := &pushClient{t: t, c: c, frames: make(chan pushMsg, 100_000), ended: make(chan struct{})}
	go func() {
		defer close(p.ended)
		for {
			_, b, err := c.Read(context.Background())
			if err != nil {
				p.err = err
				return
			}
			m := pushMsg{raw: string(b)}
			if err := json.Unmarshal(b, &m); err != nil {
				m.MsgType = "not JSON"
			}
			p.frames <- m
		}
	}()
	t.Cleanup(func() {
		_ = c.CloseNow()
		<-p.ended
	})
	return p
}

// next is the next frame; the test fails if none comes within 10 s or the socket ended.
func (p *pushClient) next() pushMsg {
	p.t.Helper()
	select {
	case m := <-p.frames:
		return m
	case <-p.ended:
		select {
		case m := <-p.frames:
			return m
		default:
		}
		p.t.Fatalf("socket ended before the next frame: %v", p.err)
	case <-time.After(10 * time.Second):
		p.t.Fatal("no frame within 10 s")
	}
	return pushMsg{}
}

func (p *pushClient) send(msg string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
		p.t.Fatalf("write %q: %v", msg, err)
	}
}

// command sends "add <res>" or "delete <res>" and waits for its acknowledgement, after which
// every change is sent under the new subscriptions.
func (p *pushClient) command(msg string) {
	p.t.Helper()
	p.send(msg)
	if m := p.next(); m.MsgType != "control" || m.Text != msg {
		p.t.Fatalf("answer to %q: %s", msg, m.raw)
	}
}

// end waits until the server ends the socket and returns the reader's error; frames sent
// before are left in p.frames.
func (p *pushClient) end() error {
	p.t.Helper()
	select {
	case <-p.ended:
		return p.err
	case <-time.After(10 * time.Second):
		p.t.Fatal("the socket is still open after 10 s")
		return nil
	}
}

// data is the next frame, which must be a data frame.
func (p *pushClient) data() pushMsg {
	p.t.Helper()
	m := p.next()
	if m.MsgType != "data" {
		p.t.Fatalf("want a data frame, got %s", m.raw)
	}
	return m
}

// sameJSON compares two JSON texts as values.
func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%v: %s", err, a)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return reflect.DeepEqual(x, y)
}

// listItem is the item the list endpoint path renders for id, as JSON.
func listItem(t *testing.T, c *client, path, id string) []byte {
	t.Helper()
	for _, it := range all(t, c, path) {
		if it["id"] == id {
			b, _ := json.Marshal(it)
			return b
		}
	}
	t.Fatalf("%s has no item %s", path, id)
	return nil
}

func running(d DomainInfo) bool { return d.PowerState == powerOn && !d.Template }

func TestPushUpdatedFrameIsTheListItem(t *testing.T) {
	s, c := newSim(t, Options{VMs: 10, RunningFraction: 1})
	vm := pickVM(t, s, running)
	p := dialPush(t, s, s.Token)
	p.command("add /domains/")
	p.command("add /nodes/")

	if err := s.PowerOff(vm); err != nil {
		t.Fatal(err)
	}
	var dom, nod pushMsg
	for dom.ID == "" || nod.ID == "" {
		switch m := p.data(); m.Resource {
		case "/domains/":
			dom = m
		case "/nodes/":
			nod = m
		}
	}
	info, _ := s.Domain(vm)
	if dom.Event != ChangeUpdated || dom.ID != vm || nod.Event != ChangeUpdated || nod.ID != info.NodeID {
		t.Fatalf("frames %s and %s, want UPDATED of VM %s and of its node %s", dom.raw, nod.raw, vm, info.NodeID)
	}
	if got := listItem(t, c, "/api/domains/?ids="+vm, vm); !sameJSON(t, dom.Object, got) {
		t.Fatalf("frame object\n%s\nlist item\n%s", dom.Object, got)
	}
	if got := listItem(t, c, "/api/nodes/", nod.ID); !sameJSON(t, nod.Object, got) {
		t.Fatalf("frame object\n%s\nlist item\n%s", nod.Object, got)
	}
	var o struct {
		Power int `json:"user_power_state"`
	}
	if err := json.Unmarshal(dom.Object, &o); err != nil || o.Power != powerOff {
		t.Fatalf("object after power off: %s", dom.Object)
	}

	// A migration moves the VM: its frame names the new node, and both nodes change.
	to := s.NodeIDs()[0]
	if to == info.NodeID {
		to = s.NodeIDs()[1]
	}
	if err := s.MigrateVM(vm, to); err != nil {
		t.Fatal(err)
	}
	nodes := map[string]bool{}
	for dom.Object = nil; dom.Object == nil || len(nodes) < 2; {
		switch m := p.data(); m.Resource {
		case "/domains/":
			dom = m
		case "/nodes/":
			nodes[m.ID] = true
			if got := listItem(t, c, "/api/nodes/", m.ID); !sameJSON(t, m.Object, got) {
				t.Fatalf("node frame\n%s\nlist item\n%s", m.Object, got)
			}
		}
	}
	if !nodes[to] || !nodes[info.NodeID] || !strings.Contains(string(dom.Object), to) {
		t.Fatalf("migration frames: VM %s, nodes %v", dom.Object, nodes)
	}
}

func TestPushCreatedOnCloneDeletedOnRemove(t *testing.T) {
	s, c := newSim(t, Options{VMs: 10, Templates: 2, TaskDuration: 20 * time.Millisecond})
	tpl := pickVM(t, s, func(d DomainInfo) bool { return d.Template })
	p := dialPush(t, s, s.Token)
	p.command("add /domains/")
	p.command("add /tasks/")

	clone := c.json("POST", "/api/domains/"+tpl+"/clone/", map[string]any{"verbose_name": "pushed"}, 200)
	id := clone["id"].(string)
	// The clone appears (CREATED), becomes ACTIVE (UPDATED, unless both were rendered at once),
	// and its task is created and finished.
	var created, active bool
	var taskID string
	var taskDone pushMsg
	for !active || taskDone.ID == "" {
		m := p.data()
		switch {
		case m.Resource == "/domains/" && m.ID == id:
			if !created && m.Event != ChangeCreated || created && m.Event != ChangeUpdated {
				t.Fatalf("clone frame (CREATED first, then UPDATED): %s", m.raw)
			}
			created = true
			active = strings.Contains(string(m.Object), `"status":"ACTIVE"`)
			if active && !sameJSON(t, m.Object, listItem(t, c, "/api/domains/?ids="+id, id)) {
				t.Fatalf("clone frame %s is not its list item", m.Object)
			}
		case m.Resource == "/tasks/" && m.Event == ChangeCreated:
			taskID = m.ID
		case m.Resource == "/tasks/" && m.ID == taskID && strings.Contains(string(m.Object), `"status":"SUCCESS"`):
			taskDone = m
		}
	}
	if got := listItem(t, c, "/api/tasks/?limit=5", taskID); !sameJSON(t, taskDone.Object, got) {
		t.Fatalf("final task frame\n%s\nlist item\n%s", taskDone.Object, got)
	}

	c.json("POST", "/api/domains/"+id+"/remove/", nil, 200)
	for {
		m := p.data()
		if m.Resource != "/domains/" || m.ID != id {
			continue
		}
		if m.Event == ChangeDeleted {
			if !strings.Contains(string(m.Object), `"id":"`+id+`"`) {
				t.Fatalf("DELETED frame without the object: %s", m.raw)
			}
			break
		}
		if m.Event != ChangeUpdated || !strings.Contains(string(m.Object), `"status":"DELETING"`) {
			t.Fatalf("frame of the VM being removed: %s", m.raw)
		}
	}
}

func TestPushSendsOnlySubscribedResources(t *testing.T) {
	s, _ := newSim(t, Options{VMs: 10, RunningFraction: 1})
	vm := pickVM(t, s, running)
	p := dialPush(t, s, s.Token)
	p.command("add /domains/")
	q := dialPush(t, s, s.Token) // another client watches the nodes
	q.command("add /nodes/")

	// A node changes first (q gets it); only the VM's frame may come to p.
	node := s.NodeIDs()[0]
	if err := s.SetNodeStatus(node, "FAILED"); err != nil {
		t.Fatal(err)
	}
	if m := q.data(); m.Resource != "/nodes/" || m.ID != node {
		t.Fatalf("frame of the node watcher %s, want the node %s", m.raw, node)
	}
	if err := s.PowerOff(vm); err != nil {
		t.Fatal(err)
	}
	if m := p.data(); m.Resource != "/domains/" || m.ID != vm {
		t.Fatalf("first frame %s, want the VM %s", m.raw, vm)
	}

	// Unsubscribed from the VMs, subscribed to the nodes: powering on changes both, only the
	// node is sent.
	p.command("delete /domains/")
	p.command("add /nodes/")
	if err := s.PowerOn(vm); err != nil {
		t.Fatal(err)
	}
	info, _ := s.Domain(vm)
	if m := p.data(); m.Resource != "/nodes/" || m.ID != info.NodeID {
		t.Fatalf("first frame %s, want the node %s", m.raw, info.NodeID)
	}

	// Anything else is answered by a text_msg and changes nothing.
	for _, msg := range []string{"add /events/", "subscribe /domains/", "add"} {
		p.send(msg)
		if m := p.next(); m.MsgType != "text_msg" || !strings.Contains(m.Text, msg) {
			t.Fatalf("answer to %q: %s", msg, m.raw)
		}
	}
}

func TestPushRefusedTokenGetsTokenErrorThenClose(t *testing.T) {
	s, _ := newSim(t, Options{VMs: 3, ReadOnlyToken: "viewer-token"})
	for _, tok := range []string{"", "wrong", "jwt " + s.Token} {
		p := dialPush(t, s, tok)
		if m := p.next(); !strings.Contains(m.raw, "token error") || m.MsgType != "text_msg" {
			t.Fatalf("token %q: first frame %s", tok, m.raw)
		}
		if err := p.end(); websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
			t.Fatalf("token %q: socket ended with %v, want a close frame 1008", tok, err)
		}
	}
	// The read-only token may watch.
	p := dialPush(t, s, "viewer-token")
	p.command("add /domains/")
}

func TestPushAnswersPings(t *testing.T) {
	s, _ := newSim(t, Options{VMs: 3})
	p := dialPush(t, s, s.Token)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.c.Ping(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
}

func TestPushFaults(t *testing.T) {
	t.Run("refuse", func(t *testing.T) {
		s, _ := newSim(t, Options{VMs: 3})
		s.SetFaults(Fault{Kind: "ws_refuse", Count: 1})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, resp, err := websocket.Dial(ctx, pushURL(s, s.Token), nil)
		if err == nil || resp == nil || resp.StatusCode != http.StatusNotFound {
			t.Fatalf("refused upgrade: %v, %v", resp, err)
		}
		dialPush(t, s, s.Token).command("add /tasks/") // the fault fired once
	})
	t.Run("no_push_option", func(t *testing.T) {
		s, _ := newSim(t, Options{VMs: 3, NoPush: true})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, resp, err := websocket.Dial(ctx, pushURL(s, s.Token), nil)
		if err == nil || resp == nil || resp.StatusCode != http.StatusNotFound {
			t.Fatalf("upgrade without the channel: %v, %v", resp, err)
		}
	})
	t.Run("drop_now", func(t *testing.T) { pushDropNow(t) })
	t.Run("lose", func(t *testing.T) { pushLose(t) })
	t.Run("delay", func(t *testing.T) {
		s, _ := newSim(t, Options{VMs: 10, RunningFraction: 1})
		p := dialPush(t, s, s.Token)
		p.command("add /domains/")
		const delay = 300 * time.Millisecond
		s.SetFaults(Fault{Kind: "ws_delay", Latency: delay})
		vm := pickVM(t, s, running)
		start := time.Now()
		if err := s.PowerOff(vm); err != nil {
			t.Fatal(err)
		}
		if m := p.data(); m.ID != vm {
			t.Fatalf("frame %s", m.raw)
		}
		if took := time.Since(start); took < delay {
			t.Fatalf("frame after %v, want at least %v", took, delay)
		}
	})
	t.Run("drop_on_frame", func(t *testing.T) {
		s, _ := newSim(t, Options{VMs: 10, RunningFraction: 1})
		p := dialPush(t, s, s.Token)
		p.command("add /domains/")
		s.SetFaults(Fault{Kind: "ws_drop", Count: 1})
		if err := s.PowerOff(pickVM(t, s, running)); err != nil {
			t.Fatal(err)
		}
		if err := p.end(); websocket.CloseStatus(err) != -1 {
			t.Fatalf("socket ended with %v, want no close frame", err)
		}
		select {
		case m := <-p.frames:
			t.Fatalf("frame %s, want the socket dropped instead", m.raw)
		default:
		}
	})
}

// pushLose: ws_lose loses one change on the channel; the change log still has it.
func pushLose(t *testing.T) {
	s, c := newSim(t, Options{VMs: 10, RunningFraction: 1, ChangeLog: 100})
	p := dialPush(t, s, s.Token)
	p.command("add /domains/")
	c.json("POST", "/_sim/faults", []map[string]any{{"kind": "ws_lose", "path": "/domains/", "count": 1}}, 200)
	ids := s.DomainIDs()
	for _, id := range ids[len(ids)-2:] {
		if err := s.PowerOff(id); err != nil {
			t.Fatal(err)
		}
	}
	if m := p.data(); m.ID != ids[len(ids)-1] {
		t.Fatalf("first frame %s, want the second VM's (the first is lost)", m.raw)
	}
	lost := 0
	for _, ch := range s.Changes(0) {
		if ch.Resource == "/domains/" && ch.ID == ids[len(ids)-2] {
			lost++
		}
	}
	if lost != 1 {
		t.Fatalf("the change log holds the lost change %d times", lost)
	}
}

// pushDropNow: dropped sockets end without a close frame, by the method or the control API.
func pushDropNow(t *testing.T) {
	s, c := newSim(t, Options{VMs: 3})
	a, b := dialPush(t, s, s.Token), dialPush(t, s, s.Token)
	a.command("add /domains/")
	b.command("add /nodes/")
	if n := s.DropPushSockets(); n != 2 {
		t.Fatalf("dropped %d sockets, want 2", n)
	}
	for _, p := range []*pushClient{a, b} {
		if err := p.end(); err == nil || websocket.CloseStatus(err) != -1 {
			t.Fatalf("dropped socket ended with %v, want no close frame", err)
		}
	}
	d := dialPush(t, s, s.Token) // through the control API
	d.command("add /domains/")
	if v := c.json("POST", "/_sim/ws/drop", nil, 200); v["dropped"] != 1.0 {
		t.Fatalf("/_sim/ws/drop: %v", v)
	}
	if err := d.end(); websocket.CloseStatus(err) != -1 {
		t.Fatalf("dropped socket ended with %v", err)
	}
}

// TestPushDropsASlowClient holds a socket's writer (a long delay) so its queue of two fills:
// the simulator's changes go on, and the socket is dropped.
func TestPushDropsASlowClient(t *testing.T) {
	s := NewUnstarted(Options{VMs: 20, RunningFraction: 1})
	s.pushQueueLen = 2
	s.Start()
	t.Cleanup(s.Close)
	p := dialPush(t, s, s.Token)
	p.command("add /domains/")
	s.SetFaults(Fault{Kind: "ws_delay", Latency: time.Hour})
	n := 0
	for _, id := range s.DomainIDs() {
		if d, _ := s.Domain(id); running(d) && n < 6 {
			if err := s.PowerOff(id); err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	if err := p.end(); websocket.CloseStatus(err) != -1 {
		t.Fatalf("slow socket ended with %v, want dropped without a close frame", err)
	}
	if st := s.Summary(); st.PushSockets != 0 {
		t.Fatalf("%d sockets still open", st.PushSockets)
	}
	select {
	case m := <-p.frames:
		t.Fatalf("frame %s reached the held client", m.raw)
	default:
	}
}

// TestChangeLogReplaysToTheListsAndFramesFollowIt runs a simulated minute of background
// activity (every kind of change the model makes: power, migrations, clones and their removal,
// backups filling pools, guest agents, tasks) with a socket subscribed to everything. The lists
// taken before, with the logged changes applied, must be the lists after: a change the model
// made without recording it shows up there. The frames must be the log, in its order.
func TestChangeLogReplaysToTheListsAndFramesFollowIt(t *testing.T) {
	clock := &manualClock{now: time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)}
	s, c := newSim(t, Options{Seed: 7, VMs: 30, Templates: 2, Nodes: 4, Datapools: 3, EventRate: 10,
		InitialTasks: -1, ChangeLog: 1_000_000, Now: clock.Now})
	p := dialPush(t, s, s.Token)
	for _, res := range pushResources {
		p.command("add " + res)
	}
	lists := []string{"/api/domains/", "/api/nodes/", "/api/clusters/", "/api/data-pools/", "/api/tasks/"}
	store := map[string]map[string]string{} // resource → id → object
	for _, path := range lists {
		res := strings.TrimPrefix(path, "/api")
		store[res] = map[string]string{}
		for _, it := range all(t, c, path) {
			b, _ := json.Marshal(it)
			store[res][it["id"].(string)] = string(b)
		}
	}
	since := s.Summary().Changes

	for range 600 { // a minute, in steps rendered one by one (Summary sends the changes out)
		clock.add(100 * time.Millisecond)
		_ = s.Summary()
	}
	s.SetEventRate(0)
	clock.add(time.Hour) // every task ends
	_ = s.Summary()

	log := s.Changes(since)
	if len(log) < 300 {
		t.Fatalf("%d changes in a minute of activity", len(log))
	}
	kinds := map[string]bool{}
	for i, ch := range log {
		if ch.Seq != since+uint64(i)+1 {
			t.Fatalf("change %d has seq %d, want %d", i, ch.Seq, since+uint64(i)+1)
		}
		kinds[ch.Resource+" "+ch.Event] = true
		switch ch.Event {
		case ChangeDeleted:
			delete(store[ch.Resource], ch.ID)
		default:
			store[ch.Resource][ch.ID] = string(ch.Object)
		}
	}
	for _, k := range []string{"/domains/ CREATED", "/domains/ UPDATED", "/domains/ DELETED", "/nodes/ UPDATED",
		"/data-pools/ UPDATED", "/tasks/ CREATED", "/tasks/ UPDATED"} {
		if !kinds[k] {
			t.Errorf("no %s change among %v", k, kinds)
		}
	}
	for _, path := range lists {
		res := strings.TrimPrefix(path, "/api")
		now := all(t, c, path)
		if len(now) != len(store[res]) {
			t.Errorf("%s lists %d objects, the replayed log %d", path, len(now), len(store[res]))
		}
		for _, it := range now {
			b, _ := json.Marshal(it)
			if got, ok := store[res][it["id"].(string)]; !ok || !sameJSON(t, []byte(got), b) {
				t.Errorf("%s item\n%s\nreplayed\n%s", path, b, got)
			}
		}
	}

	for i, ch := range log {
		m := p.data()
		want := pushMsg{MsgType: "data", Resource: ch.Resource, Event: ch.Event, ID: ch.ID}
		got := m
		got.Object, got.raw = nil, ""
		if !reflect.DeepEqual(got, want) || !sameJSON(t, m.Object, ch.Object) {
			t.Fatalf("frame %d is %s, the change log has %+v", i, m.raw, ch)
		}
	}
}

func TestChangeLogOverHTTP(t *testing.T) {
	s, c := newSim(t, Options{VMs: 5, RunningFraction: 1, ChangeLog: 3})
	vms := s.DomainIDs()
	for _, id := range vms[len(vms)-3:] {
		if err := s.PowerOff(id); err != nil { // a VM and its node each: 6 changes, 3 kept
			t.Fatal(err)
		}
	}
	var log []Change
	st, b := c.do("GET", "/_sim/changes?since=4", nil)
	if err := json.Unmarshal(b, &log); st != 200 || err != nil {
		t.Fatalf("GET /_sim/changes: %d %s", st, b)
	}
	if len(log) != 2 || log[0].Seq != 5 || log[1].Seq != 6 || log[1].Resource != "/domains/" || log[1].ID != vms[len(vms)-1] {
		t.Fatalf("changes after 4: %+v", log)
	}
	if all := s.Changes(0); len(all) != 3 || all[0].Seq != 4 {
		t.Fatalf("the log keeps %d changes from %d, want the last 3", len(all), all[0].Seq)
	}
	off, _ := newSim(t, Options{VMs: 2})
	if st, _ := newClient(t, off).do("GET", "/_sim/changes", nil); st != http.StatusBadRequest {
		t.Fatalf("GET /_sim/changes without a change log: %d", st)
	}
	if got := off.Changes(0); len(got) != 0 {
		t.Fatalf("changes kept without a change log: %v", got)
	}
}
