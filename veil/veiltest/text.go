package veiltest

import (
	"fmt"
	"net/http"
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

// reqLang is the language a request asks for.
func reqLang(r *http.Request) lang { return langEN }

// partialError is the outcome of a multitask of which only some parts succeeded: PARTIAL.
type partialError text

func (e partialError) Error() string { return e.en }
