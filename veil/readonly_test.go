package veil

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The exporter only reads: the client has no call that changes the platform's state. Tests that
// need one (start a VM, run a backup) use internal/testutil/veilops.

// clientReads are the exported methods of *Client; each reads (or, ReloadToken, Reject and
// ServedAt, acts on the client alone). A new method goes here only if it changes nothing on the platform.
var clientReads = []string{
	"AvailableGuestCommands", "Cluster", "Clusters", "ControllerVersion", "Datapool", "Datapools",
	"DialPush", "Domain", "Domains", "Event", "EventsPage", "GuestCPUStats", "GuestCommand",
	"GuestDiskStats", "GuestFSInfo", "GuestInfo", "GuestLoad", "GuestNetworkInterfaces",
	"GuestOSInfo", "GuestPing", "GuestTime", "Node", "Nodes", "Reject", "ReloadToken", "ServedAt",
	"Task", "Tasks", "VMachineInf", "VMachineInfs", "Vdisk", "Vdisks",
}

// stateVerbs begin the names of calls that change state.
var stateVerbs = []string{"Start", "Stop", "Shutdown", "Reboot", "Reset", "Create", "Delete",
	"Remove", "Clone", "Set", "Update", "Put", "Post", "Patch", "Backup", "Restore", "Migrate",
	"Inject", "SSH", "Wait", "Power", "Suspend", "Resume", "Attach", "Detach", "Add", "Exec", "Kill"}

func TestClientHasOnlyReads(t *testing.T) {
	ty := reflect.TypeOf(&Client{})
	for i := range ty.NumMethod() {
		name := ty.Method(i).Name
		for _, v := range stateVerbs {
			if strings.HasPrefix(name, v) {
				t.Errorf("Client.%s: the exporter's client changes no state (%q); operations belong to internal/testutil/veilops", name, v)
			}
		}
		if !slices.Contains(clientReads, name) {
			t.Errorf("Client.%s is not in clientReads: add it only if it changes nothing on the platform", name)
		}
	}
}

// TestClientSendsOnlyGETsAndGuestCommands reads the package's sources: every HTTP method named
// is GET, except the one POST of guestCommand (the guest agent's commands, which ask and change
// nothing; the guest checker's allowlist keeps to read-only ones).
func TestClientSendsOnlyGETsAndGuestCommands(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	posts := 0
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, file, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, _ := d.(*ast.FuncDecl)
			ast.Inspect(d, func(n ast.Node) bool {
				var method string
				switch x := n.(type) {
				case *ast.SelectorExpr:
					if id, ok := x.X.(*ast.Ident); ok && id.Name == "http" && strings.HasPrefix(x.Sel.Name, "Method") {
						method = strings.ToUpper(strings.TrimPrefix(x.Sel.Name, "Method"))
					}
				case *ast.BasicLit:
					if s := strings.Trim(x.Value, "\"`"); slices.Contains([]string{"POST", "PUT", "PATCH", "DELETE"}, s) {
						method = s
					}
				}
				switch {
				case method == "" || method == "GET":
				case method == "POST" && fn != nil && fn.Name.Name == "guestCommand":
					posts++
				default:
					t.Errorf("%s: %s request: the client sends only GETs and guest commands", fset.Position(n.Pos()), method)
				}
				return true
			})
		}
	}
	if posts != 1 {
		t.Errorf("%d POSTs in guestCommand, want 1", posts)
	}
}

func TestGuestCommandsThatChangeTheGuestAreRefusedUnsent(t *testing.T) {
	var sent atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sent.Add(1)
		_, _ = w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	c, err := New(Config{URL: srv.URL, Token: "t0ken"})
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"guest-exec", "guest-file-open", "guest-set-user-password", "guest-shutdown",
		"guest-suspend-disk", "guest-fsfreeze-freeze", "guest-set-time", "guest-network-set-interfaces", "ping"} {
		if _, err := c.GuestCommand(context.Background(), "vm-1", cmd, nil, time.Second); err == nil || !strings.Contains(err.Error(), "not a read-only guest command") {
			t.Errorf("GuestCommand(%s) = %v, want refused", cmd, err)
		}
	}
	for _, cmd := range []string{"guest-ping", "guest-info", "guest-get-osinfo", "guest-get-fsinfo", "guest-network-get-interfaces"} {
		if !readOnlyGuestCommand(cmd) {
			t.Errorf("read-only %s refused", cmd)
		}
	}
	if n := sent.Load(); n != 0 {
		t.Errorf("%d requests sent for refused commands", n)
	}
}
