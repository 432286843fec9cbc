package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpuext/gpuext/gpubpf/programs"
)

func main() {
	name := flag.String("name", "", "probe name (default: the object's file name without .bpf.o/.o, _ as -)")
	retarget := flag.Bool("retarget", false, "run bpftime programs (kprobe/KERNEL, kretprobe/KERNEL) in --kernels, or in every kernel, instead of the kernel their sections name")
	kernels := flag.String("kernels", "", "comma-separated .entry names the probe is limited to (default: every kernel, or the sections' kernels without --retarget)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: gpuext-probe-describe [--name NAME] [--retarget] [--kernels K,...] OBJECT.o > NAME.json\n\n"+
			"Prints a probe directory descriptor for a BPF object: its device programs, a view per map they\n"+
			"use, and a launch-time hostWrite for an element a host uprobe of the object sets from the clock\n"+
			"and the device only reads (bpftime's launchlate; docs/write-a-probe.md). Name the view fields\n"+
			"and check the hostWrites before deploying it.\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	obj := flag.Arg(0)
	n := *name
	if n == "" {
		n = strings.ReplaceAll(strings.TrimSuffix(strings.TrimSuffix(filepath.Base(obj), ".o"), ".bpf"), "_", "-")
	}
	data, err := os.ReadFile(obj)
	if err == nil {
		var p programs.Probe
		p, err = programs.Describe(n, filepath.Base(obj), data)
		if err == nil {
			p.Retarget = *retarget
			if *kernels != "" {
				p.Kernels = strings.Split(*kernels, ",")
			}
			for _, r := range p.Refused {
				fmt.Fprintf(os.Stderr, "gpuext-probe-describe: %s: %s\n", obj, r)
			}
			os.Stdout.Write(programs.DescriptorJSON(p))
			return
		}
	}
	fmt.Fprintf(os.Stderr, "gpuext-probe-describe: %s: %v\n", obj, err)
	os.Exit(1)
}
