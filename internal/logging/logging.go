// Package logging sets up logrus for the gpuext binaries: JSON lines with
// fields, to a file (hooks and NRI plugins have no useful stdout).
package logging

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/sirupsen/logrus"
)

// Setup returns a logger writing JSON lines to file (created with its
// directory), or to stderr when file is empty. component is added to every line.
func Setup(file, level, component string) (*logrus.Entry, io.Closer, error) {
	lg := logrus.New()
	lg.SetFormatter(&logrus.JSONFormatter{})
	lvl, err := logrus.ParseLevel(level)
	if err != nil {
		return nil, nil, fmt.Errorf("log level %q: %w", level, err)
	}
	lg.SetLevel(lvl)
	var closer io.Closer = io.NopCloser(nil)
	if file == "" {
		lg.SetOutput(os.Stderr)
	} else {
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			return nil, nil, fmt.Errorf("log file %q: %w", file, err)
		}
		f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
		if err != nil {
			return nil, nil, fmt.Errorf("log file %q: %w", file, err)
		}
		lg.SetOutput(f)
		closer = f
	}
	return lg.WithField("component", component), closer, nil
}
