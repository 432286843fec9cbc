package admission

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// decisionKeyFile, in the state dir (root only, 0600), is the key that
// authenticates decisions (Decision.MAC): every core of the host, the
// agent's and a restarted agent's, shares it; the state dir lives as long
// as the containers whose decisions it signs.
const decisionKeyFile = ".decision.key"

const decisionKeySize = 32

// loadDecisionKey reads the state dir's decision key, making it first.
func loadDecisionKey(stateDir string) ([]byte, error) {
	path := filepath.Join(stateDir, decisionKeyFile)
	for range 2 {
		f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
		if err == nil {
			defer f.Close()
			fi, err := f.Stat()
			if err != nil {
				return nil, fmt.Errorf("decision key: %w", err)
			}
			if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o077 != 0 {
				return nil, fmt.Errorf("decision key %s: want a regular file of mode 0600, have %v", path, fi.Mode())
			}
			key := make([]byte, decisionKeySize)
			if _, err := io.ReadFull(f, key); err != nil {
				return nil, fmt.Errorf("decision key %s: %w", path, err)
			}
			return key, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("decision key: %w", err)
		}
		key := make([]byte, decisionKeySize)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("decision key: %w", err)
		}
		// written whole under a temp name, linked in only if none is there
		// (two cores starting at once agree on the first)
		tmp, err := os.CreateTemp(stateDir, decisionKeyFile+".tmp-*")
		if err != nil {
			return nil, fmt.Errorf("decision key: %w", err)
		}
		_, werr := tmp.Write(key)
		cerr := tmp.Close()
		if err := errors.Join(werr, cerr); err != nil {
			os.Remove(tmp.Name())
			return nil, fmt.Errorf("decision key: %w", err)
		}
		lerr := os.Link(tmp.Name(), path)
		os.Remove(tmp.Name())
		if lerr != nil && !errors.Is(lerr, fs.ErrExist) {
			return nil, fmt.Errorf("decision key: %w", lerr)
		}
	}
	return nil, fmt.Errorf("decision key %s: could not be made", path)
}

// decisionMAC authenticates d for container id.
func decisionMAC(key []byte, id string, d Decision) string {
	m := hmac.New(sha256.New, key)
	for _, f := range []string{id, strconv.FormatUint(uint64(d.Tenant), 10), d.TenantKey, d.Policy.Name, d.ConfigDigest,
		strconv.FormatBool(d.FailedOpen), strconv.FormatBool(d.Skipped)} {
		m.Write([]byte(strconv.Itoa(len(f))))
		m.Write([]byte{':'})
		m.Write([]byte(f))
	}
	return hex.EncodeToString(m.Sum(nil))
}

// verifyDecision says whether d, from a decision annotation, is one this
// host's agent made for container id.
func (c *Core) verifyDecision(id string, d Decision) error {
	if d.MAC == "" {
		return fmt.Errorf("%w: annotation %s of container %q has no MAC (tenant key %q)", ErrDecisionForged,
			AnnotationDecision, id, d.TenantKey)
	}
	if !hmac.Equal([]byte(d.MAC), []byte(decisionMAC(c.decisionKey, id, d))) {
		return fmt.Errorf("%w: annotation %s of container %q does not verify (tenant key %q): forged, or copied from another container",
			ErrDecisionForged, AnnotationDecision, id, d.TenantKey)
	}
	return nil
}
