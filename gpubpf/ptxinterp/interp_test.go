package ptxinterp_test

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/gpubpf/ptxinterp"
)

const head = ".version 7.0\n.target sm_70\n.address_size 64\n"

func fn(body string) string {
	return head + ".visible .func (.param .b64 r) f(.param .b64 a)\n{\n" + body + "\n}\n"
}

func TestErrorsNameTheLine(t *testing.T) {
	for name, tc := range map[string]struct{ src, want string }{
		"unknown instruction": {fn(".reg .b64 %x;\nld.param.u64 %x, [a];\nfma.rn.f32 %x, %x, %x, %x;\nret;"), "line 8: unknown instruction"},
		"undeclared register": {fn(".reg .b64 %x;\nmov.u64 %y, 1;\nret;"), "line 7"},
		"size mismatch":       {fn(".reg .b32 %x;\nadd.u64 %x, %x, 1;\nret;"), "is 32 bits"},
		"division by zero":    {fn(".reg .b64 %x;\nmov.u64 %x, 0;\ndiv.u64 %x, %x, %x;\nret;"), "division by zero"},
		"missing cvta":        {fn(".local .align 8 .b8 s[8];\n.reg .b64 %x;\nmov.u64 %x, s;\nst.u64 [%x], %x;\nret;"), "not mapped"},
		"unknown label":       {fn("bra $nowhere;\nret;"), "unknown label"},
	} {
		m, err := ptxinterp.Load(tc.src)
		if err == nil {
			_, err = m.Call("f", ptxinterp.Thread0(), 0)
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", name, err, tc.want)
		}
	}
}

func TestStepLimit(t *testing.T) {
	m, err := ptxinterp.Load(fn("$top:\nbra $top;\nret;"))
	if err != nil {
		t.Fatal(err)
	}
	m.StepLimit = 1000
	if _, err := m.Call("f", ptxinterp.Thread0(), 0); !errors.Is(err, ptxinterp.ErrStepLimit) {
		t.Fatalf("endless loop: %v, want ErrStepLimit", err)
	}
}

func TestSpecialRegistersAndMemory(t *testing.T) {
	src := fn(`.reg .b64 %a, %v;
.reg .b32 %w;
ld.param.u64 %a, [a];
mov.u32 %w, %ctaid.y;
cvt.u64.u32 %v, %w;
st.u32 [%a+4], %v;
ld.s8 %v, [%a];
st.param.b64 [r], %v;
ret;`)
	m, err := ptxinterp.Load(src)
	if err != nil {
		t.Fatal(err)
	}
	buf := m.Alloc([]byte{0xfe, 0, 0, 0, 0, 0, 0, 0})
	th := ptxinterp.Thread0()
	th.Ctaid[1] = 77
	r, err := m.Call("f", th, buf)
	if err != nil {
		t.Fatal(err)
	}
	if int64(r) != -2 {
		t.Errorf("ld.s8 of 0xfe = %d, want -2", int64(r))
	}
	b, _ := m.Read(buf, 8)
	if binary.LittleEndian.Uint32(b[4:]) != 77 {
		t.Errorf("stored %%ctaid.y = %d, want 77", binary.LittleEndian.Uint32(b[4:]))
	}
}

// GlobaltimerStep: each read of %globaltimer returns the time, then moves it on.
func TestGlobaltimerStep(t *testing.T) {
	m, err := ptxinterp.Load(fn(`.reg .b64 %a, %b;
mov.u64 %a, %globaltimer;
mov.u64 %b, %globaltimer;
sub.u64 %a, %b, %a;
st.param.b64 [r], %a;
ret;`))
	if err != nil {
		t.Fatal(err)
	}
	th := ptxinterp.Thread0()
	th.Globaltimer, th.GlobaltimerStep = 1000, 25
	if r, err := m.Call("f", th, 0); err != nil || r != 25 {
		t.Errorf("two reads %d apart (%v), want 25", r, err)
	}
	th.GlobaltimerStep = 0
	if r, _ := m.Call("f", th, 0); r != 0 {
		t.Errorf("a standing timer moved by %d", r)
	}
}

// mul.wide.u32 / mad.wide.u32: 32-bit sources, a 64-bit result that keeps
// the product's high bits (the translator's per-warp slot offset).
func TestWideMultiply(t *testing.T) {
	src := fn(`.reg .b64 %a, %v;
.reg .b32 %x;
ld.param.u64 %a, [a];
mov.u32 %x, 4000000000;
mul.wide.u32 %v, %x, 3;
mad.wide.u32 %v, %x, 2, %v;
add.u64 %v, %v, %a;
st.param.b64 [r], %v;
ret;`)
	m, err := ptxinterp.Load(src)
	if err != nil {
		t.Fatal(err)
	}
	r, err := m.Call("f", ptxinterp.Thread0(), 7)
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(4000000000)*5 + 7; r != want {
		t.Errorf("4e9*3 + 4e9*2 + 7 = %d, want %d (the product's high bits kept)", r, want)
	}
	m, err = ptxinterp.Load(fn(".reg .b64 %v;\n.reg .b32 %x;\nmov.u32 %x, 1;\nmul.wide.s32 %v, %x, 3;\nst.param.b64 [r], %v;\nret;"))
	if err == nil {
		_, err = m.Call("f", ptxinterp.Thread0(), 0)
	}
	if err == nil || !strings.Contains(err.Error(), "wide.u32") {
		t.Errorf("mul.wide.s32: %v, want an error naming the supported form", err)
	}
}

// The warp instructions of the translator's one-atomic-a-warp adds, as a
// thread alone in its warp sees them (lane 5 here): the active mask, a
// match and %lanemask_lt hold its own lane, popc/brev/bfind compute, a
// shuffle from its own lane is its value; a member mask without the
// thread's lane, or a shuffle from another lane, is an error.
func TestWarpInstructionsOfOneThread(t *testing.T) {
	src := fn(`.reg .b64 %a, %v;
.reg .b32 %m, %g, %l, %n, %x;
ld.param.u64 %a, [a];
activemask.b32 %m;
match.any.sync.b64 %g, %a, %m;
mov.u32 %l, %lanemask_lt;
popc.b32 %n, %l;
brev.b32 %x, %g;
bfind.shiftamt.u32 %x, %x;
shfl.sync.idx.b32 %x, %x, %x, 31, %g;
cvt.u64.u32 %v, %g;
shl.b64 %v, %v, 32;
cvt.u64.u32 %a, %n;
or.b64 %v, %v, %a;
cvt.u64.u32 %a, %x;
shl.b64 %a, %a, 16;
or.b64 %v, %v, %a;
st.param.b64 [r], %v;
ret;`)
	m, err := ptxinterp.Load(src)
	if err != nil {
		t.Fatal(err)
	}
	th := ptxinterp.Thread0()
	th.LaneID = 5
	r, err := m.Call("f", th, 0)
	if err != nil {
		t.Fatal(err)
	}
	// group = 1<<5, lanes below = popc(0x1f) = 5, the leader's lane = 5
	if want := uint64(1<<5)<<32 | 5<<16 | 5; r != want {
		t.Errorf("got %#x, want %#x", r, want)
	}
	for name, tc := range map[string]struct{ body, want string }{
		"mask without the lane": {".reg .b32 %g;\nmatch.any.sync.b32 %g, 1, 2;\nret;", "leaves out the thread's own lane 0"},
		"shuffle from a lane":   {".reg .b32 %g;\nshfl.sync.idx.b32 %g, 1, 3, 31, 1;\nret;", "another thread's register"},
	} {
		m, err := ptxinterp.Load(fn(tc.body))
		if err == nil {
			_, err = m.Call("f", ptxinterp.Thread0(), 0)
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", name, err, tc.want)
		}
	}
}
