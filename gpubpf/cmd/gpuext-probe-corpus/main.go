package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpuext/gpuext/gpubpf/difftest"
	"github.com/gpuext/gpuext/gpubpf/helpers"
)

func main() {
	out := flag.String("out", "", "directory for corpus.ptx and corpus.txt")
	helperFile := flag.String("helpers", "", "helper library PTX (default: the one gpubpf/helpers embeds)")
	n := flag.Int("n", difftest.DefaultN, "number of corpus programs")
	selfCheck := flag.Bool("self-check", true, "also check the corpus in ptxinterp (helpers native) before writing")
	flag.Parse()
	if err := run(*out, *helperFile, *n, *selfCheck); err != nil {
		fmt.Fprintf(os.Stderr, "gpuext-probe-corpus: %v\n", err)
		os.Exit(1)
	}
}

func run(out, helperFile string, n int, selfCheck bool) error {
	if out == "" {
		return fmt.Errorf("--out DIR is required")
	}
	var lib string
	if helperFile != "" {
		b, err := os.ReadFile(helperFile)
		if err != nil {
			return fmt.Errorf("read helper library: %w", err)
		}
		lib = string(b)
	} else {
		l, err := helpers.PTX()
		if err != nil {
			return fmt.Errorf("helper library: %w (or pass --helpers FILE)", err)
		}
		lib = fmt.Sprintf(".version %s\n.target sm_%d\n", l.Version, l.Target) + l.PTX
	}
	cases := difftest.Corpus(n)
	module, exp, err := difftest.BuildCorpus(cases, lib)
	if err != nil {
		return err
	}
	if selfCheck {
		plain, _, err := difftest.BuildCorpus(cases, "")
		if err != nil {
			return err
		}
		bad, err := difftest.CheckCorpus(plain, exp, true)
		if err != nil {
			return fmt.Errorf("self-check: %w", err)
		}
		if len(bad) > 0 {
			return fmt.Errorf("self-check in ptxinterp: %d mismatches:\n%s", len(bad), strings.Join(bad, "\n"))
		}
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	var txt bytes.Buffer
	if err := difftest.WriteCorpus(&txt, exp); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "corpus.ptx"), []byte(module), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "corpus.txt"), txt.Bytes(), 0o644); err != nil {
		return err
	}
	fmt.Printf("wrote %d programs to %s (corpus.ptx, corpus.txt)\n", len(exp), out)
	return nil
}
