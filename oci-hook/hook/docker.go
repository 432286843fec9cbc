package hook

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
)

// DockerContainer is what the wrapper reads of dockerd's per-container
// config.v2.json: the name and the labels. The wrapper runs while dockerd
// waits for `runc create`, so it must never ask dockerd (that deadlocks).
type DockerContainer struct {
	Name   string
	Labels map[string]string
}

// ReadDockerContainer reads <dataRoot>/containers/<id>/config.v2.json.
// found is false when the file does not exist (podman, plain runc).
func ReadDockerContainer(dataRoot, id string) (c DockerContainer, found bool, err error) {
	if dataRoot == "" || id == "" || strings.ContainsAny(id, `/\`) || id == "." || id == ".." {
		return c, false, nil
	}
	path := filepath.Join(dataRoot, "containers", id, "config.v2.json")
	data, err := readFileLimit(path, MaxConfigSize)
	if errors.Is(err, fs.ErrNotExist) {
		return c, false, nil
	}
	if err != nil {
		return c, false, fmt.Errorf("docker container config: %w", err)
	}
	var v struct {
		Name   string
		Config struct {
			Labels map[string]string
		}
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return c, false, fmt.Errorf("docker container config %s: %w", path, err)
	}
	return DockerContainer{Name: strings.TrimPrefix(v.Name, "/"), Labels: v.Config.Labels}, true, nil
}
