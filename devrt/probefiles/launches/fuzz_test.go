package launches

import (
	"bytes"
	"testing"
)

// FuzzDecode: no input makes Decode panic or hang; what it accepts encodes
// back to the same bytes (nothing read is lost or invented), and a Table
// takes it. The committed corpus (testdata/fuzz/FuzzDecode) holds the
// interposer's shapes: a sample, its prefix, a file with no rows.
func FuzzDecode(f *testing.F) {
	f.Add(Encode(sample()))
	f.Add(Encode(&File{PID: 1}))
	f.Add(Encode(sample())[:HeaderSize+CoverageSize])
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := Decode(b)
		if err != nil {
			return
		}
		if again := Encode(d); !bytes.Equal(again, b) {
			t.Fatalf("decoded %d bytes, encode gives %d others", len(b), len(again))
		}
		tab := NewTable()
		tab.Add(d)
		tab.Sort()
		if len(tab.Kernels) > Top+len(Measures) {
			t.Fatalf("%d rows", len(tab.Kernels))
		}
	})
}
