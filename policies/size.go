package policies

import "github.com/gpuext/gpuext/policies/grammar"

// ParseSize parses a byte size (grammar.ParseSize): "0", "1024", "512MiB",
// "8GiB", "10GB". Errors wrap ErrBadSize.
func ParseSize(s string) (uint64, error) { return grammar.ParseSize(s) }

// FormatSize writes n in the largest binary unit that divides it exactly
// (grammar.FormatSize); ParseSize(FormatSize(n)) == n.
func FormatSize(n uint64) string { return grammar.FormatSize(n) }
