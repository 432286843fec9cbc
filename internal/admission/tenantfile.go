package admission

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/devrt/tenantcfg"
	"github.com/gpuext/gpuext/gpubpf/compile"
	"github.com/gpuext/gpuext/lib/strictjson"
	"github.com/gpuext/gpuext/lib/tenantfs"
)

// writeTenantDir writes tenant id's settings.bin and config.json (f with
// the id) and its probes/ directory (the compiled probe module, or none
// when probes is nil).
func (c *Core) writeTenantDir(id bpf.TenantID, f tenantcfg.File, probes *compile.Bundle) (string, error) {
	dir := c.tenantDir(id)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", fmt.Errorf("tenant dir: %w", err)
		}
	}
	probesDir := filepath.Join(dir, TenantProbesDir)
	if probes != nil {
		if err := probes.WriteDir(probesDir); err != nil {
			return "", fmt.Errorf("tenant probes: %w", err)
		}
	} else if err := compile.RemoveDir(probesDir); err != nil {
		return "", fmt.Errorf("tenant probes: %w", err)
	}
	f.TenantID = uint32(id)
	if err := tenantcfg.WriteFiles(dir, f); err != nil {
		return "", err
	}
	return dir, nil
}

// MaxTenantFile bounds what ReadTenantFile reads of a config.json.
const MaxTenantFile = 64 << 10

// ReadTenantFile reads tenant id's config.json under stateDir (written by
// admission; read without following a link, bounded, strictly decoded).
func ReadTenantFile(stateDir string, id uint64) (tenantcfg.File, error) {
	var tf tenantcfg.File
	d, err := tenantfs.OpenDir(TenantsRoot(stateDir), filepath.Base(TenantDir(stateDir, id)))
	if err != nil {
		return tf, err
	}
	defer d.Close()
	data, err := d.ReadFile(TenantConfigFile, MaxTenantFile)
	if err != nil {
		return tf, err
	}
	if err := strictjson.Decode(data, &tf); err != nil {
		return tf, fmt.Errorf("%s: %w", filepath.Join(d.Path(), TenantConfigFile), err)
	}
	return tf, nil
}
