// Package docs holds the manual. Its tests keep it true: every relative link and anchor of the
// README and the manual points at something that exists, the README's minimal configuration is
// valid, and metrics.md is what the exporter serves (metrics_test.go).
package docs

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/veil-exporter/veil-exporter/config"
)

// manual lists the Markdown files whose links are checked: the READMEs and docs/**.
func manual(t *testing.T) []string {
	t.Helper()
	files := []string{"../README.md", "../deploy/README.md"}
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

var (
	fence      = regexp.MustCompile("(?ms)^ {0,3}```.*?^ {0,3}```[^\n]*$")
	codeSpan   = regexp.MustCompile("`[^`\n]*`")
	mdLink     = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	mdHeadings = regexp.MustCompile(`(?m)^#{1,6} (.+?)\s*#*$`)
)

// prose is the text of a Markdown file without code blocks and code spans, where a link is no
// link.
func prose(md string) string {
	return codeSpan.ReplaceAllString(fence.ReplaceAllString(md, ""), "")
}

// anchors are the ids GitHub gives the headings of md: lower case, punctuation dropped, spaces
// as hyphens, a repeated one suffixed -1, -2...
func anchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range mdHeadings.FindAllStringSubmatch(fence.ReplaceAllString(md, ""), -1) {
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteByte('-')
			}
		}
		id := b.String()
		if n := seen[id]; n > 0 {
			seen[id]++
			id += "-" + strconv.Itoa(n)
		} else {
			seen[id] = 1
		}
		out[id] = true
	}
	return out
}

// TestRelativeLinksResolve: every relative link of the README and the manual names a file or
// directory of the repository, and every anchor a heading of the file it points into.
func TestRelativeLinksResolve(t *testing.T) {
	for _, file := range manual(t) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(prose(string(b)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			dest := file
			if path != "" {
				dest = filepath.Join(filepath.Dir(file), path)
			}
			st, err := os.Stat(dest)
			if err != nil {
				t.Errorf("%s: link %s: %v", file, target, err)
				continue
			}
			if anchor == "" {
				continue
			}
			if st.IsDir() || !strings.HasSuffix(dest, ".md") {
				t.Errorf("%s: link %s: an anchor into something other than a Markdown file", file, target)
				continue
			}
			md, err := os.ReadFile(dest)
			if err != nil {
				t.Fatal(err)
			}
			if !anchors(string(md))[anchor] {
				t.Errorf("%s: link %s: %s has no heading #%s", file, target, dest, anchor)
			}
		}
	}
}

func TestAnchorsAreGitHubs(t *testing.T) {
	got := anchors("# Events on NATS\n## Bad input: what the controller sends on a bad day\n```\n# not a heading\n```\n## Guarantees, and their limits\n## Tests\n## Tests\n")
	for _, want := range []string{"events-on-nats", "bad-input-what-the-controller-sends-on-a-bad-day", "guarantees-and-their-limits", "tests", "tests-1"} {
		if !got[want] {
			t.Errorf("no anchor %s in %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Error("a line of a code block taken for a heading")
	}
}

// TestREADMEMinimalConfigIsValid: the README's first YAML block is a configuration that loads.
func TestREADMEMinimalConfigIsValid(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := bytes.Cut(b, []byte("```yaml\n"))
	block, _, ok2 := bytes.Cut(rest, []byte("```"))
	if !ok || !ok2 {
		t.Fatal("README.md has no yaml block")
	}
	const tokenPath = "/etc/veil-exporter/prod.token"
	if !bytes.Contains(block, []byte(tokenPath)) {
		t.Fatalf("the README's configuration does not read %s", tokenPath)
	}
	tok := filepath.Join(t.TempDir(), "prod.token")
	if err := os.WriteFile(tok, []byte("jwt test-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Parse(bytes.ReplaceAll(block, []byte(tokenPath), []byte(tok))); err != nil {
		t.Errorf("the README's configuration does not load: %v\n%s", err, block)
	}
}

var (
	familyCell  = regexp.MustCompile("`(veil_[a-z0-9_{},]+)`")
	braces      = regexp.MustCompile(`\{([a-z0-9_,]+)\}`)
	labelsAtEnd = regexp.MustCompile(`\{[a-z0-9_,]*\}$`)
)

// expand spells out a name written with alternatives, veil_x_{a,b}_total.
func expand(name string) []string {
	m := braces.FindStringSubmatchIndex(name)
	if m == nil {
		return []string{name}
	}
	var out []string
	for _, alt := range strings.Split(name[m[2]:m[3]], ",") {
		out = append(out, expand(name[:m[0]]+alt+name[m[1]:])...)
	}
	return out
}

// TestGuideMatchesGeneratedMetrics: the families the guide's tables name are the families
// metrics.md lists (what the exporter serves), and every served family is explained somewhere
// in the manual besides metrics.md.
func TestGuideMatchesGeneratedMetrics(t *testing.T) {
	ref, err := os.ReadFile("metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{}
	for _, m := range documentedFamily.FindAllStringSubmatch(string(ref), -1) {
		served[m[1]] = true
	}
	mentioned := map[string]bool{}
	for _, file := range manual(t) {
		if filepath.Base(file) == "metrics.md" {
			continue
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			for _, m := range familyCell.FindAllStringSubmatch(line, -1) {
				// A trailing {...} holds labels (veil_ha_leader{controller}), one inside the
				// name alternatives.
				family := labelsAtEnd.ReplaceAllString(m[1], "")
				for _, name := range expand(family) {
					mentioned[name] = true
					// A table's first column names families: each must be served.
					if strings.HasPrefix(line, "| `") && strings.Contains(strings.SplitN(line, "|", 3)[1], m[0]) && !served[name] {
						t.Errorf("%s: the table names %s, which metrics.md does not list (not served)", file, name)
					}
				}
			}
		}
	}
	for name := range served {
		if !mentioned[name] {
			t.Errorf("%s is served (metrics.md) but explained nowhere else in the manual", name)
		}
	}
}
