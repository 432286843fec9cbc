package main

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/gpuext/gpuext/gpubpf/compile"
	"github.com/gpuext/gpuext/gpubpf/programs"
	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/internal/config"
	"github.com/gpuext/gpuext/policies"
)

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// probesCompileCmd is `gpuextctl probes compile`: verify and translate a
// probe set into the files admission puts in a tenant's probes/ directory,
// without a container (to check a set, or to carry to a GPU host).
func probesCompileCmd(cfg config.Config, args []string, out io.Writer) error {
	fset := flag.NewFlagSet("probes compile", flag.ContinueOnError)
	dir := fset.String("out", "", "directory to write module.ptx, module.conf and manifest.json into (required)")
	var kernels stringList
	fset.Var(&kernels, "kernel", "probe only this .entry (mangled name); repeatable; none = every kernel; narrows a probe's catalog kernels as probe-kernels.gpuext.io does")
	fset.Usage = func() {
		fmt.Fprintln(out, "Usage: gpuextctl probes compile --out DIR [--kernel NAME]... PROBE[,PROBE...]")
		fmt.Fprintln(out, "\nVerifies and translates catalog probes (gpubpf/programs) and those of the config's")
		fmt.Fprintln(out, "probeDir (gpuextctl --config FILE) into a probe module.")
		fset.PrintDefaults()
	}
	if err := parseFlags(fset, args, out); err != nil {
		return err
	}
	if *dir == "" || fset.NArg() != 1 {
		fset.Usage()
		return fmt.Errorf("probes compile: want --out DIR and one probe list, got %d arguments", fset.NArg())
	}
	var names []string
	for _, n := range strings.Split(fset.Arg(0), ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	// the rules of probe-kernels.gpuext.io: a name is written into
	// module.conf as a line, so nothing but a PTX identifier passes
	if _, err := policies.ParseProbeKernels(strings.Join(kernels, ",")); err != nil {
		return fmt.Errorf("probes compile: --kernel: %w", err)
	}
	// The bundle admission makes for a container that selects these
	// probes and probe-kernels.gpuext.io=KERNEL,...
	compileKernels, cat := compile.CompileKernels, programs.Builtin()
	if cfg.ProbeDir != "" {
		var err error
		if cat, err = admission.ProbeCatalog(cfg); err != nil {
			return fmt.Errorf("probes compile: %w", err)
		}
		compileKernels = compile.NewCompiler(cat, nil).CompileKernels
	}
	b, err := compileKernels(names, kernels)
	if err != nil {
		return fmt.Errorf("probes compile %s: %w", fset.Arg(0), err)
	}
	if err := b.WriteDir(*dir); err != nil {
		return err
	}
	fmt.Fprintf(out, "wrote %s: probes %s, %d programs, %d maps, PTX ISA >= %s, sm_%d+, %d bytes of PTX\n", *dir,
		strings.Join(b.Probes, ","), len(b.Manifest.Programs), len(b.Manifest.Maps), b.Manifest.MinPTX, b.Manifest.MinTarget, len(b.PTX))
	for _, r := range probeVerdicts(cat, b.Probes) {
		for _, line := range r.lines() {
			fmt.Fprintln(out, line)
		}
	}
	return nil
}
