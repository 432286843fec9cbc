package main

import (
	"io"
	"path/filepath"
	"strings"
	"testing"
)

// TestSetPolicyArgs: a malformed or repeated --param and a missing argument
// are usage errors naming what is wrong, before the agent is called; an
// agent that is not there is named by its socket.
func TestSetPolicyArgs(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "none.sock")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"tenants", "set-policy", "7"}, "usage: gpuextctl tenants set-policy TENANT POLICY"},
		{[]string{"tenants", "set-policy", "7", "quota", "--param", "quota"}, `--param "quota": want KEY=VALUE`},
		{[]string{"tenants", "set-policy", "7", "quota", "--param", "quota=1GiB", "--param", "quota=2GiB"}, "quota given twice"},
		{[]string{"tenants", "set-policy", "--socket", sock, "7", "quota", "--param", "quota=1GiB"}, sock},
	} {
		err := run(tc.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("gpuextctl %s: %v, want an error with %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}
