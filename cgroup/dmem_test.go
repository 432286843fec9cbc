package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/lib/tenantfs"
)

func TestNormalizePCIBusID(t *testing.T) {
	for in, want := range map[string]string{
		"00000000:17:00.0": "0000:17:00.0", // NVML's form
		"0000:17:00.0":     "0000:17:00.0",
		"0000:AB:1F.7":     "0000:ab:1f.7",
		"17:00.0":          "0000:17:00.0",
		"10000:01:00.0":    "10000:01:00.0", // a VMD domain keeps its digits
	} {
		got, err := NormalizePCIBusID(in)
		if err != nil || got != want {
			t.Errorf("NormalizePCIBusID(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "17", "0000:17:00", "0000:17:20.0", "0000:17:00.8", "0000:117:00.0",
		"0000:zz:00.0", "0000:17:00.0:1", "0000:-1:00.0", "0000:+1:00.0", strings.Repeat("0", 40) + ":17:00.0", "0000:17:00.0/../x"} {
		if got, err := NormalizePCIBusID(in); !errors.Is(err, ErrBadPCIBusID) || !strings.Contains(err.Error(), "DOMAIN:BUS") {
			t.Errorf("NormalizePCIBusID(%q) = %q, %v; want ErrBadPCIBusID naming the form", in, got, err)
		}
	}
	if r, err := NVIDIARegion("00000000:5E:00.0"); err != nil || r != "nvidia/0000:5e:00.0/vidmem" {
		t.Errorf("NVIDIARegion = %q, %v", r, err)
	}
}

func TestParseDmemCapacity(t *testing.T) {
	got, err := ParseDmemCapacity([]byte("nvidia/0000:17:00.0/vidmem 85899345920\nnvidia/0000:18:00.0/vidmem 85899345920\n"))
	if err != nil || len(got) != 2 || got[1] != (DmemRegion{Name: "nvidia/0000:18:00.0/vidmem", Bytes: 85899345920}) {
		t.Fatalf("ParseDmemCapacity = %v, %v", got, err)
	}
	if got, err := ParseDmemCapacity(nil); err != nil || len(got) != 0 {
		t.Fatalf("empty dmem.capacity (no driver registered a region) = %v, %v", got, err)
	}
	if _, err := ParseDmemCapacity([]byte("nvidia/0000:17:00.0/vidmem max\n")); !errors.Is(err, ErrBadDmemFile) {
		t.Fatalf("capacity 'max' accepted: %v", err)
	}
}

// TestParseDmemValuesHostile: odd or hostile content is an error naming the
// line, never a guess; sizes and counts are bounded.
func TestParseDmemValuesHostile(t *testing.T) {
	good, err := ParseDmemValues([]byte("nvidia/0000:17:00.0/vidmem 4294967296\n\ndrm/0000:03:00.0/vram0 max\n"))
	if err != nil || good["nvidia/0000:17:00.0/vidmem"] != (DmemValue{Bytes: 4 << 30}) ||
		!good["drm/0000:03:00.0/vram0"].Unlimited || len(good) != 2 {
		t.Fatalf("ParseDmemValues = %v, %v", good, err)
	}
	var many strings.Builder
	for i := 0; i <= maxDmemRegions; i++ {
		fmt.Fprintf(&many, "nvidia/%d/vidmem 1\n", i)
	}
	for name, data := range map[string]string{
		"one field":      "nvidia/0000:17:00.0/vidmem\n",
		"three fields":   "nvidia/0000:17:00.0/vidmem 1 2\n",
		"negative":       "nvidia/0000:17:00.0/vidmem -1\n",
		"plus sign":      "nvidia/0000:17:00.0/vidmem +1\n",
		"overflow":       "nvidia/0000:17:00.0/vidmem 18446744073709551616\n",
		"hex":            "nvidia/0000:17:00.0/vidmem 0x10\n",
		"unit":           "nvidia/0000:17:00.0/vidmem 4G\n",
		"twice":          "a 1\na 2\n",
		"control byte":   "nvidia/\x01/vidmem 1\n",
		"non-ascii":      "nvidia/é/vidmem 1\n",
		"long name":      strings.Repeat("n", maxRegionName+1) + " 1\n",
		"too many":       many.String(),
		"too big":        strings.Repeat("#", maxDmemFile+1),
		"binary garbage": "\x00\x00\x00\x00",
	} {
		_, err := ParseDmemValues([]byte(data))
		if !errors.Is(err, ErrBadDmemFile) {
			t.Errorf("%s: err %v, want ErrBadDmemFile", name, err)
		}
		if name != "too big" && err != nil && !strings.Contains(err.Error(), "line ") {
			t.Errorf("%s: error %q does not name the line", name, err)
		}
	}
}

// dmemTree is a v2 fixture whose root offers dmem with one region.
func dmemTree(t *testing.T) *hostTree {
	h := newHostTree(t, LayoutV2)
	h.write(CgroupMount+"/"+controllersFile, "cpu memory pids dmem\n")
	h.write(CgroupMount+"/"+dmemCapacityFile, "nvidia/0000:ee:00.0/vidmem 1073741824\n")
	h.write(CgroupMount+"/"+subtreeControlFile, "cpu memory\n")
	h.write(CgroupMount+"/kubepods/"+subtreeControlFile, "cpu memory dmem\n")
	h.write(CgroupMount+"/kubepods/pod1/"+subtreeControlFile, "")
	h.write(CgroupMount+"/kubepods/pod1/ctr/"+dmemMaxFile, "nvidia/0000:ee:00.0/vidmem max\n")
	h.write(CgroupMount+"/kubepods/pod1/ctr/"+dmemCurrentFile, "nvidia/0000:ee:00.0/vidmem 12345\n")
	return h
}

func (h *hostTree) read(p string) string {
	h.t.Helper()
	b, err := os.ReadFile(filepath.Join(h.root, p))
	if err != nil {
		h.t.Fatal(err)
	}
	return string(b)
}

func TestDmemDetect(t *testing.T) {
	r := dmemTree(t).resolver()
	d, err := r.Dmem()
	if err != nil || !d.Controller || len(d.Regions) != 1 {
		t.Fatalf("Dmem() = %+v, %v", d, err)
	}
	if reg, ok := d.Region("nvidia/0000:ee:00.0/vidmem"); !ok || reg.Bytes != 1<<30 {
		t.Fatalf("Region = %+v, %v", reg, ok)
	}
	if _, ok := d.Region("nvidia/0000:17:00.0/vidmem"); ok {
		t.Fatal("a region no driver registered was found")
	}

	// A kernel without the controller (6.12, the lent GPU machines): no
	// error, no controller, and EnableDmem says why.
	plain := newHostTree(t, LayoutV2)
	plain.mkcg("/kubepods/ctr")
	d, err = plain.resolver().Dmem()
	if err != nil || d.Controller {
		t.Fatalf("no dmem: Dmem() = %+v, %v", d, err)
	}
	if _, err := plain.resolver().EnableDmem("/kubepods/ctr"); !errors.Is(err, ErrNoDmem) {
		t.Fatalf("EnableDmem without the controller: %v", err)
	}
	// The controller but no region (NVIDIA before r615): no regions, no error.
	noreg := newHostTree(t, LayoutV2)
	noreg.write(CgroupMount+"/"+controllersFile, "cpu dmem\n")
	noreg.write(CgroupMount+"/"+dmemCapacityFile, "")
	if d, err := noreg.resolver().Dmem(); err != nil || !d.Controller || len(d.Regions) != 0 {
		t.Fatalf("controller without regions: %+v, %v", d, err)
	}
	// A v1-only host has no v2 tree at all.
	if d, err := newHostTree(t, LayoutV1).resolver().Dmem(); err != nil || d.Controller {
		t.Fatalf("v1 host: %+v, %v", d, err)
	}
}

func TestEnableDmem(t *testing.T) {
	h := dmemTree(t)
	r := h.resolver()
	enabled, err := r.EnableDmem("/kubepods/pod1/ctr")
	if err != nil {
		t.Fatal(err)
	}
	// The root and pod1 lacked it; kubepods had it; ctr itself is not touched.
	if strings.Join(enabled, ",") != "/,/kubepods/pod1" {
		t.Fatalf("enabled %v, want [/ /kubepods/pod1]", enabled)
	}
	// (a plain file is overwritten in place, not truncated: cgroupfs takes the write as a command)
	if got := h.read(CgroupMount + "/" + subtreeControlFile); !strings.HasPrefix(got, "+dmem") {
		t.Fatalf("root subtree_control = %q, want +dmem written", got)
	}
	if got := h.read(CgroupMount + "/kubepods/" + subtreeControlFile); got != "cpu memory dmem\n" {
		t.Fatalf("kubepods subtree_control rewritten: %q", got)
	}
	if _, err := os.Stat(filepath.Join(h.root, CgroupMount, "kubepods/pod1/ctr", subtreeControlFile)); err == nil {
		t.Fatal("the tenant's own subtree_control was written")
	}
	if _, err := r.EnableDmem("/"); !errors.Is(err, ErrRootCgroup) {
		t.Fatalf("EnableDmem(/) = %v", err)
	}
	if _, err := r.EnableDmem("/kubepods/../../etc"); !errors.Is(err, ErrInvalidPath) {
		t.Fatalf("EnableDmem(..) = %v", err)
	}
	// A missing ancestor names the cgroup.
	if _, err := r.EnableDmem("/nope/ctr"); err == nil || !strings.Contains(err.Error(), `"/nope"`) {
		t.Fatalf("EnableDmem(/nope/ctr) = %v, want an error naming /nope", err)
	}
}

func TestSetDmemMaxAndRead(t *testing.T) {
	h := dmemTree(t)
	r := h.resolver()
	const ctr = "/kubepods/pod1/ctr"
	if err := r.SetDmemMax(ctr, "nvidia/0000:ee:00.0/vidmem", DmemValue{Bytes: 4 << 20}); err != nil {
		t.Fatal(err)
	}
	if got := h.read(CgroupMount + ctr + "/" + dmemMaxFile); !strings.HasPrefix(got, "nvidia/0000:ee:00.0/vidmem 4194304") {
		t.Fatalf("dmem.max = %q", got)
	}
	max, err := r.DmemMax(ctr)
	if err != nil || max["nvidia/0000:ee:00.0/vidmem"] != (DmemValue{Bytes: 4 << 20}) {
		t.Fatalf("DmemMax = %v, %v", max, err)
	}
	cur, err := r.DmemCurrent(ctr)
	if err != nil || cur["nvidia/0000:ee:00.0/vidmem"].Bytes != 12345 {
		t.Fatalf("DmemCurrent = %v, %v", cur, err)
	}
	if err := r.SetDmemMax(ctr, "nvidia/x 1\nother", DmemValue{Unlimited: true}); !errors.Is(err, ErrBadDmemFile) {
		t.Fatalf("a region with a newline was written: %v", err)
	}
	// No dmem.max (dmem not enabled along the path): the error names the cgroup.
	h.mkcg("/kubepods/pod2")
	if err := r.SetDmemMax("/kubepods/pod2", "nvidia/0000:ee:00.0/vidmem", DmemValue{Bytes: 1}); err == nil ||
		!strings.Contains(err.Error(), "/kubepods/pod2") {
		t.Fatalf("SetDmemMax without dmem.max = %v", err)
	}
}

// TestDmemNoFollow: a link where a cgroup directory or a dmem file should be
// (a tree a tenant could shape) is refused, never followed; a file that is
// too big is refused before it is parsed.
func TestDmemNoFollow(t *testing.T) {
	h := dmemTree(t)
	r := h.resolver()
	outside := filepath.Join(h.root, "outside")
	h.write("/outside/"+dmemMaxFile, "nvidia/0000:ee:00.0/vidmem 1\n")
	h.write("/outside/"+dmemCurrentFile, "nvidia/0000:ee:00.0/vidmem 1\n")
	if err := os.Symlink(outside, filepath.Join(h.v2Root(), "kubepods/pod1/linked")); err != nil {
		t.Fatal(err)
	}
	if err := r.SetDmemMax("/kubepods/pod1/linked", "nvidia/0000:ee:00.0/vidmem", DmemValue{Bytes: 2}); !errors.Is(err, tenantfs.ErrRefused) {
		t.Fatalf("SetDmemMax through a linked directory: %v", err)
	}
	if got := h.read("/outside/" + dmemMaxFile); got != "nvidia/0000:ee:00.0/vidmem 1\n" {
		t.Fatalf("the link's target was written: %q", got)
	}
	dir, _ := h.mkcg("/kubepods/pod1/ctr2")
	if err := os.Symlink(filepath.Join(outside, dmemCurrentFile), filepath.Join(dir, dmemCurrentFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.DmemCurrent("/kubepods/pod1/ctr2"); !errors.Is(err, tenantfs.ErrSymlink) {
		t.Fatalf("DmemCurrent through a linked file: %v", err)
	}
	if err := os.Symlink(filepath.Join(outside, dmemMaxFile), filepath.Join(dir, dmemMaxFile)); err != nil {
		t.Fatal(err)
	}
	if err := r.SetDmemMax("/kubepods/pod1/ctr2", "nvidia/0000:ee:00.0/vidmem", DmemValue{Bytes: 2}); !errors.Is(err, tenantfs.ErrSymlink) {
		t.Fatalf("SetDmemMax through a linked file: %v", err)
	}
	h.write(CgroupMount+"/kubepods/pod1/ctr/"+dmemCurrentFile, strings.Repeat("x", maxDmemFile+1))
	if _, err := r.DmemCurrent("/kubepods/pod1/ctr"); !errors.Is(err, tenantfs.ErrTooBig) {
		t.Fatalf("DmemCurrent of a huge file: %v", err)
	}
}
