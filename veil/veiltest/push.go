package veiltest

// This file holds the controller's push channel, GET /ws/?token=<token>: a WebSocket on which a
// client subscribes to resources ("add /domains/", "delete /domains/") and receives a data frame
// for every change the simulator makes to an object of those resources (changes.go). A socket
// has a bounded queue of frames: a client too slow to empty it is dropped, so no client ever
// holds the simulator's mutations up.

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/coder/websocket"
)

// pushQueueLen bounds the frames waiting for one socket; past it the socket is dropped.
const pushQueueLen = 4096

// pushSocket is one client of the push channel; subs is guarded by Server.mu.
type pushSocket struct {
	subs   map[string]bool
	queue  chan pushFrame
	cancel context.CancelFunc // closes the connection without a close frame
}

// pushFrame is one text frame to send; resource is set on data frames only, which alone the
// push faults act on.
type pushFrame struct {
	resource string
	b        []byte
	queued   time.Time
}

func textMsg(msgType, text string) []byte {
	b, _ := json.Marshal(map[string]string{"msg_type": msgType, "text": text})
	return b
}

// serveWS upgrades GET /ws/ and serves the socket until it closes.
func (s *Server) serveWS(w http.ResponseWriter, r *http.Request) {
	if s.opts.NoPush || s.pushRefused() {
		writeError(w, errDetail(http.StatusNotFound, "50004", txt("URL is not found.", "URL не найден.")))
		return
	}
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return // Accept answered the request
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, ok := s.userOf(r.URL.Query().Get("token")); !ok {
		// As the controller: the upgrade succeeds, one frame says why, then the socket closes.
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
		_ = c.Write(wctx, websocket.MessageText, textMsg("text_msg", "token error"))
		wcancel()
		_ = c.Close(websocket.StatusPolicyViolation, "token error")
		return
	}
	sock := &pushSocket{subs: map[string]bool{}, queue: make(chan pushFrame, s.pushQueueLen), cancel: cancel}
	if !s.register(sock) {
		_ = c.CloseNow()
		return
	}
	defer s.pushWG.Done()
	written := make(chan struct{})
	go func() {
		defer close(written)
		defer cancel()
		s.writeFrames(ctx, c, sock)
	}()
	for {
		// Reading also answers the client's pings.
		typ, b, err := c.Read(ctx)
		if err != nil {
			break
		}
		if typ == websocket.MessageText {
			s.pushCommand(sock, string(b))
		}
	}
	cancel()
	<-written
	s.mu.Lock()
	s.forgetSocket(sock)
	s.mu.Unlock()
	_ = c.CloseNow()
}

// register adds a socket unless the server is closing; the caller then owes pushWG.Done.
func (s *Server) register(sock *pushSocket) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := &s.st.feed
	if f.closed {
		return false
	}
	f.sockets[sock] = true
	s.pushWG.Add(1)
	return true
}

// forgetSocket stops queueing frames for sock and closes its connection. Under s.mu.
func (s *Server) forgetSocket(sock *pushSocket) {
	f := &s.st.feed
	if !f.sockets[sock] {
		return
	}
	delete(f.sockets, sock)
	for res := range sock.subs {
		f.subs[res]--
	}
	sock.cancel()
}

// pushCommand runs a client's text frame: "add <resource>" subscribes, "delete <resource>"
// unsubscribes, each acknowledged by a control frame repeating it; anything else is answered
// by a text_msg and otherwise ignored.
func (s *Server) pushCommand(sock *pushSocket, msg string) {
	verb, res, _ := strings.Cut(strings.TrimSpace(msg), " ")
	res = strings.TrimSpace(res)
	s.mu.Lock()
	defer s.mu.Unlock()
	f := &s.st.feed
	if !f.sockets[sock] {
		return
	}
	// Changes made before the command go out under the subscriptions they were made under.
	s.flushChanges()
	if (verb != "add" && verb != "delete") || !slices.Contains(pushResources, res) {
		s.enqueue(sock, pushFrame{b: textMsg("text_msg", "unknown command: "+msg)})
		return
	}
	if on := verb == "add"; sock.subs[res] != on {
		if on {
			sock.subs[res] = true
			f.subs[res]++
		} else {
			delete(sock.subs, res)
			f.subs[res]--
		}
	}
	s.enqueue(sock, pushFrame{b: textMsg("control", verb+" "+res)})
}

// pushData queues the data frame of c on every socket subscribed to its resource. Under s.mu.
func (s *Server) pushData(c Change) {
	b, _ := json.Marshal(struct {
		MsgType  string          `json:"msg_type"`
		Resource string          `json:"resource"`
		Event    string          `json:"event"`
		ID       string          `json:"id"`
		Object   json.RawMessage `json:"object"`
	}{"data", c.Resource, c.Event, c.ID, c.Object})
	for sock := range s.st.feed.sockets {
		if sock.subs[c.Resource] {
			s.enqueue(sock, pushFrame{resource: c.Resource, b: b})
		}
	}
}

// enqueue queues a frame without waiting; a full queue drops the socket, as a controller drops a
// client that does not keep up. Under s.mu.
func (s *Server) enqueue(sock *pushSocket, fr pushFrame) {
	fr.queued = time.Now()
	select {
	case sock.queue <- fr:
	default:
		s.forgetSocket(sock)
	}
}

// writeFrames sends the socket's frames in order until ctx ends, applying the push faults.
func (s *Server) writeFrames(ctx context.Context, c *websocket.Conn, sock *pushSocket) {
	for {
		var fr pushFrame
		select {
		case <-ctx.Done():
			return
		case fr = <-sock.queue:
		}
		if fr.resource != "" {
			kind, delay := s.pickPush(fr.resource)
			switch kind {
			case kindPushLose:
				continue
			case kindPushDrop:
				return
			case kindPushDelay:
				if !sleepCtx(ctx, time.Until(fr.queued.Add(delay))) {
					return
				}
			}
		}
		if err := c.Write(ctx, websocket.MessageText, fr.b); err != nil {
			return
		}
	}
}

// DropPushSockets closes every open socket of the push channel at once, without a close frame,
// as a network failure or a restarting controller would; it returns how many it closed.
func (s *Server) DropPushSockets() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.st.feed.sockets)
	for sock := range s.st.feed.sockets {
		s.forgetSocket(sock)
	}
	return n
}

// closePush drops every socket, refuses new ones and waits for their goroutines.
func (s *Server) closePush() {
	s.mu.Lock()
	s.st.feed.closed = true
	s.mu.Unlock()
	s.DropPushSockets()
	s.pushWG.Wait()
}
