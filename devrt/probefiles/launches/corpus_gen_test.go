package launches

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestWriteCorpus writes the seed corpus of FuzzDecode (run with
// GPUEXT_WRITE_CORPUS=1 after a layout change; the files are committed).
func TestWriteCorpus(t *testing.T) {
	if os.Getenv("GPUEXT_WRITE_CORPUS") != "1" {
		t.Skip("GPUEXT_WRITE_CORPUS=1 rewrites testdata/fuzz/FuzzDecode")
	}
	huge := Encode(sample())
	binary.LittleEndian.PutUint32(huge[hdrOffNRows:], 0xffffffff)
	for name, b := range map[string][]byte{
		"sample": Encode(sample()), "empty": Encode(&File{PID: 1}), "prefix": Encode(sample())[:HeaderSize+CoverageSize],
		"huge-rows": huge,
	} {
		p := filepath.Join("testdata", "fuzz", "FuzzDecode", name)
		if err := os.WriteFile(p, fmt.Appendf(nil, "go test fuzz v1\n[]byte(%q)\n", b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
