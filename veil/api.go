package veil

// The client's configuration, its errors and the reads of collections and details. Guest
// commands are in guest.go, paging in paging.go and pages.go.

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"time"
)

// Errors that callers test with errors.Is.
var (
	ErrUnauthorized = errors.New("unauthorized") // HTTP 401
	ErrForbidden    = errors.New("forbidden")    // HTTP 403
	ErrNotFound     = errors.New("not found")    // HTTP 404
	ErrTooLarge     = errors.New("response too large")
)

// Observer is told about every HTTP request the client made: the endpoint as a path template
// (e.g. "/api/domains/{id}/guest-command/"), the HTTP status (0 when no response arrived) and the
// duration.
type Observer func(endpoint string, code int, d time.Duration)

// Config configures a Client.
type Config struct {
	URL       string // base URL, e.g. https://veil.example.com
	Token     string // integration key, with or without the "jwt " prefix
	TokenFile string // read (and re-read by ReloadToken) instead of Token when set
	// HTTPClient, when set, is used as it is (its Timeout is ignored in favour of Timeout);
	// otherwise New builds one that checks the controller's certificate against CAFile (the
	// system's roots when empty), or not at all with InsecureSkipVerify (lab controllers).
	HTTPClient         *http.Client
	CAFile             string
	InsecureSkipVerify bool
	Timeout            time.Duration // one request (default 10s)
	// MaxConcurrency bounds requests in flight (default 8); MaxRequestsPerSecond bounds the rate
	// (0 = unlimited). Both are shared by every caller of this Client.
	MaxConcurrency       int
	MaxRequestsPerSecond float64
	MaxRetries           int           // for retryable failures (default 3; -1 = none)
	RetryBaseDelay       time.Duration // first backoff (default 200ms), doubled with jitter
	MaxResponseBytes     int64         // default 64 MiB
	Observer             Observer
	// Rejected is told about every object skipped because it did not decode or lay beyond a
	// bound (Rejection); nil: they are skipped untold.
	Rejected  RejectFunc
	UserAgent string
}

// APIError is an error answer of the platform ({"errors":[{code, msg_key, ...}]}) or a non-JSON error body.
type APIError struct {
	StatusCode int
	Code       string // "50004", "invalid", "required", ...
	MsgKey     string // detail, non_field_errors, or a field name
	Message    string
	Field      string // set when MsgKey names a form field
	Snippet    string // start of a non-JSON body (an HTML page of a proxy)
}

// Query is the per-request query of a collection read (filters, ordering).
type Query = url.Values

// Page is one page of a collection.
type Page[T any] struct {
	Count   int // total in the collection when the page was served
	Results []T
}

// Collections and details.
func (c *Client) Nodes(ctx context.Context) ([]Node, error) {
	return listAll[Node](ctx, c, "/api/nodes/", nil)
}
func (c *Client) Clusters(ctx context.Context) ([]Cluster, error) {
	return listAll[Cluster](ctx, c, "/api/clusters/", nil)
}
func (c *Client) Datapools(ctx context.Context) ([]Datapool, error) {
	return listAll[Datapool](ctx, c, "/api/data-pools/", nil)
}
func (c *Client) Domains(ctx context.Context, q Query) ([]Domain, error) {
	return listAll[Domain](ctx, c, "/api/domains/", q)
}
func (c *Client) Tasks(ctx context.Context, q Query) ([]Task, error) {
	return listAll[Task](ctx, c, "/api/tasks/", q)
}

// Vdisks lists the virtual disks (filters datapool, domain); VMachineInfs the VMs' network
// interfaces. A controller older than these collections answers 404.
func (c *Client) Vdisks(ctx context.Context, q Query) ([]Vdisk, error) {
	return listAll[Vdisk](ctx, c, "/api/vdisks/", q)
}
func (c *Client) VMachineInfs(ctx context.Context, q Query) ([]VMachineInf, error) {
	return listAll[VMachineInf](ctx, c, "/api/vmachine-infs/", q)
}
func (c *Client) Vdisk(ctx context.Context, id string) (*Vdisk, error) {
	return get[Vdisk](ctx, c, "/api/vdisks/{id}/", id)
}
func (c *Client) VMachineInf(ctx context.Context, id string) (*VMachineInf, error) {
	return get[VMachineInf](ctx, c, "/api/vmachine-infs/{id}/", id)
}
func (c *Client) Node(ctx context.Context, id string) (*Node, error) {
	return get[Node](ctx, c, "/api/nodes/{id}/", id)
}
func (c *Client) Cluster(ctx context.Context, id string) (*Cluster, error) {
	return get[Cluster](ctx, c, "/api/clusters/{id}/", id)
}
func (c *Client) Datapool(ctx context.Context, id string) (*Datapool, error) {
	return get[Datapool](ctx, c, "/api/data-pools/{id}/", id)
}
func (c *Client) Domain(ctx context.Context, id string) (*Domain, error) {
	return get[Domain](ctx, c, "/api/domains/{id}/", id)
}
func (c *Client) Task(ctx context.Context, id string) (*Task, error) {
	return get[Task](ctx, c, "/api/tasks/{id}/", id)
}
func (c *Client) Event(ctx context.Context, id string) (*Event, error) {
	return get[Event](ctx, c, "/api/events/{id}/", id)
}

// ControllerVersion reads the platform version of the controller (GET
// /api/controllers/base-version/, as SpaceVM's own utilities read it). A controller older than
// the endpoint answers 404: errors.Is(err, ErrNotFound).
func (c *Client) ControllerVersion(ctx context.Context) (string, error) {
	v, err := get[struct {
		Version string `json:"version"`
	}](ctx, c, "/api/controllers/base-version/", "")
	if err != nil {
		return "", err
	}
	if v.Version == "" {
		return "", errors.New("veil: GET /api/controllers/base-version/: no version in the answer")
	}
	return v.Version, nil
}

// EventsPage reads one page of the journal; ordering is "", "created" or "-created".
// Every Event has Raw set to the bytes the API returned for it.
func (c *Client) EventsPage(ctx context.Context, offset, limit int, ordering string) (Page[Event], error) {
	q := Query{}
	if ordering != "" {
		q.Set("ordering", ordering)
	}
	return ListPage[Event](ctx, c, PageRequest{Path: "/api/events/", Offset: offset, Limit: limit, Query: q})
}
