package veil

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Config.
const (
	DefaultTimeout          = 10 * time.Second
	DefaultMaxConcurrency   = 8
	DefaultMaxRetries       = 3
	DefaultRetryBaseDelay   = 200 * time.Millisecond
	DefaultMaxResponseBytes = 64 << 20
	DefaultUserAgent        = "veil-exporter"

	maxRetryDelay = 10 * time.Second
	maxErrorBody  = 1 << 20 // an error page needs no more to be understood
)

// Client talks to one platform controller. It is safe for concurrent use; its limits (rate,
// requests in flight) are shared by every caller.
type Client struct {
	base      string // scheme://host[/prefix], no trailing slash
	tokenFile string
	hc        *http.Client
	timeout   time.Duration
	retries   int
	backoff   time.Duration
	maxBytes  int64
	observer  Observer
	rejected  RejectFunc
	userAgent string
	pacer     *pacer        // nil: no rate limit
	slots     chan struct{} // requests in flight
	pageSlots int           // pages a List fetches ahead
	hints     pageHints     // the last count of each collection read whole
	served    atomic.Int64  // the Date of the last answer, Unix seconds (0: none yet)

	mu    sync.RWMutex
	token string // without the "jwt " prefix
}

// New returns a client; it fails on a bad URL or an unreadable token file.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(strings.TrimSpace(cfg.URL))
	if err != nil {
		return nil, fmt.Errorf("veil: bad URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("veil: bad URL %q: want http(s)://host", cfg.URL)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, errors.New("veil: bad URL: user info, query and fragment are not allowed")
	}
	c := &Client{
		base:      strings.TrimRight(u.Scheme+"://"+u.Host+u.EscapedPath(), "/"),
		tokenFile: cfg.TokenFile,
		timeout:   cfg.Timeout,
		retries:   cfg.MaxRetries,
		backoff:   cfg.RetryBaseDelay,
		maxBytes:  cfg.MaxResponseBytes,
		observer:  cfg.Observer,
		rejected:  cfg.Rejected,
		userAgent: cfg.UserAgent,
	}
	if c.timeout <= 0 {
		c.timeout = DefaultTimeout
	}
	switch {
	case c.retries < 0:
		c.retries = 0
	case c.retries == 0:
		c.retries = DefaultMaxRetries
	}
	if c.backoff <= 0 {
		c.backoff = DefaultRetryBaseDelay
	}
	if c.maxBytes <= 0 {
		c.maxBytes = DefaultMaxResponseBytes
	}
	if c.userAgent == "" {
		c.userAgent = DefaultUserAgent
	}
	conc := cfg.MaxConcurrency
	if conc <= 0 {
		conc = DefaultMaxConcurrency
	}
	c.slots = make(chan struct{}, conc)
	c.pageSlots = conc
	if cfg.MaxRequestsPerSecond > 0 {
		c.pacer = newPacer(cfg.MaxRequestsPerSecond)
	}
	if cfg.HTTPClient != nil {
		hc := *cfg.HTTPClient
		hc.Timeout = 0 // each attempt has its own deadline
		c.hc = &hc
	} else if c.hc, err = httpClient(cfg, conc); err != nil {
		return nil, err
	}
	if cfg.TokenFile != "" {
		if err := c.ReloadToken(); err != nil {
			return nil, err
		}
	} else {
		c.token = cleanToken(cfg.Token)
	}
	if c.token == "" {
		return nil, errors.New("veil: no token: set Token or TokenFile")
	}
	return c, nil
}

// httpClient is the HTTP client of cfg's controller: its TLS settings, and one idle connection
// kept alive per slot between pages.
func httpClient(cfg Config, conns int) (*http.Client, error) {
	tlsCfg := &tls.Config{InsecureSkipVerify: cfg.InsecureSkipVerify} //nolint:gosec // opt-in, for lab controllers
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("couldn't read ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ca_file %s holds no PEM certificate", cfg.CAFile)
		}
		tlsCfg.RootCAs = pool
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tlsCfg
	tr.MaxIdleConnsPerHost = conns
	return &http.Client{Transport: tr}, nil
}

// cleanToken trims whitespace and an optional "jwt " prefix (any case).
func cleanToken(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 4 && strings.EqualFold(s[:4], "jwt ") {
		s = strings.TrimSpace(s[4:])
	}
	return s
}

// ReloadToken re-reads TokenFile (a no-op without one); call it after an ErrUnauthorized.
func (c *Client) ReloadToken() error {
	if c.tokenFile == "" {
		return nil
	}
	b, err := os.ReadFile(c.tokenFile)
	if err != nil {
		// The path error names the file, never its content.
		return fmt.Errorf("veil: reading token file: %w", err)
	}
	tok := cleanToken(string(b))
	if tok == "" {
		return fmt.Errorf("veil: token file %s is empty", c.tokenFile)
	}
	c.mu.Lock()
	c.token = tok
	c.mu.Unlock()
	return nil
}

func (c *Client) currentToken() string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.token
}

// redact removes the token from text that came from elsewhere (a proxy may echo headers).
func (c *Client) redact(s string) string {
	if tok := c.currentToken(); len(tok) >= 4 {
		s = strings.ReplaceAll(s, tok, "[REDACTED]")
	}
	return s
}

// errRateWait: the context ends before the rate limit would let the request go.
var errRateWait = errors.New("the request rate limit leaves no time before the deadline")

// request is one logical call; do may send it several times.
type request struct {
	method   string
	endpoint string // path template, for the observer and error messages
	path     string // escaped path
	query    url.Values
	body     []byte
	retry    bool          // safe to send again (a GET)
	timeout  time.Duration // on the wire, per attempt; 0 = the client's
	slotted  func()        // if set, called once the first attempt holds a request slot
}

func (r *request) String() string { return r.method + " " + r.endpoint }

// do sends r with retries, limits and the token, and returns the body of a 2xx answer.
// An error answer is an *APIError; every error names the request.
func (c *Client) do(ctx context.Context, r *request) ([]byte, int, error) {
	reloaded := false
	for attempt := 0; ; attempt++ {
		rp, err := c.attempt(ctx, r)
		status, retryAfter := rp.status, rp.retryAfter
		if err == nil {
			return rp.body, status, nil
		}
		if ctx.Err() != nil {
			return nil, status, fmt.Errorf("veil: %s: %w", r, ctx.Err())
		}
		if errors.Is(err, errRateWait) {
			return nil, status, fmt.Errorf("veil: %s: %w", r, err)
		}
		// A 401 was not executed, so sending it again is safe for any method, once: token
		// files rotate, and the new token may be there already.
		if status == http.StatusUnauthorized && c.tokenFile != "" && !reloaded {
			reloaded = true
			old := c.currentToken()
			if c.ReloadToken() == nil && c.currentToken() != old {
				attempt--
				continue
			}
		}
		if !r.retry || attempt >= c.retries || !retryable(status, err) {
			return nil, status, fmt.Errorf("veil: %s: %w", r, err)
		}
		delay := c.backoff << attempt
		if delay > maxRetryDelay || delay <= 0 {
			delay = maxRetryDelay
		}
		delay = delay/2 + rand.N(delay/2+1) // jitter: spread clients that failed together
		if retryAfter > delay {
			delay = min(retryAfter, maxRetryDelay)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, status, fmt.Errorf("veil: %s: %w (last error: %v)", r, ctx.Err(), err)
		case <-t.C:
		}
	}
}

// retryable: 5xx, 418 (controller being updated), 429, and failures without an answer
// (connection errors, timeouts). ErrTooLarge is not retried: it would be too large again.
func retryable(status int, err error) bool {
	if errors.Is(err, ErrTooLarge) {
		return false
	}
	switch {
	case status == 0, status >= 500, status == http.StatusTeapot, status == http.StatusTooManyRequests:
		return true
	}
	return false
}

// reply is what one attempt got: the body of a 2xx answer, the status that arrived (0: none),
// and the Retry-After an error answer asked for.
type reply struct {
	body       []byte
	status     int
	retryAfter time.Duration
}

// attempt sends r once, within the client's limits.
func (c *Client) attempt(ctx context.Context, r *request) (reply, error) {
	select {
	case c.slots <- struct{}{}:
	case <-ctx.Done():
		return reply{}, ctx.Err()
	}
	defer func() { <-c.slots }()
	if r.slotted != nil {
		r.slotted()
		r.slotted = nil
	}
	// The rate limiter is consulted after taking a slot, so the send follows the permit at once
	// and the rate holds at the wire.
	if c.pacer != nil {
		if err := c.pacer.wait(ctx); err != nil {
			if ctx.Err() != nil {
				return reply{}, ctx.Err()
			}
			// The permit would come after ctx's deadline.
			return reply{}, fmt.Errorf("%w: %w", errRateWait, context.DeadlineExceeded)
		}
	}
	// The deadline starts now, after the waits for a slot and the rate: it times the request
	// on the wire, never the client's own queue.
	timeout := c.timeout
	if r.timeout > 0 {
		timeout = r.timeout
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	req, err := c.httpRequest(actx, r)
	if err != nil {
		return reply{}, err
	}

	start := time.Now()
	observed := 0 // the status that arrived, even when its body then broke off
	defer func() {
		if c.observer != nil {
			c.observer(r.endpoint, observed, time.Since(start))
		}
	}()
	resp, err := c.hc.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	observed = resp.StatusCode
	if d, err := http.ParseTime(resp.Header.Get("Date")); err == nil {
		c.served.Store(d.Unix())
	}
	return c.answer(resp)
}

// ServedAt is the controller's clock as the Date header of its last answer said (an answer of
// any status), truncated to the second as the header is: zero before the first answer, or when
// the controller sends no Date. The forwarder dates what may still appear in the journal by it.
func (c *Client) ServedAt() time.Time {
	if s := c.served.Load(); s != 0 {
		return time.Unix(s, 0)
	}
	return time.Time{}
}

// httpRequest is one attempt of r, with the token and the headers of every request.
func (c *Client) httpRequest(ctx context.Context, r *request) (*http.Request, error) {
	target := c.base + r.path
	if len(r.query) > 0 {
		target += "?" + r.query.Encode()
	}
	var rd io.Reader
	if r.body != nil {
		rd = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, target, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "jwt "+c.currentToken())
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	if r.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, nil
}

// answer reads the body of a 2xx answer within MaxResponseBytes, or makes an *APIError of
// another (with the Retry-After it asks for).
func (c *Client) answer(resp *http.Response) (reply, error) {
	status := resp.StatusCode
	ok := status >= 200 && status < 300
	limit := c.maxBytes
	if !ok && limit > maxErrorBody {
		limit = maxErrorBody
	}
	if ok && resp.ContentLength > limit {
		// Not read at all: it would be too large however it ended.
		return reply{status: status}, fmt.Errorf("%w: %d bytes announced, over %d", ErrTooLarge, resp.ContentLength, limit)
	}
	body, err := readBody(resp, limit)
	if err != nil {
		// The answer broke off: for retries it is as if none had come.
		return reply{}, fmt.Errorf("reading response (status %d): %w", status, err)
	}
	if ok && int64(len(body)) > limit {
		return reply{status: status}, fmt.Errorf("%w: over %d bytes", ErrTooLarge, limit)
	}
	if ok {
		return reply{body: body, status: status}, nil
	}
	rp := reply{status: status}
	if s, perr := strconv.Atoi(resp.Header.Get("Retry-After")); perr == nil && s > 0 {
		rp.retryAfter = time.Duration(s) * time.Second
	}
	ae := decodeAPIError(status, body)
	ae.Message, ae.Snippet = c.redact(ae.Message), c.redact(ae.Snippet)
	return rp, ae
}

// bodyPrealloc bounds the room reserved for an answer from its Content-Length: the length comes
// from the server, and an answer that announces 64 MiB and sends a few bytes (or many such
// answers at once) must cost what it sends, not what it announces.
const bodyPrealloc = 1 << 20

// bodies holds the buffers of pages a listing has decoded (releaseBody): a refresh of 10,000
// VMs reads some 12 MB of pages, and each buffer was allocated and cleared anew.
var bodies sync.Pool

// bodyRound rounds a new buffer's size up, so that a buffer handed back fits the pages of
// about its size that follow.
const bodyRound = 64 << 10

// newBody returns an empty buffer of at least size bytes: one handed back, or a new one.
func newBody(size int64) []byte {
	if p, ok := bodies.Get().(*[]byte); ok && int64(cap(*p)) >= size {
		return (*p)[:0]
	}
	if size > 4096 {
		size = min((size+bodyRound-1)/bodyRound*bodyRound, bodyPrealloc)
	}
	return make([]byte, 0, size)
}

// releaseBody hands back the buffer of an answer nothing refers to any more (every value
// decoded from it holds copies of its bytes).
func releaseBody(b []byte) {
	if cap(b) > 4096 && cap(b) <= bodyPrealloc {
		b = b[:0]
		bodies.Put(&b)
	}
}

// readBody reads at most limit+1 bytes of the answer into a buffer grown as the bytes arrive.
// The announced length only sizes the first buffer (up to bodyPrealloc): a page of VMs of 200 KB
// is read into one buffer without a copy, as when it was preallocated whole, where io.ReadAll
// would grow it from a small buffer, copying and clearing it on the way.
// One that sends more than it announced is cut at the announced length by the transport.
func readBody(resp *http.Response, limit int64) ([]byte, error) {
	n := resp.ContentLength
	size := int64(512)
	if n >= 0 {
		size = min(n+1, bodyPrealloc) // +1: the read that finds the end needs no room of its own
	}
	buf := newBody(size)
	r := io.LimitReader(resp.Body, limit+1)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)] // grow by append's own rule (doubling)
		}
		k, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+k]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}
