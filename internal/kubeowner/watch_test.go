package kubeowner

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

// apiServer answers the two requests the watcher makes, as the API server
// does: GET of the DaemonSet, and a watch stream of it.
type apiServer struct {
	exists  atomic.Bool
	getCode atomic.Int32 // when not 0: the GET's status
	events  chan string  // lines the watch stream sends; closed: EOF
	token   string
	uid     atomic.Value // string: the DaemonSet's metadata.uid
	gets    atomic.Int32 // GETs of the DaemonSet answered
	watches atomic.Int32 // watch streams opened
}

func (a *apiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+a.token {
		http.Error(w, `{"message":"Unauthorized"}`, http.StatusUnauthorized)
		return
	}
	if r.URL.Query().Get("watch") == "1" {
		if got := r.URL.Query().Get("fieldSelector"); got != "metadata.name=gpuext" {
			http.Error(w, "bad selector "+got, http.StatusBadRequest)
			return
		}
		a.watches.Add(1)
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		for {
			select {
			case line, ok := <-a.events:
				if !ok {
					return
				}
				fmt.Fprintln(w, line)
				w.(http.Flusher).Flush()
				if strings.Contains(line, `"type":"ERROR"`) {
					return // the API server ends a watch after an ERROR event
				}
			case <-r.Context().Done():
				return
			}
		}
	}
	if r.URL.Path != "/apis/apps/v1/namespaces/kube-system/daemonsets/gpuext" {
		http.NotFound(w, r)
		return
	}
	a.gets.Add(1)
	if c := a.getCode.Load(); c != 0 {
		http.Error(w, `{"message":"daemonsets.apps \"gpuext\" is forbidden"}`, int(c))
		return
	}
	if !a.exists.Load() {
		http.Error(w, `{"kind":"Status","message":"not found"}`, http.StatusNotFound)
		return
	}
	uid, _ := a.uid.Load().(string)
	fmt.Fprintf(w, `{"metadata":{"name":"gpuext","uid":%q,"resourceVersion":"42"}}`, uid)
}

func newWatcher(t *testing.T, a *apiServer) *Watcher {
	t.Helper()
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	tok := t.TempDir() + "/token"
	a.token = "t0k"
	if err := writeFile(tok, "t0k\n"); err != nil {
		t.Fatal(err)
	}
	return &Watcher{Namespace: "kube-system", Name: "gpuext", Server: srv.URL, TokenFile: tok,
		Client: srv.Client(), Log: logrus.NewEntry(logrus.New()), Retry: 20 * time.Millisecond}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDeletedEventMarksUninstall: helm uninstall deletes the DaemonSet; the
// open watch delivers DELETED and the agent will clean the node.
func TestDeletedEventMarksUninstall(t *testing.T) {
	a := &apiServer{events: make(chan string, 4)}
	a.exists.Store(true)
	w := newWatcher(t, a)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	waitUntil(t, "DaemonSet seen", w.seen.Load)
	// A rollout's MODIFIED, then an ERROR event that ends the watch: the
	// watcher GETs again only once it has handled both, in order. That GET
	// fails (503), which changes nothing, so what Deleted says then is what
	// the MODIFIED event did.
	a.getCode.Store(http.StatusServiceUnavailable)
	a.events <- `{"type":"MODIFIED","object":{"metadata":{"name":"gpuext","resourceVersion":"43"}}}`
	a.events <- `{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired"}}`
	waitUntil(t, "a GET after the watch ended", func() bool { return a.gets.Load() >= 2 })
	if w.Deleted() {
		t.Fatal("a MODIFIED event (a rollout) marked the DaemonSet deleted")
	}
	// The open watch delivers DELETED. Every GET still finds the DaemonSet,
	// so only the event can mark it deleted.
	a.getCode.Store(0)
	waitUntil(t, "the watch open again", func() bool { return a.watches.Load() >= 2 })
	if w.Deleted() {
		t.Fatal("deleted before any DELETED event")
	}
	a.events <- `{"type":"DELETED","object":{"metadata":{"name":"gpuext","resourceVersion":"44"}}}`
	waitUntil(t, "DELETED seen", w.Deleted)
}

// TestDeletionTimestampMarksUninstall: foreground deletion first sets the
// deletion timestamp.
func TestDeletionTimestampMarksUninstall(t *testing.T) {
	a := &apiServer{events: make(chan string, 4)}
	a.exists.Store(true)
	w := newWatcher(t, a)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	a.events <- `{"type":"MODIFIED","object":{"metadata":{"name":"gpuext","deletionTimestamp":"2026-12-01T00:00:00Z"}}}`
	waitUntil(t, "deletion timestamp seen", w.Deleted)
}

// TestGoneAfterStreamEnds: the watch ends (the server closes watches after
// a while) and the DaemonSet is gone when the watcher looks again.
func TestGoneAfterStreamEnds(t *testing.T) {
	a := &apiServer{events: make(chan string)}
	a.exists.Store(true)
	w := newWatcher(t, a)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	waitUntil(t, "DaemonSet seen", w.seen.Load)
	a.exists.Store(false)
	close(a.events)
	waitUntil(t, "gone after the stream ended", w.Deleted)
}

// TestNeverSeenIsNotDeleted: a wrong --owner-daemonset (404 from the first
// GET) must not wipe the node when the agent exits.
func TestNeverSeenIsNotDeleted(t *testing.T) {
	a := &apiServer{events: make(chan string)}
	w := newWatcher(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	w.Run(ctx)
	if w.Deleted() || w.Confirm(context.Background()) {
		t.Fatal("a DaemonSet never seen counted as deleted")
	}
}

// TestConfirmRefusedKeepsTenants: at exit the RoleBinding may be gone; a
// 403 is no proof of an uninstall, so the node keeps its tenants; a 404 of
// a DaemonSet seen before is.
func TestConfirmRefusedKeepsTenants(t *testing.T) {
	a := &apiServer{events: make(chan string)}
	a.exists.Store(true)
	w := newWatcher(t, a)
	ctx, cancel := context.WithCancel(context.Background())
	go w.Run(ctx)
	waitUntil(t, "DaemonSet seen", w.seen.Load)
	cancel()
	a.getCode.Store(http.StatusForbidden)
	if w.Confirm(context.Background()) {
		t.Fatal("403 at exit counted as an uninstall")
	}
	a.getCode.Store(0)
	if w.Confirm(context.Background()) {
		t.Fatal("an existing DaemonSet counted as deleted")
	}
	a.exists.Store(false)
	if !w.Confirm(context.Background()) {
		t.Fatal("404 of a DaemonSet seen before: not counted as deleted")
	}
}

// TestReappliedDaemonSetKeepsTenants: kubectl delete --cascade=orphan then
// a re-apply, or a forced replace, deletes the DaemonSet and makes it again
// (another UID, which adopts the agent's pods). The mark of the deletion
// reset when it came back, and at exit only a deletion still true then
// cleans the node. Before, the first deletion seen was an uninstall for
// good: the agent's next exit removed every pin and tenant dir.
func TestReappliedDaemonSetKeepsTenants(t *testing.T) {
	a := &apiServer{events: make(chan string, 4)}
	a.exists.Store(true)
	a.uid.Store("uid-1")
	w := newWatcher(t, a)
	ctx, cancel := context.WithCancel(context.Background())
	go w.Run(ctx)
	waitUntil(t, "DaemonSet seen", w.seen.Load)

	// orphan delete, then re-apply: seen by the open watch
	a.exists.Store(false)
	a.events <- `{"type":"DELETED","object":{"metadata":{"name":"gpuext","uid":"uid-1","resourceVersion":"44"}}}`
	waitUntil(t, "DELETED seen", w.Deleted)
	a.uid.Store("uid-2")
	a.exists.Store(true)
	a.events <- `{"type":"ADDED","object":{"metadata":{"name":"gpuext","uid":"uid-2","resourceVersion":"45"}}}`
	waitUntil(t, "the re-created DaemonSet seen", func() bool { return !w.Deleted() })
	if w.Confirm(context.Background()) {
		t.Fatal("exit after a re-apply counted as an uninstall: the node would lose its tenants")
	}

	// a forced replace while the agent exits: the watch saw the deletion,
	// the API at exit has the new DaemonSet
	a.exists.Store(false)
	a.events <- `{"type":"DELETED","object":{"metadata":{"name":"gpuext","uid":"uid-2","resourceVersion":"46"}}}`
	waitUntil(t, "DELETED seen", w.Deleted)
	cancel()
	a.uid.Store("uid-3")
	a.exists.Store(true)
	if w.Confirm(context.Background()) {
		t.Fatal("exit during a forced replace counted as an uninstall")
	}

	// the uninstall itself: deleted, and the RoleBinding with it (403 at
	// exit): what the watch saw last decides
	w2 := newWatcher(t, a)
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	go w2.Run(ctx2)
	waitUntil(t, "DaemonSet seen", w2.seen.Load)
	a.exists.Store(false)
	a.events <- `{"type":"DELETED","object":{"metadata":{"name":"gpuext","uid":"uid-3","resourceVersion":"47"}}}`
	waitUntil(t, "DELETED seen", w2.Deleted)
	a.getCode.Store(http.StatusForbidden)
	if !w2.Confirm(context.Background()) {
		t.Fatal("an uninstall (deleted, then refused at exit) was not counted")
	}
}

func TestParseOwner(t *testing.T) {
	for _, tc := range []struct {
		in       string
		ns, name string
		ok       bool
	}{
		{"kube-system/gpuext", "kube-system", "gpuext", true},
		{"gpuext", "", "", false},
		{"/gpuext", "", "", false},
		{"kube-system/", "", "", false},
		{"Kube/gpuext", "", "", false},
		{"ns/a/b", "", "", false},
		{"ns/-x", "", "", false},
	} {
		ns, name, err := ParseOwner(tc.in)
		if (err == nil) != tc.ok || ns != tc.ns || name != tc.name {
			t.Errorf("ParseOwner(%q) = %q, %q, %v", tc.in, ns, name, err)
		}
	}
}
