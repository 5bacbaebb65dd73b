package veiltest

// Conformance of languages through raw HTTP: Accept-Language ru gives
// Russian event messages, task names and error texts; en, the default and any other language
// give English. The vendor's Python client sends ru by default for events.

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

var cyrillic = regexp.MustCompile(`\p{Cyrillic}`)

// getLang does a request with an Accept-Language header and returns status and body.
func getLang(t *testing.T, s *Server, method, path, lang, token string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, s.URL+path, strings.NewReader("{}"))
	if token != "" {
		req.Header.Set("Authorization", "jwt "+token)
	}
	if lang != "" {
		req.Header.Set("Accept-Language", lang)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func TestAcceptLanguageSelectsTexts(t *testing.T) {
	s, c := newSim(t, Options{VMs: 10, Templates: -1, InitialEvents: 30, TaskDuration: 10 * time.Millisecond, RunningFraction: 1})
	vm := s.DomainIDs()[0]
	vmName := c.json("GET", "/api/domains/"+vm+"/", nil, 200)["verbose_name"].(string)
	env := c.json("POST", "/api/domains/"+vm+"/shutdown/?async=1", nil, 202)
	taskID := env["_task"].(map[string]any)["id"].(string)
	waitTask(t, c, taskID)
	if err := s.SetNodeStatus(s.NodeIDs()[0], "SERVICE"); err != nil {
		t.Fatal(err)
	}

	events := func(lang string) []map[string]any {
		st, b := getLang(t, s, "GET", "/api/events/?limit=100", lang, s.Token)
		var v map[string]any
		if st != 200 || json.Unmarshal(b, &v) != nil {
			t.Fatalf("%d %s", st, b)
		}
		return results(t, v)
	}
	en := events("")
	for _, tc := range []struct {
		header string
		ru     bool
	}{
		{"", false}, {"en", false}, {"ru", true}, {"ru-RU,ru;q=0.9,en;q=0.8", true},
		{"en;q=0.5, ru;q=0.9", true}, {"ru;q=0.3, en", false}, {"de", false}, {"de, ru;q=0.1", true},
	} {
		t.Run("events with Accept-Language "+tc.header, func(t *testing.T) {
			got := events(tc.header)
			if len(got) != len(en) {
				t.Fatalf("%d events, %d in English", len(got), len(en))
			}
			for i, e := range got {
				if e["id"] != en[i]["id"] || e["created"] != en[i]["created"] {
					t.Fatalf("language changed the journal: %v vs %v", e, en[i])
				}
				if cyrillic.MatchString(e["message"].(string)) != tc.ru {
					t.Fatalf("message %q (want Russian: %v)", e["message"], tc.ru)
				}
			}
		})
	}

	t.Run("task names and task events in Russian", func(t *testing.T) { russianTask(t, s, taskID, vmName) })

	for _, tc := range []langError{
		{"not found", "GET", "/api/domains/00000000-0000-4000-8000-000000000000/", s.Token, "Виртуальная машина не найдена.", 404},
		{"unknown URL", "GET", "/api/nothing/", s.Token, "URL не найден.", 404},
		{"no token", "GET", "/api/nodes/", "", "Учетные данные не были предоставлены.", 401},
		{"required field", "POST", "/api/domains/" + vm + "/ssh-inject/", s.Token, "Обязательное поле.", 400},
		{"rule", "POST", "/api/domains/" + vm + "/guest-command/", s.Token, "Гостевой агент", 400},
	} {
		t.Run("error "+tc.name, func(t *testing.T) { checkRussianError(t, s, vm, tc) })
	}

	t.Run("an injected fault in Russian", func(t *testing.T) {
		s.SetFaults(Fault{Kind: "status", Status: 503, Count: 1})
		st, b := getLang(t, s, "GET", "/api/nodes/", "ru", s.Token)
		if st != 503 || errorOf(t, b)["detail"] != "Сервис временно недоступен." {
			t.Fatalf("%d %s", st, b)
		}
	})
}

// russianTask: a task's name and its events in Russian.
func russianTask(t *testing.T, s *Server, taskID, vmName string) {
	st, b := getLang(t, s, "GET", "/api/tasks/"+taskID+"/", "ru", s.Token)
	var tk map[string]any
	if st != 200 || json.Unmarshal(b, &tk) != nil {
		t.Fatalf("%d %s", st, b)
	}
	want := "Выключение виртуальной машины " + vmName + "."
	if tk["name"] != want || tk["verbose_name"] != "Задача" {
		t.Fatalf("task name %q verbose_name %q, want %q", tk["name"], tk["verbose_name"], want)
	}
	evs := tk["events"].([]any)
	if m := evs[0].(map[string]any)["message"]; m != "Задача создана:  "+want {
		t.Fatalf("created event %q", m)
	}
	st, b = getLang(t, s, "GET", "/api/events/"+evs[1].(map[string]any)["id"].(string)+"/", "ru", s.Token)
	if st != 200 || !strings.Contains(string(b), "Задача успешно завершена:  "+want) {
		t.Fatalf("finished event in Russian: %d %s", st, b)
	}
}

// langError is a request that fails, with the Russian text its error must hold.
type langError struct {
	name, method, path, token, want string
	status                          int
}

// checkRussianError: the error of tc's request asked in Russian says tc.want, and the same
// request in English has the same code and no Cyrillic.
func checkRussianError(t *testing.T, s *Server, vm string, tc langError) {
	if tc.name == "rule" {
		_ = s.SetGuestAgent(vm, false)
		_ = s.PowerOn(vm)
	}
	body := "{}"
	if tc.name == "rule" {
		body = `{"qemu_cmd":"guest-ping"}`
	}
	req, _ := http.NewRequest(tc.method, s.URL+tc.path, strings.NewReader(body))
	if tc.token != "" {
		req.Header.Set("Authorization", "jwt "+tc.token)
	}
	req.Header.Set("Accept-Language", "ru")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != tc.status {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	e := errorOf(t, b)
	if msg := e[e["msg_key"].(string)].(string); !strings.Contains(msg, tc.want) {
		t.Fatalf("message %q, want %q", msg, tc.want)
	}
	// The same request in English.
	req2, _ := http.NewRequest(tc.method, s.URL+tc.path, strings.NewReader(body))
	if tc.token != "" {
		req2.Header.Set("Authorization", "jwt "+tc.token)
	}
	resp2, err := http.DefaultClient.Do(req2)
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := io.ReadAll(resp2.Body)
	resp2.Body.Close()
	e2 := errorOf(t, b2)
	if msg := e2[e2["msg_key"].(string)].(string); cyrillic.MatchString(msg) || e2["code"] != e["code"] {
		t.Fatalf("English error %q code %v, Russian code %v", msg, e2["code"], e["code"])
	}
}
