package veil

import (
	"encoding/json"
	"testing"
)

// TestResultsKeysCountsWhatEncodingJSONMatches: the top-level keys encoding/json would decode
// into "results" are counted (case, folding, escapes), nested ones and other keys are not.
func TestResultsKeysCountsWhatEncodingJSONMatches(t *testing.T) {
	for body, want := range map[string]int{
		`{"count":1,"results":[{"results":[1]}]}`:                   1,
		`{"count":1,"results":[],"results":[{"id":"a"}]}`:           2,
		` { "RESULTS" : [] , "next": "x\"results\"", "results":[]}`: 2,
		`{"\u0072esults":[],"reſults":[],"results_count":3}`:        2,
		`{"count":"results","items":{"results":[]}}`:                0,
		`[{"results":[]}]`: 0,
		`{"results":[1,2`:  1,
	} {
		if got := resultsKeys([]byte(body)); got != want {
			t.Errorf("%s: %d results keys, want %d", body, got, want)
		}
		var v struct {
			Results json.RawMessage `json:"results"`
		}
		if want > 0 && json.Valid([]byte(body)) && (json.Unmarshal([]byte(body), &v) != nil || v.Results == nil) {
			t.Errorf("%s: encoding/json finds no results where %d are counted", body, want)
		}
	}
}
