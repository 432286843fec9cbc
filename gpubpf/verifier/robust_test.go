package verifier

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/gpuext/gpuext/gpubpf/abi"
)

// Random instruction streams (decoded from random bytes, biased towards
// valid opcodes and small registers) are rejected or accepted, never a
// panic or an error that is not an *Error.
func TestRandomProgramsDoNotPanic(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	opcodes := []byte{0x07, 0x0f, 0x17, 0x1f, 0x27, 0x37, 0x47, 0x4f, 0x57, 0x5f, 0x67, 0x6f, 0x77, 0x7f, 0x87, 0x97, 0xa7, 0xaf, 0xb7, 0xbf, 0xc7, 0xcf,
		0x04, 0x0c, 0x14, 0x24, 0x34, 0x54, 0x64, 0x74, 0x84, 0xa4, 0xb4, 0xbc, 0xc4, 0xd4, 0xdc,
		0x15, 0x1d, 0x25, 0x2d, 0x35, 0x45, 0x55, 0x5d, 0x65, 0x75, 0xa5, 0xb5, 0xc5, 0xd5, 0x16, 0x56, 0xa6, 0x85,
		0x61, 0x69, 0x71, 0x79, 0x62, 0x6a, 0x72, 0x7a, 0x63, 0x6b, 0x73, 0x7b, 0xc3, 0xdb, 0x18, 0x20, 0x91}
	defer func(n int) { maxExplored = n }(maxExplored)
	maxExplored = 5000
	accepted, kinds := 0, map[string]int{}
	for i := 0; i < 3000; i++ {
		n := 1 + r.IntN(24)
		var buf bytes.Buffer
		for reg := byte(0); reg < 10; reg++ {
			binary.Write(&buf, binary.LittleEndian, struct {
				Op, Regs byte
				Off      int16
				Imm      int32
			}{0xb7, reg, 0, int32(r.IntN(16))})
		}
		for j := 0; j < n; j++ {
			op := opcodes[r.IntN(len(opcodes))]
			regs := byte(r.IntN(11)) | byte(r.IntN(11))<<4
			off := int16(r.IntN(40) - 20)
			if op&0x07 >= 1 && op&0x07 <= 3 {
				off = int16(-8 * r.IntN(70))
			}
			imm := int32(r.IntN(64) - 8)
			if op&0x07 == 5 || op&0x07 == 6 {
				off = int16(r.IntN(n-j)) - int16(r.IntN(2)*r.IntN(4))
			}
			if op == 0x85 {
				imm = []int32{1, 2, 3, 5, 6, 8, 12, 130, 2001, 2006, 2010, 9999}[r.IntN(12)]
				regs = 0
			}
			binary.Write(&buf, binary.LittleEndian, struct {
				Op   byte
				Regs byte
				Off  int16
				Imm  int32
			}{op, regs, off, imm})
			if op == 0x18 {
				binary.Write(&buf, binary.LittleEndian, uint64(0))
				j++
			}
		}
		binary.Write(&buf, binary.LittleEndian, [8]byte{0x95})
		var insns asm.Instructions
		for buf.Len() > 0 {
			var ins asm.Instruction
			if err := ins.Unmarshal(&buf, binary.LittleEndian, "linux"); err != nil {
				break
			}
			insns = append(insns, ins)
		}
		if len(insns) == 0 {
			continue
		}
		_, err := Verify(&ebpf.ProgramSpec{Name: "rnd", Instructions: insns}, testMaps, abi.KernelEntry)
		var ve *Error
		if err != nil && !errors.As(err, &ve) {
			t.Fatalf("program %d: non-verifier error %v\n%v", i, err, insns)
		}
		if err == nil {
			accepted++
		} else {
			kinds[ve.Kind.Error()]++
		}
	}
	t.Logf("accepted %d; rejected by kind %v", accepted, kinds)
}
