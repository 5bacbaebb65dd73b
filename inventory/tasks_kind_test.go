package inventory

import (
	"encoding/json"
	"regexp"
	"testing"

	"github.com/veil-exporter/veil-exporter/veil"
)

// kindNames is the inventory of the kind table: every object a task sentence may name.
var kindNames = map[string]string{
	"vm-win":    "win_test",
	"vm-win10":  "win 10",
	"vm-ru":     "Бухгалтерия-1",
	"vm-a":      "a",
	"vm-mach":   "machine",
	"vm-db":     "db-01",
	"vm-web":    "web",
	"vm-web01":  "web-01",
	"vm-regexp": "db (old)+[1]",
	"vm-tmpl":   "base-tmpl",
	"node-1":    "node-001",
	"node-2":    "node-002",
	"pool-1":    "pool-nfs",
	"cluster-1": "cluster-1",
}

// goneNames are objects the task names but the inventory no longer (or not yet) lists.
var goneNames = map[string]string{
	"vm-deleted":   "old vm 2",
	"vm-new":       "clone-07",
	"vm-ru-gone":   "Склад 3",
	"snap-1":       "snap-before-update",
	"vm-quoted":    "win 11 test",
	"vm-other-del": "legacy",
}

// kindCases are task names with their entities and the kind each must give ("": other), in
// the order a tracker learns them.
var kindCases = []struct {
	name     string
	entities string // the task's "entities" as the API sends them
	want     string // "" means other
}{
	{"Starting the virtual machine win_test.", `{"vm-win":"domain"}`, "Starting the virtual machine {domain}."},
	{"Shutting down the virtual machine WIN_TEST.", `{"vm-win":"domain"}`, "Shutting down the virtual machine {domain}."},
	{`Starting the virtual machine "win 10".`, `{"vm-win10":"domain"}`, `Starting the virtual machine "{domain}".`},
	{"Starting the virtual machine win 10.", `{"vm-win10":"domain"}`, "Starting the virtual machine {domain}."},
	{"Запуск виртуальной машины Бухгалтерия-1.", `{"vm-ru":"domain"}`, "Запуск виртуальной машины {domain}."},
	{"Запуск виртуальной машины «Бухгалтерия-1».", `{"vm-ru":"domain"}`, "Запуск виртуальной машины «{domain}»."},
	// A one-letter name is replaced only as a whole word, never inside "machine".
	{"Shutting down the virtual machine a.", `{"vm-a":"domain"}`, "Shutting down the virtual machine {domain}."},
	// A name that is also a word goes wherever it stands: the label must not carry it.
	{"Starting the virtual machine machine.", `{"vm-mach":"domain"}`, "Starting the virtual {domain} {domain}."},
	{"Creating a virtual machine web-01 from web.", `{"vm-web01":"domain","vm-web":"domain"}`, "Creating a virtual machine {domain} from {domain}."},
	{"Backup of the virtual machine db (old)+[1].", `{"vm-regexp":"domain"}`, "Backup of the virtual machine {domain}."},
	{"Migrating the virtual machine db-01 from node node-001 to node node-002.", `{"vm-db":"domain","node-1":"node","node-2":"node"}`,
		"Migrating the virtual machine {domain} from node {node} to node {node}."},
	{"Backup of the virtual machine db-01 to the data pool pool-nfs.", `{"vm-db":"domain","pool-1":"datapool"}`,
		"Backup of the virtual machine {domain} to the data pool {datapool}."},
	{"Changing ballooning of node node-002.", `{"node-2":"node"}`, "Changing ballooning of node {node}."},
	{"Updating the resources of cluster cluster-1.", `{"cluster-1":"cluster"}`, "Updating the resources of cluster {cluster}."},
	// The entities as a list, as events carry them.
	{"Starting the virtual machine db-01.", `[{"entity_uuid":"vm-db","entity_class":"domain"}]`, "Starting the virtual machine {domain}."},
	// A known entity the sentence does not name leaves it as it is.
	{"Creating the virtual machine db-01 from the template base-tmpl snapshot.", `{"vm-db":"domain","vm-tmpl":"domain","pool-1":"datapool"}`,
		"Creating the virtual machine {domain} from the template {domain} snapshot."},
	{"Backup of the virtual machine win_test.", `{"vm-win":"domain"}`, "Backup of the virtual machine {domain}."},
	// Entities the inventory does not know: a kind learnt above, quoted text, else other.
	{"Backup of the virtual machine old vm 2.", `{"vm-deleted":"domain"}`, "Backup of the virtual machine {domain}."},
	{`Deleting the virtual machine "win 11 test".`, `{"vm-quoted":"domain"}`, "Deleting the virtual machine {domain}."},
	{"Удаление виртуальной машины «Склад 3».", `{"vm-ru-gone":"domain"}`, "Удаление виртуальной машины {domain}."},
	{"Deleting the virtual machine legacy.", `{"vm-other-del":"domain"}`, "Deleting the virtual machine {domain}."},
	{"Suspending the virtual machine legacy.", `{"vm-other-del":"domain"}`, ""},
	{"Creating a virtual machine clone-07.", `{"vm-new":"domain"}`, ""},
	{"Creating the snapshot snap-before-update of the virtual machine db-01.", `{"snap-1":"snapshot","vm-db":"domain"}`, ""},
	{`Copying "x" for clone-07 and "snap-before-update".`, `{"vm-new":"domain","snap-1":"snapshot","vm-deleted":"domain"}`, ""},
	{"Updating the controller.", `{}`, "Updating the controller."},
	{"", `{"vm-db":"domain"}`, unknownKind},
}

// TestTaskKindsCarryNoEntityName: a table of task names as the real platform writes them
// (as the platform names them: "Starting the virtual machine win_test.", clone tasks "Creating a
// virtual…", thin clones ending in "snapshot.", Russian messages with Accept-Language: ru) with
// the entities the journal gives. Each yields its kind, and no kind contains an entity's name.
func TestTaskKindsCarryNoEntityName(t *testing.T) {
	tests := kindCases
	names := func(id string) (string, bool) { n, ok := kindNames[id]; return n, ok }
	tr, told := observedTracker(maxTaskKinds)
	for _, tt := range tests {
		kind, ok := taskKind(tt.name, parseEntities(json.RawMessage(tt.entities)), names, tr.templates)
		if !ok {
			kind = ""
		}
		if kind != tt.want {
			t.Errorf("kind of %q = %q, want %q", tt.name, kind, tt.want)
		}
		if ok && kind != unknownKind && kind != tt.name {
			// Learn the kind as the tracker does, for the rows that follow.
			tr.mu.Lock()
			tr.count(taskWith(tt.name, tt.entities), names)
			tr.mu.Unlock()
		}
		for _, e := range parseEntities(json.RawMessage(tt.entities)) {
			n, known := kindNames[e.id]
			if !known {
				n = goneNames[e.id]
			}
			if containsWord(kind, n) {
				t.Errorf("kind %q of %q contains the name %q of its entity %s", kind, tt.name, n, e.id)
			}
		}
	}
	// The tracker's labels: every row counted, none naming an entity (but the VMs named like
	// the words of the sentences, "a" and "machine", which every label has as words).
	if len(*told) == 0 {
		t.Fatal("nothing told")
	}
	for _, f := range *told {
		for _, m := range []map[string]string{kindNames, goneNames} {
			for _, n := range m {
				if n != "a" && n != "machine" && containsWord(f.Kind, n) {
					t.Errorf("label %q contains the name %q", f.Kind, n)
				}
			}
		}
	}
}

// observedTracker is a task tracker of at most maxKinds kinds whose observer keeps what it is
// told.
func observedTracker(maxKinds int) (*taskTracker, *[]FinishedTask) {
	var told []FinishedTask
	tr := newTaskTracker(maxKinds, 0)
	tr.observer = func(f FinishedTask) { told = append(told, f) }
	return tr, &told
}

func taskWith(name, entities string) *veil.Task {
	return &veil.Task{Name: name, Status: veil.TaskSuccess, Executed: 2, Entities: json.RawMessage(entities)}
}

// containsWord reports whether s contains name as a whole word, ignoring case.
func containsWord(s, name string) bool {
	return regexp.MustCompile(`(?i)(^|[^\p{L}\p{N}_])` + regexp.QuoteMeta(name) + `($|[^\p{L}\p{N}_])`).MatchString(s)
}

// TestTaskKindsAreCapped: past maxTaskKinds distinct kinds, tasks count as other.
func TestTaskKindsAreCapped(t *testing.T) {
	tr, told := observedTracker(3)
	none := func(string) (string, bool) { return "", false }
	tr.mu.Lock()
	for _, n := range []string{"A one.", "A two.", "A three.", "A four.", "A five.", "A one."} {
		tr.count(taskWith(n, `{}`), none)
	}
	tr.mu.Unlock()
	got := map[string]float64{}
	kinds := map[string]bool{}
	for _, f := range *told {
		got[f.Kind]++
		kinds[f.Kind] = true
	}
	want := map[string]float64{"A one.": 2, "A two.": 1, "A three.": 1, otherKind: 2}
	if len(got) != len(want) {
		t.Errorf("kinds %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("kind %q counted %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	if len(kinds) != 4 {
		t.Errorf("%d kinds told, want 4", len(kinds))
	}
}
