package veil

// TODO(client): every function here is a placeholder so dependants compile; the client
// implementation replaces this file.

import (
	"context"
	"errors"
	"iter"
	"time"
)

var errTODO = errors.New("veil: not implemented yet")

// Client talks to one platform controller. It is safe for concurrent use.
type Client struct{}

func (e *APIError) Error() string            { return "TODO" }
func (n *Number) UnmarshalJSON([]byte) error { return errTODO }
func (t *Time) UnmarshalJSON([]byte) error   { return errTODO }
func (r *Ref) UnmarshalJSON([]byte) error    { return errTODO }

func guestErrorReason(error) string     { return "api_error" }
func newClient(Config) (*Client, error) { return nil, errTODO }
func (c *Client) reloadToken() error    { return errTODO }
func list[T any](context.Context, *Client, string, Query) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) { var z T; yield(z, errTODO) }
}
func listPage[T any](context.Context, *Client, string, int, int, Query) (Page[T], error) {
	return Page[T]{}, errTODO
}
func collect[T any](seq iter.Seq2[T, error]) ([]T, error) {
	var out []T
	for v, err := range seq {
		if err != nil {
			return out, err
		}
		out = append(out, v)
	}
	return out, nil
}
func get[T any](context.Context, *Client, string, string) (*T, error) { return nil, errTODO }
func (c *Client) startDomain(context.Context, string, bool) (*TaskEnvelope, error) {
	return nil, errTODO
}
func (c *Client) shutdownDomain(context.Context, string, bool) (*TaskEnvelope, error) {
	return nil, errTODO
}
func (c *Client) cloneDomain(context.Context, string, string, string, string) (*TaskEnvelope, error) {
	return nil, errTODO
}
func (c *Client) setTemplate(context.Context, string, bool) (*TaskEnvelope, error) {
	return nil, errTODO
}
func (c *Client) removeDomain(context.Context, string, bool) (*TaskEnvelope, error) {
	return nil, errTODO
}
func (c *Client) backupDomain(context.Context, string, string, bool, int) (*TaskEnvelope, error) {
	return nil, errTODO
}
func (c *Client) sshInject(context.Context, string, bool, string, string) (*TaskEnvelope, error) {
	return nil, errTODO
}
func (c *Client) setBallooning(context.Context, string, bool) (*TaskEnvelope, error) {
	return nil, errTODO
}
func (c *Client) waitTask(context.Context, string, time.Duration, func(Task)) (*Task, error) {
	return nil, errTODO
}
func (c *Client) availableGuestCommands(context.Context, string) ([]string, error) {
	return nil, errTODO
}
func (c *Client) guestCommand(context.Context, string, string, any, time.Duration) ([]byte, error) {
	return nil, errTODO
}
func (c *Client) guestPing(context.Context, string, time.Duration) error { return errTODO }
func (c *Client) guestOSInfo(context.Context, string, time.Duration) (*GuestOSInfo, error) {
	return nil, errTODO
}
func (c *Client) guestFSInfo(context.Context, string, time.Duration) ([]GuestFilesystem, error) {
	return nil, errTODO
}
func (c *Client) guestTime(context.Context, string, time.Duration) (time.Time, error) {
	return time.Time{}, errTODO
}
func (c *Client) guestInfo(context.Context, string, time.Duration) (*GuestInfo, error) {
	return nil, errTODO
}
