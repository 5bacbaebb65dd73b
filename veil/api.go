package veil

// This file is the exported surface of the client that the collector, the guest checker and
// the forwarder are written against; the implementation lives in the other files.

import (
	"context"
	"errors"
	"iter"
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
	// HTTPClient carries TLS settings; its Timeout is ignored in favour of Timeout.
	HTTPClient *http.Client
	Timeout    time.Duration // one request (default 10s)
	// MaxConcurrency bounds requests in flight (default 8); MaxRequestsPerSecond bounds the rate
	// (0 = unlimited). Both are shared by every caller of this Client.
	MaxConcurrency       int
	MaxRequestsPerSecond float64
	MaxRetries           int           // for retryable failures (default 3; -1 = none)
	RetryBaseDelay       time.Duration // first backoff (default 200ms), doubled with jitter
	MaxResponseBytes     int64         // default 64 MiB
	Observer             Observer
	UserAgent            string
}

// APIError is an error answer of the platform (spec §7) or a non-JSON error body.
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

// GuestErrorReason classifies an error from a guest command for metrics: "timeout", "agent_not_running",
// "not_supported", "api_error" ("" for nil). A deadline (the client's or the caller's) or an API
// message saying timeout is "timeout"; a message about the agent not running or not connected is
// "agent_not_running"; an unknown or unsupported command is "not_supported".
func GuestErrorReason(err error) string { return guestErrorReason(err) }

// New returns a client; it fails on a bad URL or an unreadable token file.
func New(cfg Config) (*Client, error) { return newClient(cfg) }

// ReloadToken re-reads TokenFile (a no-op without one); call it after an ErrUnauthorized.
func (c *Client) ReloadToken() error { return c.reloadToken() }

// List iterates over every object of a collection path (e.g. "/api/domains/") in the list's order,
// paging by at most 100 and fetching the pages after the first concurrently within the client's
// limits. It yields a non-nil error at most once, as its last element.
func List[T any](ctx context.Context, c *Client, path string, q Query) iter.Seq2[T, error] {
	return list[T](ctx, c, path, q)
}

// ListPage reads one page of a collection: offset, limit (capped at 100) and query.
func ListPage[T any](ctx context.Context, c *Client, path string, offset, limit int, q Query) (Page[T], error) {
	return listPage[T](ctx, c, path, offset, limit, q)
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

// EventsPage reads one page of the journal; ordering is "", "created" or "-created".
// Every Event has Raw set to the bytes the API returned for it.
func (c *Client) EventsPage(ctx context.Context, offset, limit int, ordering string) (Page[Event], error) {
	q := Query{}
	if ordering != "" {
		q.Set("ordering", ordering)
	}
	return ListPage[Event](ctx, c, "/api/events/", offset, limit, q)
}

// Operations. Each is sent with ?async=1 and answers with the task envelope at once; follow the
// task with WaitTask. Each call generates one idempotency key (UUIDv4) and reuses it on its
// retries, so a retry never starts a second operation. When the platform recognises the key
// of a finished operation it may answer with the object itself: Task is then zero and Entity
// holds the object.
func (c *Client) StartDomain(ctx context.Context, id string, force bool) (*TaskEnvelope, error) {
	return c.startDomain(ctx, id, force)
}
func (c *Client) ShutdownDomain(ctx context.Context, id string, force bool) (*TaskEnvelope, error) {
	return c.shutdownDomain(ctx, id, force)
}
func (c *Client) CloneDomain(ctx context.Context, templateID, nodeID, verboseName, datapoolID string) (*TaskEnvelope, error) {
	return c.cloneDomain(ctx, templateID, nodeID, verboseName, datapoolID)
}
func (c *Client) SetTemplate(ctx context.Context, id string, template bool) (*TaskEnvelope, error) {
	return c.setTemplate(ctx, id, template)
}
func (c *Client) RemoveDomain(ctx context.Context, id string, full bool) (*TaskEnvelope, error) {
	return c.removeDomain(ctx, id, full)
}
func (c *Client) BackupDomain(ctx context.Context, id, datapoolID string, compress bool, limitDays int) (*TaskEnvelope, error) {
	return c.backupDomain(ctx, id, datapoolID, compress, limitDays)
}
func (c *Client) SSHInject(ctx context.Context, id string, createUser bool, user, key string) (*TaskEnvelope, error) {
	return c.sshInject(ctx, id, createUser, user, key)
}
func (c *Client) SetBallooning(ctx context.Context, nodeID string, on bool) (*TaskEnvelope, error) {
	return c.setBallooning(ctx, nodeID, on)
}

// WaitTask polls a task until a final status (SUCCESS, FAILED, CANCELED, LOST, PARTIAL), calling
// progress (may be nil) after each poll.
func (c *Client) WaitTask(ctx context.Context, id string, every time.Duration, progress func(Task)) (*Task, error) {
	return c.waitTask(ctx, id, every, progress)
}

// Guest commands. GuestCommand returns the raw result under the command's key.
func (c *Client) AvailableGuestCommands(ctx context.Context, id string) ([]string, error) {
	return c.availableGuestCommands(ctx, id)
}
func (c *Client) GuestCommand(ctx context.Context, id, cmd string, fargs any, timeout time.Duration) ([]byte, error) {
	return c.guestCommand(ctx, id, cmd, fargs, timeout)
}
func (c *Client) GuestPing(ctx context.Context, id string, timeout time.Duration) error {
	return c.guestPing(ctx, id, timeout)
}
func (c *Client) GuestOSInfo(ctx context.Context, id string, timeout time.Duration) (*GuestOSInfo, error) {
	return c.guestOSInfo(ctx, id, timeout)
}
func (c *Client) GuestFSInfo(ctx context.Context, id string, timeout time.Duration) ([]GuestFilesystem, error) {
	return c.guestFSInfo(ctx, id, timeout)
}

// GuestTime returns the guest's clock (guest-get-time).
func (c *Client) GuestTime(ctx context.Context, id string, timeout time.Duration) (time.Time, error) {
	return c.guestTime(ctx, id, timeout)
}
func (c *Client) GuestInfo(ctx context.Context, id string, timeout time.Duration) (*GuestInfo, error) {
	return c.guestInfo(ctx, id, timeout)
}
