package hook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpuext/gpuext/lib/atomicfile"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpuext/gpuext/internal/agentapi"
)

// Bundle is a bundle's config.json: decoded for reading, raw for editing.
// Edits go through the raw form so fields this module does not know (newer
// runtime-spec versions, runtime extensions) survive byte for byte.
type Bundle struct {
	Dir  string
	Spec specs.Spec
	raw  map[string]json.RawMessage
}

// ConfigFile is the bundle's config.json path.
func (b *Bundle) ConfigFile() string { return filepath.Join(b.Dir, "config.json") }

// LoadBundle reads dir/config.json.
func LoadBundle(dir string) (*Bundle, error) {
	data, err := readFileLimit(filepath.Join(dir, "config.json"), MaxConfigSize)
	if err != nil {
		return nil, fmt.Errorf("bundle %s: %w", dir, err)
	}
	return ParseBundle(dir, data)
}

// ParseBundle decodes a config.json's bytes.
func ParseBundle(dir string, data []byte) (*Bundle, error) {
	b := &Bundle{Dir: dir}
	if err := json.Unmarshal(data, &b.raw); err != nil {
		return nil, fmt.Errorf("bundle %s: config.json: %w", dir, err)
	}
	if b.raw == nil {
		return nil, fmt.Errorf("bundle %s: config.json is not a JSON object", dir)
	}
	if err := json.Unmarshal(data, &b.Spec); err != nil {
		return nil, fmt.Errorf("bundle %s: config.json: %w", dir, err)
	}
	return b, nil
}

func readFileLimit(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, limit)
	}
	return data, nil
}

// Marshal returns the edited config.json.
func (b *Bundle) Marshal() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(b.raw); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Write replaces config.json atomically: a temp file in the bundle dir,
// fsync, rename. The file mode is kept.
func (b *Bundle) Write() error {
	data, err := b.Marshal()
	if err != nil {
		return fmt.Errorf("encode config.json: %w", err)
	}
	return atomicfile.WriteSync(b.ConfigFile(), data, 0o644)
}

// rawObject decodes a member of an object as an object (empty when absent).
func rawObject(m map[string]json.RawMessage, key string) (map[string]json.RawMessage, error) {
	out := map[string]json.RawMessage{}
	if v, ok := m[key]; ok && !isNull(v) {
		if err := json.Unmarshal(v, &out); err != nil {
			return nil, fmt.Errorf("config.json %s: %w", key, err)
		}
	}
	return out, nil
}

// rawArray decodes a member of an object as an array (empty when absent).
func rawArray(m map[string]json.RawMessage, key string) ([]json.RawMessage, error) {
	var out []json.RawMessage
	if v, ok := m[key]; ok && !isNull(v) {
		if err := json.Unmarshal(v, &out); err != nil {
			return nil, fmt.Errorf("config.json %s: %w", key, err)
		}
	}
	return out, nil
}

func isNull(v json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(v), []byte("null")) }

func mustRaw(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only plain structs, maps and slices are marshalled here
	}
	return b
}

// SetEnv sets process.env entries (KEY=VALUE), replacing every existing
// entry of the same key. Values are final: LD_PRELOAD arrives already
// appended to the container's own value by the admission core.
func (b *Bundle) SetEnv(env []agentapi.EnvVar) error {
	if len(env) == 0 {
		return nil
	}
	proc, err := rawObject(b.raw, "process")
	if err != nil {
		return err
	}
	var cur []string
	if v, ok := proc["env"]; ok && !isNull(v) {
		if err := json.Unmarshal(v, &cur); err != nil {
			return fmt.Errorf("config.json process.env: %w", err)
		}
	}
	cur = setEnv(cur, env)
	proc["env"] = mustRaw(cur)
	b.raw["process"] = mustRaw(proc)
	if b.Spec.Process == nil {
		b.Spec.Process = &specs.Process{}
	}
	b.Spec.Process.Env = cur
	return nil
}

func setEnv(cur []string, env []agentapi.EnvVar) []string {
	for _, e := range env {
		kv := e.Key + "=" + e.Value
		replaced := false
		out := cur[:0:0]
		for _, c := range cur {
			if k, _, _ := strings.Cut(c, "="); k == e.Key {
				if !replaced {
					out = append(out, kv)
					replaced = true
				}
				continue
			}
			out = append(out, c)
		}
		if !replaced {
			out = append(out, kv)
		}
		cur = out
	}
	return cur
}

// AddMounts adds bind mounts; a mount whose destination is already in the
// spec replaces that entry (so a re-run never duplicates a mount).
func (b *Bundle) AddMounts(mounts []agentapi.Mount) error {
	if len(mounts) == 0 {
		return nil
	}
	cur, err := rawArray(b.raw, "mounts")
	if err != nil {
		return err
	}
	for _, m := range mounts {
		sm := specs.Mount{Destination: m.Destination, Type: "bind", Source: m.Source, Options: m.Options}
		raw := mustRaw(sm)
		idx := -1
		for i, c := range cur {
			var have struct {
				Destination string `json:"destination"`
			}
			if json.Unmarshal(c, &have) == nil && filepath.Clean(have.Destination) == filepath.Clean(m.Destination) {
				idx = i
				break
			}
		}
		if idx >= 0 {
			cur[idx] = raw
		} else {
			cur = append(cur, raw)
		}
		b.Spec.Mounts = slices.DeleteFunc(b.Spec.Mounts, func(x specs.Mount) bool {
			return filepath.Clean(x.Destination) == filepath.Clean(m.Destination)
		})
		b.Spec.Mounts = append(b.Spec.Mounts, sm)
	}
	b.raw["mounts"] = mustRaw(cur)
	return nil
}

// AddHook appends hook to hooks.<stage> unless an entry with the same path
// and args is there already.
func (b *Bundle) AddHook(stage Stage, hook specs.Hook) error {
	hooks, err := rawObject(b.raw, "hooks")
	if err != nil {
		return err
	}
	cur, err := rawArray(hooks, string(stage))
	if err != nil {
		return err
	}
	for _, c := range cur {
		var have specs.Hook
		if json.Unmarshal(c, &have) == nil && have.Path == hook.Path && slices.Equal(have.Args, hook.Args) {
			return nil
		}
	}
	hooks[string(stage)] = mustRaw(append(cur, mustRaw(hook)))
	b.raw["hooks"] = mustRaw(hooks)
	if b.Spec.Hooks == nil {
		b.Spec.Hooks = &specs.Hooks{}
	}
	switch stage {
	case StagePrestart:
		b.Spec.Hooks.Prestart = append(b.Spec.Hooks.Prestart, hook) //nolint:staticcheck // prestart is deprecated but still run by runc
	case StageCreateRuntime:
		b.Spec.Hooks.CreateRuntime = append(b.Spec.Hooks.CreateRuntime, hook)
	case StageCreateContainer:
		b.Spec.Hooks.CreateContainer = append(b.Spec.Hooks.CreateContainer, hook)
	case StagePoststop:
		b.Spec.Hooks.Poststop = append(b.Spec.Hooks.Poststop, hook)
	}
	return nil
}

// SetAnnotations sets annotations (existing keys are overwritten).
func (b *Bundle) SetAnnotations(kv map[string]string) error {
	if len(kv) == 0 {
		return nil
	}
	cur := map[string]string{}
	if v, ok := b.raw["annotations"]; ok && !isNull(v) {
		if err := json.Unmarshal(v, &cur); err != nil {
			return fmt.Errorf("config.json annotations: %w", err)
		}
	}
	for k, v := range kv {
		cur[k] = v
	}
	b.raw["annotations"] = mustRaw(cur)
	b.Spec.Annotations = cur
	return nil
}
