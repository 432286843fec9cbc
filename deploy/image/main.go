package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

func main() {
	var spec Spec
	flag.StringVar(&spec.BinDir, "bin", "bin", "the output of make build: "+fmt.Sprint(Binaries)+" and "+DevrtLibrary)
	flag.StringVar(&spec.Name, "name", "", "image name REPOSITORY:TAG (required), e.g. localhost/gpuext:v0.1.0")
	out := flag.String("out", "", "the OCI layout archive to write (required), e.g. bin/gpuext-image.tar")
	flag.StringVar(&spec.Version, "version", "", "label org.opencontainers.image.version (e.g. git describe)")
	flag.StringVar(&spec.Revision, "revision", "", "label org.opencontainers.image.revision (the commit)")
	flag.StringVar(&spec.Source, "source", "", "label org.opencontainers.image.source (the repository URL)")
	created := flag.String("created", "", "creation time, RFC 3339 (default: $SOURCE_DATE_EPOCH, else 1970-01-01T00:00:00Z)")
	flag.StringVar(&spec.Arch, "arch", "", "GOARCH of the image (default: the binaries')")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: go run ./deploy/image --name REPOSITORY:TAG --out FILE [flags]\n\n"+
			"Builds the gpuext agent's OCI image (no base image) from make build's output, reproducibly.\n"+
			"Load it with: ctr -n k8s.io images import FILE\n\nFlags:\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if err := run(spec, *out, *created); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(spec Spec, out, created string) error {
	if spec.Name == "" || out == "" {
		flag.Usage()
		return fmt.Errorf("--name and --out are required")
	}
	var err error
	if spec.Created, err = createdTime(created, os.Getenv("SOURCE_DATE_EPOCH")); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	res, err := Build(spec, tmp)
	if err == nil {
		err = tmp.Close()
	} else {
		tmp.Close()
	}
	if err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return err
	}
	fmt.Printf("%s (linux/%s) manifest %s -> %s\n", res.Name, res.Arch, res.Manifest, out)
	return nil
}

// createdTime is --created (RFC 3339), else SOURCE_DATE_EPOCH (seconds),
// else the Unix epoch.
func createdTime(flagValue, sourceDateEpoch string) (time.Time, error) {
	switch {
	case flagValue != "":
		t, err := time.Parse(time.RFC3339, flagValue)
		if err != nil {
			return time.Time{}, fmt.Errorf("--created %q: want RFC 3339: %w", flagValue, err)
		}
		return t, nil
	case sourceDateEpoch != "":
		n, err := strconv.ParseInt(sourceDateEpoch, 10, 64)
		if err != nil || n < 0 {
			return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: want seconds since the epoch", sourceDateEpoch)
		}
		return time.Unix(n, 0), nil
	}
	return time.Unix(0, 0), nil
}
