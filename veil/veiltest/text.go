package veiltest

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// lang is the language of the texts a request gets (Accept-Language: en, the default, or ru).
type lang int

const (
	langEN lang = iota
	langRU
	langCount
)

// text is a message in both languages the platform speaks; an empty ru falls back to en.
type text struct{ en, ru string }

func txt(en, ru string) text { return text{en, ru} }

// txtf formats both languages with the same arguments.
func txtf(en, ru string, args ...any) text {
	return text{fmt.Sprintf(en, args...), fmt.Sprintf(ru, args...)}
}

func (t text) in(l lang) string {
	if l == langRU && t.ru != "" {
		return t.ru
	}
	return t.en
}

// textError is an operation's failure with its message in both languages.
type textError text

func (e textError) Error() string { return e.en }

// reqLang is the language a request asks for in Accept-Language: the supported language (en,
// ru) with the highest weight; en when it names neither.
func reqLang(r *http.Request) lang {
	best, bestQ := langEN, -1.0
	for _, part := range strings.Split(r.Header.Get("Accept-Language"), ",") {
		tag, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		primary, _, _ := strings.Cut(strings.ToLower(strings.TrimSpace(tag)), "-")
		var l lang
		switch primary {
		case "en":
			l = langEN
		case "ru":
			l = langRU
		default:
			continue
		}
		q := 1.0
		if v, ok := strings.CutPrefix(strings.TrimSpace(params), "q="); ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				q = f
			}
		}
		if q > bestQ {
			best, bestQ = l, q
		}
	}
	return best
}

// langOf is the language of the request a writer answers: the API's writers carry it.
func langOf(w http.ResponseWriter) lang {
	if x, ok := w.(interface{ language() lang }); ok {
		return x.language()
	}
	return langEN
}

// partialError is the outcome of a multitask of which only some parts succeeded: PARTIAL.
type partialError text

func (e partialError) Error() string { return e.en }
