// Package devrt is the device runtime: the library injected into a
// container's CUDA processes. Today it holds the placeholder library
// (placeholder/) that stands at the final path of the injection contract
// (docs/injection.md) until the real interposer lands.
package devrt
