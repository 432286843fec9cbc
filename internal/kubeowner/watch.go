package kubeowner

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
)

// ServiceAccountDir is where the kubelet mounts a pod's service-account
// token, CA and namespace.
const ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// Watcher watches one DaemonSet and remembers whether it was deleted.
type Watcher struct {
	Namespace, Name string
	// Server is the API server's base URL (https://host:port).
	Server string
	// TokenFile is read before every request (projected tokens rotate).
	TokenFile string
	Client    *http.Client
	Log       *logrus.Entry
	// Retry is the wait before the watch is opened again (default 2s).
	Retry time.Duration

	deleted atomic.Bool
	seen    atomic.Bool
	uid     atomic.Value // string: the UID of the DaemonSet first seen
}

// ParseOwner splits "NAMESPACE/NAME" and checks both are DNS-1123 names,
// as the API accepts them.
func ParseOwner(s string) (namespace, name string, err error) {
	ns, n, ok := strings.Cut(s, "/")
	if !ok || !dnsName(ns, 63) || !dnsName(n, 253) {
		return "", "", fmt.Errorf("owner daemonset %q: want NAMESPACE/NAME (lower-case DNS names)", s)
	}
	return ns, n, nil
}

func dnsName(s string, max int) bool {
	if s == "" || len(s) > max || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// InCluster builds a Watcher from the pod's environment: the
// KUBERNETES_SERVICE_HOST/PORT the kubelet sets and the mounted
// service-account CA and token.
func InCluster(namespace, name string, log *logrus.Entry) (*Watcher, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, errors.New("not in a pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are unset")
	}
	ca, err := os.ReadFile(filepath.Join(ServiceAccountDir, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("service-account CA: %w (the chart mounts a token when cleanupOnUninstall is set)", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("service-account CA %s: no certificate in it", filepath.Join(ServiceAccountDir, "ca.crt"))
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		DialContext: (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext}
	return &Watcher{
		Namespace: namespace, Name: name,
		Server:    "https://" + net.JoinHostPort(host, port),
		TokenFile: filepath.Join(ServiceAccountDir, "token"),
		Client:    &http.Client{Transport: tr},
		Log:       log,
	}, nil
}

// Deleted reports whether the DaemonSet is, as last seen, deleted (or
// being deleted) after it was seen to exist. A DaemonSet made again under
// the name (a re-apply after kubectl delete --cascade=orphan, a forced
// replace) resets it: the agent's pods are adopted by it.
func (w *Watcher) Deleted() bool { return w.deleted.Load() }

// setDeleted records what the watch saw, and logs a change.
func (w *Watcher) setDeleted(deleted bool, uid string) {
	if first, _ := w.uid.Load().(string); first == "" && uid != "" {
		w.uid.Store(uid)
	}
	if w.deleted.Swap(deleted) == deleted {
		return
	}
	l := w.Log.WithFields(logrus.Fields{"daemonset": w.Namespace + "/" + w.Name, "uid": uid})
	if deleted {
		l.Info("owner daemonset deleted: the node is cleaned when the agent exits, unless it is made again before")
	} else {
		l.Info("owner daemonset made again (a re-apply): the node keeps its tenants")
	}
}

// Run watches until ctx ends, through deletions: a DaemonSet deleted and
// made again under the name is not an uninstall.
func (w *Watcher) Run(ctx context.Context) {
	retry := w.Retry
	if retry <= 0 {
		retry = 2 * time.Second
	}
	for ctx.Err() == nil {
		if err := w.once(ctx); err != nil && ctx.Err() == nil {
			w.Log.WithError(err).WithField("daemonset", w.Namespace+"/"+w.Name).Warn("owner watch: retrying")
		}
		select {
		case <-ctx.Done():
		case <-time.After(retry):
		}
	}
}

// Confirm asks the API once more, at exit: the uninstall is only what is
// still true then. A DaemonSet seen before that is now gone, or carries a
// deletion timestamp, was deleted; one that exists without one was not,
// whatever the watch saw before (a re-apply after kubectl delete
// --cascade=orphan, a forced replace: a new UID, which adopts the agent's
// pods). When the API does not answer the question (no server; a refusal
// once the uninstall deleted the RoleBinding), what the watch last saw
// decides; a DaemonSet never seen is never deleted.
func (w *Watcher) Confirm(ctx context.Context) bool {
	if !w.seen.Load() {
		return false
	}
	resp, err := w.do(ctx, fmt.Sprintf("%s/apis/apps/v1/namespaces/%s/daemonsets/%s", w.Server, url.PathEscape(w.Namespace), url.PathEscape(w.Name)))
	if err != nil {
		return w.deleted.Load()
	}
	var obj object
	switch err := decodeStatus(resp, &obj); {
	case errors.Is(err, errNotFound):
		w.setDeleted(true, "")
	case err == nil:
		if first, _ := w.uid.Load().(string); first != "" && obj.Metadata.UID != "" && obj.Metadata.UID != first {
			w.Log.WithFields(logrus.Fields{"daemonset": w.Namespace + "/" + w.Name, "uid": obj.Metadata.UID, "firstUID": first}).
				Info("owner daemonset was made again since the agent started: not an uninstall")
		}
		w.setDeleted(obj.Metadata.DeletionTimestamp != nil, obj.Metadata.UID)
	}
	return w.deleted.Load()
}

// object is the part of a DaemonSet the watcher reads.
type object struct {
	Metadata struct {
		Name              string  `json:"name"`
		UID               string  `json:"uid"`
		ResourceVersion   string  `json:"resourceVersion"`
		DeletionTimestamp *string `json:"deletionTimestamp"`
	} `json:"metadata"`
}

// once GETs the DaemonSet, then watches it from that resource version
// until the stream ends.
func (w *Watcher) once(ctx context.Context) error {
	base := fmt.Sprintf("%s/apis/apps/v1/namespaces/%s/daemonsets", w.Server, url.PathEscape(w.Namespace))
	resp, err := w.do(ctx, base+"/"+url.PathEscape(w.Name))
	if err != nil {
		return err
	}
	var obj object
	err = decodeStatus(resp, &obj)
	switch {
	case errors.Is(err, errNotFound):
		if w.seen.Load() {
			w.setDeleted(true, "")
			return nil // looked at again after Retry: it may be made again
		}
		return fmt.Errorf("daemonset %s/%s not found: --owner-daemonset names another object", w.Namespace, w.Name)
	case err != nil:
		return err
	}
	w.seen.Store(true)
	w.setDeleted(obj.Metadata.DeletionTimestamp != nil, obj.Metadata.UID)
	q := url.Values{"watch": {"1"}, "fieldSelector": {"metadata.name=" + w.Name}, "resourceVersion": {obj.Metadata.ResourceVersion}}
	resp, err = w.do(ctx, base+"?"+q.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return decodeStatus(resp, nil)
	}
	dec := json.NewDecoder(io.LimitReader(resp.Body, 64<<20))
	for {
		var ev struct {
			Type   string `json:"type"`
			Object object `json:"object"`
		}
		if err := dec.Decode(&ev); err != nil {
			if ctx.Err() != nil || errors.Is(err, io.EOF) {
				return nil // the server ends watches after a while: open it again
			}
			return fmt.Errorf("owner watch stream: %w", err)
		}
		if ev.Object.Metadata.Name != w.Name && ev.Type != "ERROR" {
			continue
		}
		switch ev.Type {
		case "DELETED":
			w.setDeleted(true, ev.Object.Metadata.UID)
		case "ADDED", "MODIFIED":
			w.setDeleted(ev.Object.Metadata.DeletionTimestamp != nil, ev.Object.Metadata.UID)
		case "ERROR":
			return nil // e.g. 410 Gone: GET again for a fresh version
		}
	}
}

func (w *Watcher) do(ctx context.Context, u string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	if w.TokenFile != "" {
		tok, err := os.ReadFile(w.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("service-account token: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	}
	req.Header.Set("Accept", "application/json")
	return w.Client.Do(req)
}

var errNotFound = errors.New("not found")

// decodeStatus reads a non-streaming answer into v, or the API's error.
func decodeStatus(resp *http.Response, v any) error {
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return err
	}
	switch resp.StatusCode {
	case http.StatusOK:
		if v == nil {
			return nil
		}
		return json.Unmarshal(body, v)
	case http.StatusNotFound:
		return errNotFound
	}
	var st struct {
		Message string `json:"message"`
	}
	_ = json.Unmarshal(body, &st)
	if st.Message == "" {
		st.Message = strings.TrimSpace(string(body))
	}
	return fmt.Errorf("api server: %s: %s", resp.Status, st.Message)
}
