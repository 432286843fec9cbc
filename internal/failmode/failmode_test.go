package failmode

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]Mode{"": Open, "fail-open": Open, "strict": Strict, "fail-closed": Strict} {
		got, err := Parse(in)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"yolo", "Strict", "fail-open "} {
		if _, err := Parse(in); err == nil || !strings.Contains(err.Error(), "failMode") {
			t.Errorf("Parse(%q): err %v, want one naming failMode", in, err)
		}
	}
}

// The table every runtime path follows (test/e2e TestFailModeTable runs it
// on the real runtimes).
func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		mode Mode
		kind Kind
		want Outcome
	}{
		{Open, KindRequest, Default},
		{Open, KindConstraint, Default},
		{Open, KindInternal, Without},
		{Strict, KindRequest, Refused},
		{Strict, KindConstraint, Refused},
		{Strict, KindInternal, Refused},
	} {
		if got := Decide(tc.mode, tc.kind); got != tc.want {
			t.Errorf("Decide(%s, %s) = %s, want %s", tc.mode, tc.kind, got, tc.want)
		}
	}
}

func TestApply(t *testing.T) {
	var buf bytes.Buffer
	lg := logrus.New()
	lg.SetOutput(&buf)
	lg.SetFormatter(&logrus.JSONFormatter{})
	log := logrus.NewEntry(lg)
	cause := errors.New("gpuext agent unavailable at /x")

	out, err := Apply(Strict, KindInternal, log, "admit", "web", cause)
	if out != Refused || !errors.Is(err, ErrRefused) || !errors.Is(err, cause) || !strings.Contains(err.Error(), `"web"`) {
		t.Fatalf("strict: %s, %v", out, err)
	}
	if !strings.Contains(buf.String(), `"failMode":"strict"`) || !strings.Contains(buf.String(), `"errorKind":"internal"`) {
		t.Fatalf("strict log: %s", buf.String())
	}
	// a refusal made already (by the agent) is passed on, not wrapped again
	out, err2 := Apply(Open, KindInternal, log, "admit", "web", err)
	if out != Refused || err2 != err {
		t.Fatalf("refused again: %s, %v", out, err2)
	}
	buf.Reset()
	if out, err := Apply(Open, KindInternal, log, "admit", "web", cause); out != Without || err != nil {
		t.Fatalf("fail-open: %s, %v", out, err)
	}
	if !strings.Contains(buf.String(), "runs without gpuext") || !strings.Contains(buf.String(), "agent unavailable") {
		t.Fatalf("fail-open log: %s", buf.String())
	}
}
