package hook

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

func TestReadState(t *testing.T) {
	const good = `{"ociVersion":"1.0.2","id":"c1","status":"created","pid":4242,"bundle":"/b","annotations":{"a":"b"}}`
	tests := []struct {
		name    string
		in      string
		limit   int64
		wantErr error
		wantMsg string
	}{
		{name: "good", in: good},
		{name: "good with trailing newline and garbage after the object", in: good + "\n{garbage"},
		{name: "empty stdin", in: "", wantErr: ErrBadState, wantMsg: "stdin is empty"},
		{name: "whitespace only", in: " \n\t", wantErr: ErrBadState, wantMsg: "stdin is empty"},
		{name: "malformed JSON", in: `{"id": "c1",,}`, wantErr: ErrBadState, wantMsg: "invalid character"},
		{name: "not an object", in: `["c1"]`, wantErr: ErrBadState, wantMsg: "cannot unmarshal array"},
		{name: "wrong type", in: `{"id":"c1","pid":"12"}`, wantErr: ErrBadState, wantMsg: "pid"},
		{name: "truncated", in: `{"id":"c1","pid":`, wantErr: ErrBadState, wantMsg: "truncated"},
		{name: "over the size limit", in: good, limit: 20, wantErr: ErrBadState, wantMsg: "truncated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			limit := tt.limit
			if limit == 0 {
				limit = MaxStateSize
			}
			st, err := ReadState(strings.NewReader(tt.in), time.Second, limit)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("ReadState: %v", err)
				}
				if st.ID != "c1" || st.Pid != 4242 || st.Bundle != "/b" || st.Annotations["a"] != "b" {
					t.Fatalf("state = %+v", st)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("err = %v, want %v containing %q", err, tt.wantErr, tt.wantMsg)
			}
		})
	}
}

func TestReadStateOpenStdin(t *testing.T) {
	t.Run("never closes, never writes: times out", func(t *testing.T) {
		r, w := io.Pipe()
		defer w.Close()
		start := time.Now()
		_, err := ReadState(r, 100*time.Millisecond, MaxStateSize)
		if !errors.Is(err, ErrStateTimeout) {
			t.Fatalf("err = %v, want ErrStateTimeout", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("took %s", d)
		}
	})
	t.Run("complete object on a stdin that stays open: no wait", func(t *testing.T) {
		r, w := io.Pipe()
		defer w.Close()
		go w.Write([]byte(`{"id":"c1","pid":1,"bundle":"/b"}`)) //nolint:errcheck
		st, err := ReadState(r, 5*time.Second, MaxStateSize)
		if err != nil || st.ID != "c1" {
			t.Fatalf("ReadState = %+v, %v", st, err)
		}
	})
	t.Run("partial object, then silence: times out", func(t *testing.T) {
		r, w := io.Pipe()
		defer w.Close()
		go w.Write([]byte(`{"id":"c1",`)) //nolint:errcheck
		_, err := ReadState(r, 100*time.Millisecond, MaxStateSize)
		if !errors.Is(err, ErrStateTimeout) {
			t.Fatalf("err = %v, want ErrStateTimeout", err)
		}
	})
}

func TestValidateState(t *testing.T) {
	tests := []struct {
		name, in string
		stage    Stage
		wantMsg  string // "" = valid
	}{
		{name: "createRuntime complete", in: `{"id":"c1","pid":7,"bundle":"/b"}`, stage: StageCreateRuntime},
		{name: "prestart complete", in: `{"id":"c1","pid":7,"bundle":"/b"}`, stage: StagePrestart},
		{name: "missing id", in: `{"pid":7,"bundle":"/b"}`, stage: StageCreateRuntime, wantMsg: "missing id for stage createRuntime"},
		{name: "missing pid at prestart", in: `{"id":"c1","bundle":"/b"}`, stage: StagePrestart, wantMsg: "missing pid for stage prestart"},
		{name: "negative pid", in: `{"id":"c1","pid":-1,"bundle":"/b"}`, stage: StageCreateRuntime, wantMsg: "missing pid"},
		{name: "missing bundle", in: `{"id":"c1","pid":7}`, stage: StageCreateRuntime, wantMsg: "missing bundle"},
		{name: "missing everything", in: `{}`, stage: StagePrestart, wantMsg: "missing id, bundle, and pid"},
		{name: "poststop needs no pid", in: `{"id":"c1","bundle":"/b","status":"stopped"}`, stage: StagePoststop},
		{name: "poststop needs an id", in: `{"bundle":"/b"}`, stage: StagePoststop, wantMsg: "missing id for stage poststop"},
		{name: "createContainer needs no host pid", in: `{"id":"c1","bundle":"/b"}`, stage: StageCreateContainer},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := ReadState(strings.NewReader(tt.in), time.Second, MaxStateSize)
			if err != nil {
				t.Fatal(err)
			}
			err = ValidateState(st, tt.stage)
			if tt.wantMsg == "" {
				if err != nil {
					t.Fatalf("ValidateState: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrBadState) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("err = %v, want ErrBadState containing %q", err, tt.wantMsg)
			}
		})
	}
}

func TestParseStage(t *testing.T) {
	for _, s := range []string{"prestart", "createRuntime", "createContainer", "poststop"} {
		if st, err := ParseStage(s); err != nil || string(st) != s {
			t.Errorf("ParseStage(%q) = %q, %v", s, st, err)
		}
	}
	for _, s := range []string{"", "poststart", "CreateRuntime", "startContainer"} {
		if _, err := ParseStage(s); !errors.Is(err, ErrBadStage) {
			t.Errorf("ParseStage(%q) err = %v, want ErrBadStage", s, err)
		}
	}
}
