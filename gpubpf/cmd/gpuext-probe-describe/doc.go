// Command gpuext-probe-describe writes a starting probe directory descriptor
// (NAME.json) for a BPF object, e.g. one of bpftime's GPU programs built
// unmodified against the SDK's include/bpftime: every program at a device
// attach point that passes the verifier (each refused one is named on
// stderr with its reason), a view of each map they use that a view can
// show, and the hostWrites bpftime's launchlate rule infers
// (programs.Describe).
//
//	gpuext-probe-describe [--name NAME] OBJECT.o > NAME.json
package main
