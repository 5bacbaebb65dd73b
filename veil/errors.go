package veil

import (
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxSnippet bounds the text kept from a non-JSON error body.
const maxSnippet = 120

// Error reads like "404 not found: Domain not found (code 50004)"; a field error names the
// field ("400 bad request: limit: A valid integer is required. (code invalid)").
func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s", e.StatusCode, strings.ToLower(http.StatusText(e.StatusCode)))
	switch {
	case e.Message != "":
		b.WriteString(": ")
		if e.Field != "" {
			b.WriteString(e.Field)
			b.WriteString(": ")
		}
		b.WriteString(e.Message)
	case e.Snippet != "":
		fmt.Fprintf(&b, ": non-JSON response: %q", e.Snippet)
	}
	if e.Code != "" {
		fmt.Fprintf(&b, " (code %s)", e.Code)
	}
	return b.String()
}

// Is makes errors.Is(err, ErrUnauthorized/ErrForbidden/ErrNotFound) follow the HTTP status.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrUnauthorized:
		return e.StatusCode == http.StatusUnauthorized
	case ErrForbidden:
		return e.StatusCode == http.StatusForbidden
	case ErrNotFound:
		return e.StatusCode == http.StatusNotFound
	}
	return false
}

// decodeAPIError reads an error answer: the platform's error body ({"errors":[{code, msg_key, <msg_key>: msg}]}),
// the vendor's variant without msg_key, DRF's bare {"detail": ...}, or anything else, of which a
// short text snippet is kept. It never fails: an error answer always yields an *APIError.
func decodeAPIError(status int, body []byte) *APIError {
	e := &APIError{StatusCode: status}
	var env struct {
		Errors []map[string]json.RawMessage `json:"errors"`
		Detail json.RawMessage              `json:"detail"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		e.Snippet = snippet(body)
		return e
	}
	var msgs []string
	for i, item := range env.Errors {
		code, msgKey, msg := errorItem(item)
		if i == 0 {
			e.Code, e.MsgKey = code, msgKey
			if msgKey != "" && msgKey != "detail" && msgKey != "non_field_errors" {
				e.Field = msgKey
			}
		}
		if msg != "" {
			msgs = append(msgs, msg)
		}
	}
	if len(env.Errors) == 0 && len(env.Detail) > 0 {
		e.MsgKey = "detail"
		msgs = append(msgs, messageText(env.Detail))
	}
	e.Message = strings.Join(msgs, "; ")
	if e.Message == "" && e.Code == "" {
		// Valid JSON but not an error body we know: show what it was.
		e.Snippet = snippet(body)
	}
	return e
}

// errorItem extracts one element of the error body's errors array. msg_key names the key of the message;
// when it is missing, the message is under "detail", "non_field_errors" or a field name.
func errorItem(item map[string]json.RawMessage) (code, msgKey, msg string) {
	code = messageText(item["code"])
	if raw, ok := item["msg_key"]; ok {
		msgKey = messageText(raw)
	}
	if msgKey != "" {
		if raw, ok := item[msgKey]; ok {
			return code, msgKey, messageText(raw)
		}
	}
	keys := make([]string, 0, len(item))
	for k := range item {
		if k != "code" && k != "msg_key" {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return code, msgKey, ""
	}
	sort.Strings(keys)
	pick := keys[0]
	for _, k := range []string{"detail", "non_field_errors"} {
		if _, ok := item[k]; ok {
			pick = k
		}
	}
	if msgKey == "" {
		msgKey = pick
	}
	return code, msgKey, messageText(item[pick])
}

// messageText renders a message value: a string, a number, or a list of them (DRF field errors).
func messageText(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) == nil {
		parts := make([]string, 0, len(list))
		for _, r := range list {
			if t := messageText(r); t != "" {
				parts = append(parts, t)
			}
		}
		return strings.Join(parts, " ")
	}
	var n json.Number
	if json.Unmarshal(raw, &n) == nil {
		return n.String()
	}
	if string(raw) == "null" {
		return ""
	}
	return snippet(raw)
}

// snippet turns the start of a body (typically a proxy's HTML error page) into at most
// maxSnippet characters of plain text: tags, scripts and styles dropped, entities decoded,
// whitespace collapsed.
func snippet(body []byte) string {
	const scan = 16 << 10 // the first 16 KiB hold the readable part of any error page
	if len(body) > scan {
		body = body[:scan]
	}
	s := string(body)
	var text strings.Builder
	for len(s) > 0 {
		lt := strings.IndexByte(s, '<')
		if lt < 0 {
			text.WriteString(s)
			break
		}
		text.WriteString(s[:lt])
		s = s[lt:]
		gt := strings.IndexByte(s, '>')
		if gt < 0 {
			break // an unterminated tag: drop the rest
		}
		tag := strings.ToLower(s[1:gt])
		s = s[gt+1:]
		for _, skip := range []string{"script", "style"} {
			if strings.HasPrefix(tag, skip) {
				if end := strings.Index(strings.ToLower(s), "</"+skip); end >= 0 {
					s = s[end:]
				} else {
					s = ""
				}
			}
		}
		text.WriteByte(' ')
	}
	plain := strings.Join(strings.FieldsFunc(html.UnescapeString(text.String()), func(r rune) bool {
		return unicode.IsSpace(r) || !unicode.IsPrint(r)
	}), " ")
	plain = strings.ToValidUTF8(plain, "")
	if utf8.RuneCountInString(plain) > maxSnippet {
		r := []rune(plain)
		plain = string(r[:maxSnippet-1]) + "…"
	}
	return plain
}
