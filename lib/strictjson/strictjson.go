package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"
)

// Decode decodes exactly one JSON value from data into v (a pointer).
// It is stricter than json.Decoder.DisallowUnknownFields: an unknown field, a
// field spelled in another case ("Name" for "name"; encoding/json would take
// it), a field given twice (encoding/json keeps the last), and data after the
// value are all errors, each naming the field path.
func Decode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := checkFields(dec, reflect.TypeOf(v), ""); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New(fmt.Sprintf("trailing data after the JSON value (%s)", position(data, dec.InputOffset())))
	}
	dec = json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return errors.New(fmt.Sprintf("%s: want %s, got JSON %s", te.Field, te.Type, te.Value))
		}
		return errors.New(err.Error())
	}
	return nil
}

// checkFields walks the next JSON value of dec against type t (nil: any).
// Type mismatches are left to json.Decode, which reports them.
func checkFields(dec *json.Decoder, t reflect.Type, path string) error {
	tok, err := dec.Token()
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return errors.New(fmt.Sprintf("malformed JSON at %s: %v", orTop(path), err))
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return errors.New(fmt.Sprintf("malformed JSON at %s: %v", orTop(path), err))
			}
			key := kt.(string)
			if seen[key] {
				return fieldErr(path, fmt.Sprintf("field %q given twice", key))
			}
			seen[key] = true
			var ft reflect.Type
			switch {
			case t != nil && t.Kind() == reflect.Struct:
				fields := jsonFields(t)
				var ok bool
				if ft, ok = fields[key]; !ok {
					return fieldErr(path, fmt.Sprintf("unknown field %q%s", key, fieldHint(fields, key)))
				}
			case t != nil && t.Kind() == reflect.Map:
				ft = t.Elem()
			}
			if err := checkFields(dec, ft, joinPath(path, key)); err != nil {
				return err
			}
		}
		_, err = dec.Token()
	case json.Delim('['):
		var et reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			et = t.Elem()
		}
		for i := 0; dec.More(); i++ {
			if err := checkFields(dec, et, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		_, err = dec.Token()
	}
	if err != nil {
		return errors.New(fmt.Sprintf("malformed JSON at %s: %v", orTop(path), err))
	}
	return nil
}

func jsonFields(t reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = f.Type
	}
	return fields
}

func fieldHint(fields map[string]reflect.Type, key string) string {
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if strings.EqualFold(name, key) || EditDistance(name, key) <= 2 {
			return fmt.Sprintf(" (did you mean %q?)", name)
		}
	}
	return ""
}

func fieldErr(path, msg string) error {
	if path != "" {
		msg = path + ": " + msg
	}
	return errors.New(msg)
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func orTop(path string) string {
	if path == "" {
		return "top level"
	}
	return path
}

func position(data []byte, off int64) string {
	line := 1 + bytes.Count(data[:off], []byte("\n"))
	return fmt.Sprintf("line %d", line)
}

// EditDistance is the Levenshtein distance of a and b (bytes), for "did you mean".
func EditDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
