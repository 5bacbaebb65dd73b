// Package veilops sends the platform's state-changing operations (start, shutdown, clone,
// template, remove, backup, SSH key injection, ballooning) and waits for their tasks. It is for
// tests that drive the simulator (veil/veiltest) or a lab controller as an operator would: the
// exporter only reads, so its veil.Client has no such calls.
//
// Each operation is sent with ?async=1 and an idempotency key (a UUIDv4 generated for the
// operation and sent again with every retry), and answers with the task envelope at once; follow
// the task with WaitTask, which polls it through a veil.Client.
package veilops

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/veil-exporter/veil-exporter/veil"
)

// DefaultTaskPoll is WaitTask's interval when none is given.
const DefaultTaskPoll = time.Second

// retries of an operation on a 5xx, 418, 429 or a failure without an answer; safe because the
// idempotency key makes the platform run the operation at most once.
const (
	retries   = 3
	backoff   = 20 * time.Millisecond
	errorBody = 300 // bytes of an error answer kept in the error
)

// Operator sends operations to one controller.
type Operator struct {
	base  string
	token string
	hc    *http.Client
	reads *veil.Client
}

// New returns an operator of the controller at url (the simulator's URL) with token (with or
// without the "jwt " prefix).
func New(url, token string) (*Operator, error) {
	reads, err := veil.New(veil.Config{URL: url, Token: token, RetryBaseDelay: time.Millisecond})
	if err != nil {
		return nil, err
	}
	token = strings.TrimSpace(token)
	if len(token) > 4 && strings.EqualFold(token[:4], "jwt ") {
		token = strings.TrimSpace(token[4:])
	}
	return &Operator{base: strings.TrimRight(url, "/"), token: token, hc: &http.Client{Timeout: 30 * time.Second}, reads: reads}, nil
}

// StartDomain powers a domain on.
func (o *Operator) StartDomain(ctx context.Context, id string, force bool) (*TaskEnvelope, error) {
	return o.operation(ctx, http.MethodPost, "/api/domains/{id}/start/", id, map[string]any{"force": force})
}

// ShutdownDomain powers a domain off (force: at once, without asking the guest).
func (o *Operator) ShutdownDomain(ctx context.Context, id string, force bool) (*TaskEnvelope, error) {
	return o.operation(ctx, http.MethodPost, "/api/domains/{id}/shutdown/", id, map[string]any{"force": force})
}

// CloneDomain clones a template or domain; nodeID and datapoolID may be empty.
func (o *Operator) CloneDomain(ctx context.Context, templateID, nodeID, verboseName, datapoolID string) (*TaskEnvelope, error) {
	body := map[string]any{"verbose_name": verboseName}
	if nodeID != "" {
		body["node"] = nodeID
	}
	if datapoolID != "" {
		body["datapool"] = datapoolID
	}
	return o.operation(ctx, http.MethodPost, "/api/domains/{id}/clone/", templateID, body)
}

// SetTemplate makes a domain a template or an ordinary domain.
func (o *Operator) SetTemplate(ctx context.Context, id string, template bool) (*TaskEnvelope, error) {
	return o.operation(ctx, http.MethodPut, "/api/domains/{id}/template/", id, map[string]any{"template": template})
}

// RemoveDomain deletes a domain (full: with its disks).
func (o *Operator) RemoveDomain(ctx context.Context, id string, full bool) (*TaskEnvelope, error) {
	return o.operation(ctx, http.MethodPost, "/api/domains/{id}/remove/", id, map[string]any{"full": full})
}

// BackupDomain starts a backup of a domain; datapoolID may be empty.
func (o *Operator) BackupDomain(ctx context.Context, id, datapoolID string, compress bool, limitDays int) (*TaskEnvelope, error) {
	if id == "" {
		return nil, fmt.Errorf("veilops: POST /api/domains/backup/: empty domain id")
	}
	body := map[string]any{"domain": id, "compress": compress, "limit_days": limitDays}
	if datapoolID != "" {
		body["datapool"] = datapoolID
	}
	return o.operation(ctx, http.MethodPost, "/api/domains/backup/", "", body)
}

// SSHInject puts an SSH key into a guest (user defaults to root).
func (o *Operator) SSHInject(ctx context.Context, id string, createUser bool, user, key string) (*TaskEnvelope, error) {
	if user == "" {
		user = "root" // the platform's default when no user is given
	}
	return o.operation(ctx, http.MethodPost, "/api/domains/{id}/ssh-inject/", id,
		map[string]any{"create_user": createUser, "ssh_user": user, "ssh_key": key})
}

// SetBallooning turns memory ballooning of a node on or off.
func (o *Operator) SetBallooning(ctx context.Context, nodeID string, on bool) (*TaskEnvelope, error) {
	return o.operation(ctx, http.MethodPut, "/api/nodes/{id}/ballooning/", nodeID, map[string]any{"ballooning": on})
}

// WaitTask polls a task until a final status (SUCCESS, FAILED, CANCELED, LOST, PARTIAL), calling
// progress (may be nil) after each poll.
func (o *Operator) WaitTask(ctx context.Context, id string, every time.Duration, progress func(veil.Task)) (*veil.Task, error) {
	if every <= 0 {
		every = DefaultTaskPoll
	}
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("veilops: waiting for task %s: %w", id, ctx.Err())
		case <-t.C:
		}
		task, err := o.reads.Task(ctx, id)
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

// operation sends one operation, again on a retryable failure with the same body (and key).
// When the platform recognises the key of a finished operation it may answer with the object
// itself: Task is then zero and Entity holds the object.
func (o *Operator) operation(ctx context.Context, method, tmpl, id string, body map[string]any) (*TaskEnvelope, error) {
	path := tmpl
	if strings.Contains(tmpl, "{id}") {
		if id == "" {
			return nil, fmt.Errorf("veilops: %s %s: empty id", method, tmpl)
		}
		path = strings.Replace(tmpl, "{id}", url.PathEscape(id), 1)
	}
	body["idempotency_key"] = uuid.NewString()
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("veilops: %s %s: encoding request: %w", method, tmpl, err)
	}
	delay := backoff
	for attempt := 0; ; attempt++ {
		answer, status, err := o.send(ctx, method, path, b)
		if err == nil {
			env := new(TaskEnvelope)
			if err := json.Unmarshal(answer, env); err != nil {
				return nil, fmt.Errorf("veilops: decoding %s %s: %w", method, tmpl, err)
			}
			return env, nil
		}
		retryable := status == 0 || status >= 500 || status == http.StatusTeapot || status == http.StatusTooManyRequests
		if attempt >= retries || !retryable || ctx.Err() != nil {
			return nil, fmt.Errorf("veilops: %s %s: %w", method, tmpl, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("veilops: %s %s: %w (last error: %v)", method, tmpl, ctx.Err(), err)
		case <-time.After(delay):
		}
		delay *= 2
	}
}

// send sends one attempt and returns the body of a 2xx answer, or an error that holds the
// status and the start of the answer.
func (o *Operator) send(ctx context.Context, method, path string, body []byte) ([]byte, int, error) {
	req, err := http.NewRequestWithContext(ctx, method, o.base+path+"?async=1", bytes.NewReader(body))
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Authorization", "jwt "+o.token)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Content-Type", "application/json")
	resp, err := o.hc.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, 0, fmt.Errorf("reading response (status %d): %w", resp.StatusCode, err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return answer, resp.StatusCode, nil
	}
	if len(answer) > errorBody {
		answer = answer[:errorBody]
	}
	return nil, resp.StatusCode, fmt.Errorf("%d %s: %s", resp.StatusCode,
		strings.ToLower(http.StatusText(resp.StatusCode)), bytes.TrimSpace(answer))
}

// TaskEnvelope is the answer of an asynchronous operation: data_with_entity or
// data_without_entity. Entity is "_entity" or, as vendor code shows, "entity" (an object or a
// uuid string).
type TaskEnvelope struct {
	Task   veil.Task       `json:"_task"`
	Entity json.RawMessage `json:"-"`
}

// UnmarshalJSON reads data_with_entity ("_task" + "_entity", or "entity" as vendor code shows)
// and data_without_entity. An answer without "_task" (a repeated start answers with the domain
// object) leaves Task zero and keeps the whole object in Entity. A null answer is no entity, as
// a null "_entity" is, and leaves te untouched (encoding/json's convention for null).
func (te *TaskEnvelope) UnmarshalJSON(b []byte) error {
	if string(bytes.TrimSpace(b)) == "null" {
		return nil
	}
	var v struct {
		Task    *veil.Task      `json:"_task"`
		Entity  json.RawMessage `json:"_entity"`
		Entity2 json.RawMessage `json:"entity"`
	}
	if err := tolerate(json.Unmarshal(b, &v)); err != nil {
		return err
	}
	*te = TaskEnvelope{}
	if v.Task == nil {
		te.Entity = append(json.RawMessage(nil), bytes.TrimSpace(b)...)
		return nil
	}
	te.Task = *v.Task
	switch {
	case len(v.Entity) > 0 && string(v.Entity) != "null":
		te.Entity = v.Entity
	case len(v.Entity2) > 0 && string(v.Entity2) != "null":
		te.Entity = v.Entity2
	}
	return nil
}

// MarshalJSON writes the data_with_entity form ("_entity" omitted when empty).
func (te TaskEnvelope) MarshalJSON() ([]byte, error) {
	v := struct {
		Task   veil.Task       `json:"_task"`
		Entity json.RawMessage `json:"_entity,omitempty"`
	}{te.Task, te.Entity}
	return json.Marshal(v)
}

// tolerate drops a type mismatch of an ordinary field of the task (it stays zero; encoding/json
// has decoded the rest) and keeps every other error, including a bad "id".
func tolerate(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" && te.Field != "id" && !strings.HasSuffix(te.Field, ".id") {
		return nil
	}
	return err
}
