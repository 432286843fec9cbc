package main

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/gpuext/gpuext/gpubpf/programs"
	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/internal/config"
)

// ProbeVerdicts is one probe of the catalog as `gpuextctl probes catalog`
// shows it: the programs that run and those refused, with why.
type ProbeVerdicts struct {
	Name    string             `json:"name"`
	Source  string             `json:"source"`
	Runs    []string           `json:"runs"`
	Refused []programs.Refusal `json:"refused,omitempty"`
}

// probesCatalogCmd is `gpuextctl probes catalog`: every probe a container
// may select (built in and the config's probeDir), per probe the programs
// that run and each refused one with its reason.
func probesCatalogCmd(cfg config.Config, args []string, out io.Writer) error {
	fset := flag.NewFlagSet("probes catalog", flag.ContinueOnError)
	asJSON := fset.Bool("json", false, "print JSON")
	if err := parseFlags(fset, args, out); err != nil {
		return err
	}
	if fset.NArg() != 0 {
		return fmt.Errorf("usage: gpuextctl probes catalog [--json]")
	}
	cat, err := admission.ProbeCatalog(cfg)
	if err != nil {
		return err
	}
	rows := probeVerdicts(cat, cat.Names())
	if *asJSON {
		return writeJSON(out, rows)
	}
	for _, r := range rows {
		for _, line := range r.lines() {
			fmt.Fprintln(out, line)
		}
	}
	return nil
}

func probeVerdicts(cat *programs.Catalog, names []string) []ProbeVerdicts {
	rows := []ProbeVerdicts{}
	for _, name := range names {
		p, ok := cat.Get(name)
		if !ok {
			continue
		}
		src := p.Source
		if strings.HasPrefix(src, "catalog/") {
			src = "built in"
		}
		rows = append(rows, ProbeVerdicts{Name: name, Source: src, Runs: p.Programs, Refused: p.Refused})
	}
	return rows
}

// lines: "NAME: runs A, B (SOURCE)", then one "NAME: refused PROG
// (section S): REASON" per refused program.
func (r ProbeVerdicts) lines() []string {
	out := []string{fmt.Sprintf("%s: runs %s (%s)", r.Name, strings.Join(r.Runs, ", "), r.Source)}
	for _, f := range r.Refused {
		out = append(out, fmt.Sprintf("%s: refused %s (section %s): %s", r.Name, f.Program, f.Section, f.Reason))
	}
	return out
}
