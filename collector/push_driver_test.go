package collector

// The push benchmark's driver: this test binary run again as a process of its own, which makes
// the benchmark's VM changes through the simulator's control API, so that its HTTP client (its
// writes, its wake-ups, its garbage) is not counted in the exporter's CPU per change.

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
)

// driverEnv, set to the simulator's URL, makes this test binary the driver instead of running
// tests.
const driverEnv = "VEIL_BENCH_PUSH_DRIVER"

func TestMain(m *testing.M) {
	if url := os.Getenv(driverEnv); url != "" {
		os.Exit(runDriver(url, os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// plannedChange is a change the driver makes: the simulator's action on a VM.
type plannedChange struct{ id, action string }

// runDriverProcess runs the driver on plan at rate changes a second and calls sent, in order, with
// each change's index in plan and when its request was about to go; it returns when the driver
// has made them all.
func runDriverProcess(url string, rate int, plan []plannedChange, sent func(k int, at time.Time)) error {
	var in strings.Builder
	fmt.Fprintln(&in, rate)
	for _, c := range plan {
		fmt.Fprintln(&in, c.id, c.action)
	}
	cmd := exec.Command(os.Args[0])
	testutil.DieWithTest(cmd)
	cmd.Env = append(os.Environ(), driverEnv+"="+url)
	cmd.Stdin = strings.NewReader(in.String())
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	sc := bufio.NewScanner(out)
	var bad error
	for sc.Scan() {
		var k int
		var ns int64
		if _, err := fmt.Sscan(sc.Text(), &k, &ns); err != nil || k < 0 || k >= len(plan) {
			bad = fmt.Errorf("push driver: line %q", sc.Text())
			continue
		}
		sent(k, time.Unix(0, ns))
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("push driver: %w", err)
	}
	return bad
}

// runDriver reads the rate, then one "id action" line per change, from in; it makes each change
// at its time from when the plan was read, writing "index unix-nanoseconds" to out just before its
// request. It returns the process's exit code: 0 once every request was answered 200.
func runDriver(url string, in io.Reader, out, errs io.Writer) int {
	sc := bufio.NewScanner(in)
	var rate int
	var plan []plannedChange
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case rate == 0 && len(f) == 1:
			rate, _ = strconv.Atoi(f[0])
		case len(f) == 2:
			plan = append(plan, plannedChange{id: f[0], action: f[1]})
		}
	}
	if rate <= 0 {
		fmt.Fprintln(errs, "push driver: no rate")
		return 2
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	w := bufio.NewWriter(out)
	start := time.Now()
	for k, c := range plan {
		if wait := time.Until(start.Add(time.Duration(k) * time.Second / time.Duration(rate))); wait > 0 {
			time.Sleep(wait)
		}
		fmt.Fprintln(w, k, time.Now().UnixNano())
		if err := w.Flush(); err != nil {
			fmt.Fprintln(errs, "push driver:", err)
			return 1
		}
		resp, err := hc.Post(url+"/_sim/domains/"+c.id+"/"+c.action, "application/json", strings.NewReader("{}"))
		if err != nil {
			fmt.Fprintln(errs, "push driver:", err)
			return 1
		}
		// Read to its end, the body lets the connection serve the next change.
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			fmt.Fprintf(errs, "push driver: %s %s: %s\n", c.action, c.id, resp.Status)
			return 1
		}
	}
	return 0
}
