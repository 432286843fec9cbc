package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runTimeout runs gpuextctl with args, failing the test if it blocks.
func runTimeout(t *testing.T, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- run(args, &out) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("gpuextctl %v: %v", args, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("gpuextctl %v blocked", args)
	}
	return out.String()
}

// A tenant puts a link to a host 0600 file and a FIFO among its probe
// files: `gpuextctl probes` and `probes read` neither show the file's content
// nor block, name both as not counted, and still count the tenant's own files.
func TestProbesRefuseTenantLinksAndFIFOs(t *testing.T) {
	state := probeState(t)
	acct := filepath.Join(state, "acct", "7", "probes")
	secret := filepath.Join(t.TempDir(), "shadow")
	if err := os.WriteFile(secret, []byte("image=- state=off reason=root:SECRET-HASH\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(acct, "300.status")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(acct, "400.status"), 0o666); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		own  string // the tenant's own two processes still counted
	}{
		{[]string{"probes", "read", acct}, "processes 2,"},
		{[]string{"probes", "read", "--json", acct}, `"processes": 2,`},
		{[]string{"probes", "--state-dir", state}, "launch-latency,launch-stats,sm-histogram  2  "},
		{[]string{"probes", "--json", "--state-dir", state}, `"processes": 2,`},
	} {
		out := runTimeout(t, c.args...)
		if strings.Contains(out, "SECRET") {
			t.Errorf("gpuextctl %v shows the linked host file:\n%s", c.args, out)
		}
		for _, want := range []string{"300.status: refused: a symbolic link", "400.status: refused: not a regular file", c.own} {
			if !strings.Contains(out, want) {
				t.Errorf("gpuextctl %v lacks %q:\n%s", c.args, want, out)
			}
		}
	}
}
