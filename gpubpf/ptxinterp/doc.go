// Package ptxinterp is a reference interpreter for the PTX that
// gpubpf/ptx emits. It parses the text (not the translator's Go
// structures), so a translator bug in the text shows up here, and executes
// it one thread at a time: global symbols with their initialisers,
// per-call .local arrays, caller-allocated buffers, generic addresses and
// cvta between the windows, .param passing, special registers set per
// call (ThreadRegs), and PTX's operand-size rules (a register must have the
// instruction type's size, except the relaxed rules of ld, st and cvt).
//
// The helper library (abi.FuncMapLookup, FuncMapUpdate, FuncMapDelete,
// FuncRingbufOut), when the module only declares it, is implemented
// natively with the device map operations of gpubpf/devmap (Image.Lookup,
// Update, Delete, RingbufOutput): that code is the executable
// specification the CUDA helper library must match. The map descriptor is
// read from the map symbol in memory, as the device helpers do.
//
// Anything outside the subset the translator emits is an error naming the
// line; so are out-of-bounds or null accesses, integer division by zero
// (which PTX leaves undefined and the translator must guard), undeclared
// registers and a run that exceeds the step budget.
package ptxinterp
