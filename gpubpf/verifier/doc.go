// Package verifier is the static checker of device probes: eBPF programs
// in sections gpuext/kernel_entry and gpuext/kernel_exit that the pipeline
// translates to PTX and that every thread of a GPU kernel runs
// (docs/device-probes.md). It owns the decision whether a program is safe
// to run there; it never loads anything into the kernel.
//
// VerifyCollection checks every device program of an ELF collection;
// Verify checks one program. A rejection is an *Error naming the program,
// the raw instruction index (as llvm-objdump numbers them), the source
// file:line and text from BTF line info, and why; it wraps one of the Err*
// kinds.
//
// # How
//
// Structural checks first, on the control-flow graph: jumps stay inside the
// program and land on instruction starts, no instruction falls off the end,
// every instruction is reachable and can reach an exit.
//
// Then a path-sensitive abstract interpretation from instruction 0: each
// register and 8-byte stack slot holds a kind (scalar, ctx, stack, map,
// map value, map value or null) and, for scalars (and the variable offset
// of map value pointers), unsigned and signed ranges plus known bits.
// Conditional jumps narrow the ranges on each side and drop impossible
// sides, copies of a scalar share what is learnt. Loops are unrolled: a
// back-edge is allowed when every path through it ends, which the
// exploration shows by running out of paths within a budget of 200,000
// stepped instructions. Paths meeting at a jump target are pruned when a
// finished path covers them (ignoring registers a liveness pass finds dead
// there), and joined with one when they differ only in ranges that are not
// exact constants (a running sum or maximum; a loop counter stays exact,
// so iterations stay apart); a path that comes back around a loop to a
// state it already had is rejected at once. Running out of budget rejects
// the most-taken back-edge as "unbounded loop".
//
// # Rules
//
//   - Stack: 512 bytes, r10-relative, constant offsets, natural alignment;
//     reading a byte never written is rejected. An 8-byte store of a
//     register spills it; the fill gets it back, pointers included.
//   - ctx (r1 at entry) is read-only; loads are aligned and inside one field
//     of struct gpuext_probe_ctx.
//   - A map pointer (ld_imm64 of a map) is only a helper argument. A
//     map_lookup_elem result must be compared against 0 before use; map
//     value accesses stay inside value_size, aligned (the GPU faults on a
//     misaligned access), variable offsets only when the range analysis
//     bounds them. Pointer arithmetic is pointer +/- scalar only; pointers
//     compare only against 0 (the null check); no pointer is stored into a
//     map value or handed to a helper as data (a leak: the host reads maps)
//     and r0 is a scalar at exit.
//   - Maps: Array, Hash, PerCPUArray (per-warp on the device) and RingBuf,
//     with a layout abi.Layout accepts; ring buffers only for
//     ringbuf_output, delete only on hashes. Global variables are direct
//     pointers into the value of a single-entry array (.bss, .data,
//     .rodata); .rodata (BPF_F_RDONLY_PROG) is never written. Only maps a
//     program references are checked.
//   - Helpers: the attach point's whitelist (abi.HelperNames), with
//     argument checks; kernel helpers that need the host (trace_printk,
//     perf_event_output, probe_read*, get_current_*) are named as such.
//     BPF-to-BPF calls and kfuncs are rejected.
//
// # SIMT
//
// Every thread runs the probe, so side effects (map_update_elem,
// map_delete_elem, ringbuf_output, atomics, stores into map values) must
// not be repeated or disagreed on by the lanes of a warp. Each value
// carries a divergent bit: thread_idx, lane_id, thread_linear_id, ktime
// and globaltimer are divergent, and so is anything computed from them;
// constants, ctx fields, block/grid ids and dims, warp_id and the SM id are
// uniform. A load from a map value is uniform only when its address is and
// no device program of the collection writes that map (another warp may
// change it between the loads of two lanes); map_lookup_elem on a hash
// that is written is divergent for the same reason.
//
// A branch on a divergent value makes control divergent until the branch's
// immediate post-dominator, where the lanes reconverge; there, whatever the
// region may have written becomes divergent. The exception is a leader
// guard: on the side of a branch where lane_id() (one lane per warp),
// thread_linear_id() (one thread per block), or each of thread_idx(0), (1)
// and (2) (one thread per block) is proven 0 (== 0, != 0 return, > 0
// return ...), exactly one thread runs and any side effect is allowed. A
// value stays a leader value through copies, spills and clang's
// zero-extension of a u32, not through other arithmetic. Outside a leader guard a side effect must be
// warp-uniform (uniform control and operands) and idempotent: a plain
// store or map_update_elem/map_delete_elem is; atomics and ringbuf_output
// are not (32 lanes would apply them 32 times). Uniform means uniform
// within a warp: a store of the SM id or warp id by every lane is accepted,
// and different warps then race to write their own value (last writer
// wins).
//
// # Not done
//
// Memory-access attach points (probes on the kernel's loads and stores)
// are optional in the design and not implemented: only kernel_entry and
// kernel_exit verify. Variable offsets into the stack or ctx, pointer
// subtraction, signed division results and BPF-to-BPF calls are rejected
// or left unknown rather than analysed.
package verifier
