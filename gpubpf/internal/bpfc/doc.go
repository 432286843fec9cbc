// Package bpfc compiles device-probe C sources with clang for tests: the
// one place that knows the clang command line of the probe pipeline
// (clang -target bpf -O2 -g). It is a test helper: every function takes a
// testing.TB and fails or skips the test instead of returning an error.
//
// When clang is missing the test is skipped, except when CI=true: then it
// fails, so CI never passes by skipping (test/lab/install-deps.sh installs
// clang).
package bpfc
