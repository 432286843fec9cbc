// Package grammar is the label/annotation grammar of gpuext at its lowest:
// the gpuext.io keys, how a key is told to be one of them (look-alike
// characters folded, so that a key that only looks like one is an error
// and never ignored), the sizes their values hold, and how an error quotes
// what a tenant wrote. Package policies builds selection on it; the OCI
// hook and the runc wrapper recognise keys with it without importing the
// catalog. It imports nothing of the policy model.
package grammar
