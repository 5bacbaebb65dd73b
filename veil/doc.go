// Package veil is a typed client of the ECP VeiL (and SpaceVM) platform REST API.
//
// A Client talks to one controller: it sends "Authorization: jwt <token>" (the token comes
// from Config.Token or Config.TokenFile and never appears in errors), keeps within a request
// rate and a number of requests in flight shared by all its callers, gives each request a
// deadline, and retries GETs on 5xx, 418, 429 and connection failures with exponential backoff
// and jitter. The client only reads: its one POST is the guest agent's command (guest-command,
// whose commands ask and change nothing), and it has no call that changes the platform's state
// (tests drive the platform through internal/testutil/veilops). Guest commands are never
// retried; their timeout bounds the request on the wire (not the wait for the client's limits),
// and their failures wrap ErrGuestTimeout, ErrAgentNotRunning or ErrGuestUnsupported when they
// are one of those.
//
// Collections are read with List (an iterator over every object, paging concurrently) or
// ListPage; ReadPages, the engine under List, reads the pages a caller plans concurrently and
// hands them over in order. Errors of the platform are *APIError values that work with
// errors.Is and ErrUnauthorized, ErrForbidden and ErrNotFound. Decoding is lenient where the
// real platform is inconsistent (see decode.go): numbers as strings, timestamps with or
// without zone, references as objects or uuid strings. The pages of the large listings are read
// in one pass by a fast decoder (plain_decode.go) that sets each field as encoding/json would,
// from tables built from the struct tags at init (plain_fields.go); what it cannot read exactly
// so is left to encoding/json.
//
// Owns the platform's API, paging and the controller's HTTP client (TLS); imports nothing of
// this module but internal/jsonscan (the JSON scanner it shares with forwarder, which imports
// nothing of it either), so it can serve any program.
package veil
