package veil

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/google/uuid"
)

// DefaultTaskPoll is WaitTask's interval when none is given.
const DefaultTaskPoll = time.Second

// operation sends one state-changing request with ?async=1 and an idempotency key (UUIDv4)
// generated for this logical operation; the key is in the body of every retry, so the platform
// runs the operation at most once and a retry is safe.
func (c *Client) operation(ctx context.Context, method, tmpl, id string, body map[string]any) (*TaskEnvelope, error) {
	r, err := newRequest(method, tmpl, id)
	if err != nil {
		return nil, err
	}
	body["idempotency_key"] = uuid.NewString()
	if r.body, err = json.Marshal(body); err != nil {
		return nil, fmt.Errorf("veil: %s: encoding request: %w", r, err)
	}
	r.query = url.Values{"async": {"1"}}
	r.retry = true
	resp, _, err := c.do(ctx, r)
	if err != nil {
		return nil, err
	}
	env := new(TaskEnvelope)
	if err := decodeValue(resp, env); err != nil {
		return nil, fmt.Errorf("veil: decoding %s: %w", r, err)
	}
	return env, nil
}

// Operations. Each is sent with ?async=1 and answers with the task envelope at once; follow the
// task with WaitTask. When the platform recognises the idempotency key of a finished operation
// it may answer with the object itself: Task is then zero and Entity holds the object.

// StartDomain powers a domain on.
func (c *Client) StartDomain(ctx context.Context, id string, force bool) (*TaskEnvelope, error) {
	return c.operation(ctx, http.MethodPost, "/api/domains/{id}/start/", id, map[string]any{"force": force})
}

// ShutdownDomain powers a domain off (force: at once, without asking the guest).
func (c *Client) ShutdownDomain(ctx context.Context, id string, force bool) (*TaskEnvelope, error) {
	return c.operation(ctx, http.MethodPost, "/api/domains/{id}/shutdown/", id, map[string]any{"force": force})
}

// CloneDomain clones a template or domain; nodeID and datapoolID may be empty.
func (c *Client) CloneDomain(ctx context.Context, templateID, nodeID, verboseName, datapoolID string) (*TaskEnvelope, error) {
	body := map[string]any{"verbose_name": verboseName}
	if nodeID != "" {
		body["node"] = nodeID
	}
	if datapoolID != "" {
		body["datapool"] = datapoolID
	}
	return c.operation(ctx, http.MethodPost, "/api/domains/{id}/clone/", templateID, body)
}

// SetTemplate makes a domain a template or an ordinary domain.
func (c *Client) SetTemplate(ctx context.Context, id string, template bool) (*TaskEnvelope, error) {
	return c.operation(ctx, http.MethodPut, "/api/domains/{id}/template/", id, map[string]any{"template": template})
}

// RemoveDomain deletes a domain (full: with its disks).
func (c *Client) RemoveDomain(ctx context.Context, id string, full bool) (*TaskEnvelope, error) {
	return c.operation(ctx, http.MethodPost, "/api/domains/{id}/remove/", id, map[string]any{"full": full})
}

// BackupDomain starts a backup of a domain; datapoolID may be empty.
func (c *Client) BackupDomain(ctx context.Context, id, datapoolID string, compress bool, limitDays int) (*TaskEnvelope, error) {
	if id == "" {
		return nil, fmt.Errorf("veil: POST /api/domains/backup/: empty domain id")
	}
	body := map[string]any{"domain": id, "compress": compress, "limit_days": limitDays}
	if datapoolID != "" {
		body["datapool"] = datapoolID
	}
	return c.operation(ctx, http.MethodPost, "/api/domains/backup/", "", body)
}

// SSHInject puts an SSH key into a guest (user defaults to root).
func (c *Client) SSHInject(ctx context.Context, id string, createUser bool, user, key string) (*TaskEnvelope, error) {
	if user == "" {
		user = "root" // the platform's default when no user is given
	}
	return c.operation(ctx, http.MethodPost, "/api/domains/{id}/ssh-inject/", id,
		map[string]any{"create_user": createUser, "ssh_user": user, "ssh_key": key})
}

// SetBallooning turns memory ballooning of a node on or off.
func (c *Client) SetBallooning(ctx context.Context, nodeID string, on bool) (*TaskEnvelope, error) {
	return c.operation(ctx, http.MethodPut, "/api/nodes/{id}/ballooning/", nodeID, map[string]any{"ballooning": on})
}

// WaitTask polls a task until a final status (SUCCESS, FAILED, CANCELED, LOST, PARTIAL), calling
// progress (may be nil) after each poll.
func (c *Client) WaitTask(ctx context.Context, id string, every time.Duration, progress func(Task)) (*Task, error) {
	if every <= 0 {
		every = DefaultTaskPoll
	}
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("veil: waiting for task %s: %w", id, ctx.Err())
		case <-t.C:
		}
		task, err := c.Task(ctx, id)
		if err != nil {
			return nil, err
		}
		if progress != nil {
			progress(*task)
		}
		if task.Final() {
			return task, nil
		}
		t.Reset(every)
	}
}
