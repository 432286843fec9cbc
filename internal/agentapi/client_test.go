package agentapi

import (
	"bufio"
	"errors"
	"net"
	"net/textproto"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuext/gpuext/internal/failmode"
)

// fakeAgent listens on a unix socket under /tmp (t.TempDir paths can
// exceed the socket limit) and answers every request with answer, after
// reading the request's head; it returns the socket and the requests' heads.
func fakeAgent(t *testing.T, answer string) (string, <-chan string) {
	t.Helper()
	sock, ln := listenSocket(t)
	t.Cleanup(func() { ln.Close() })
	heads := make(chan string, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tp := textproto.NewReader(bufio.NewReader(c))
			line, _ := tp.ReadLine()
			h, _ := tp.ReadMIMEHeader()
			heads <- line + " " + h.Get("Content-Length")
			c.Write([]byte(answer)) //nolint:errcheck
			c.Close()
		}
	}()
	return sock, heads
}

func TestClientAnswers(t *testing.T) {
	const ok = `{"decision":{"tenant":7,"tenantKey":"oci/ctr/c1","policy":"batch","configDigest":"ab","mac":"m","injection":{"Mounts":null,"Env":[{"Key":"A","Value":"1"}]}}}`
	for _, tc := range []struct {
		name, answer string
		want         string // "" for success, else a part of the error
		unavailable  bool
		refused      bool
	}{
		{"content-length", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(ok)) + "\r\n\r\n" + ok, "", false, false},
		{"to the end", "HTTP/1.0 200 OK\r\n\r\n" + ok, "", false, false},
		{"refused", "HTTP/1.1 200 OK\r\n\r\n" + `{"error":"gpu policy request refused: container \"c1\": unknown policy","refused":true}`,
			`gpu policy request refused: container "c1": unknown policy`, false, true},
		{"agent error", "HTTP/1.1 200 OK\r\n\r\n" + `{"error":"admit: container id is empty","kind":"internal"}`, "container id is empty", false, false},
		{"HTTP error", "HTTP/1.1 503 Service Unavailable\r\n\r\n" + `{"error":"plugin not configured"}`, "HTTP 503: plugin not configured", true, false},
		{"no decision", "HTTP/1.1 200 OK\r\n\r\n{}", "answer without a decision", true, false},
		{"not HTTP", "SSH-2.0-OpenSSH\r\n\r\n", "not HTTP/1.x", true, false},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{}\r\n0\r\n\r\n", `transfer-encoding "chunked"`, true, false},
		{"length over the bound", "HTTP/1.1 200 OK\r\nContent-Length: 99999999\r\n\r\n{}", "content-length", true, false},
		{"short body", "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{}", "body", true, false},
		{"body over the bound", "HTTP/1.0 200 OK\r\n\r\n" + strings.Repeat(" ", MaxRequest+1) + "{}", "over", true, false},
		{"not JSON", "HTTP/1.0 200 OK\r\n\r\n<html>", "bad answer", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock, heads := fakeAgent(t, tc.answer)
			a, err := NewClient(sock, time.Second).Admit(ContainerInfo{ID: "c1", Name: "c1"})
			head := <-heads
			if !strings.HasPrefix(head, "POST /v1/admit HTTP/1.0 ") || strings.HasSuffix(head, " ") {
				t.Errorf("request head %q, want a POST with a Content-Length", head)
			}
			if tc.want == "" {
				if err != nil || a.Tenant != 7 || a.TenantKey != "oci/ctr/c1" || a.Policy != "batch" || a.MAC != "m" ||
					len(a.Injection.Env) != 1 || a.Injection.Env[0] != (EnvVar{"A", "1"}) {
					t.Fatalf("answer %+v, err %v", a, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one saying %q", err, tc.want)
			}
			if errors.Is(err, ErrUnavailable) != tc.unavailable || errors.Is(err, failmode.ErrRefused) != tc.refused {
				t.Fatalf("err %v: unavailable %v refused %v, want %v %v", err, errors.Is(err, ErrUnavailable),
					errors.Is(err, failmode.ErrRefused), tc.unavailable, tc.refused)
			}
			if tc.refused && strings.Count(err.Error(), "refused") != 1 {
				t.Fatalf("err %q says refused twice", err)
			}
		})
	}
}

// An agent that accepts and never answers (hung, or stopped) costs the
// hook its timeout, not the runtime's hook timeout; no socket fails at once.
func TestClientTimeoutAndNoAgent(t *testing.T) {
	sock, ln := listenSocket(t)
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			time.Sleep(3 * time.Second)
			c.Close()
		}
	}()
	start := time.Now()
	_, err := NewClient(sock, 300*time.Millisecond).Admit(ContainerInfo{ID: "c1"})
	if took := time.Since(start); !errors.Is(err, ErrUnavailable) || took > 2*time.Second {
		t.Fatalf("hung agent: err %v after %v, want unavailable after about 300ms", err, took)
	}
	_, err = NewClient(filepath.Join(filepath.Dir(sock), "none.sock"), time.Second).Admit(ContainerInfo{ID: "c1"})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "none.sock") {
		t.Fatalf("no agent: err %v, want unavailable naming the socket", err)
	}
}

// listenSocket listens on a unix socket in a short temporary dir (socket
// paths are bounded) removed at the end.
func listenSocket(t *testing.T) (string, net.Listener) {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "gx-api-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	return sock, ln
}
